"""Initial MIG layouts that vary per GPU: a cycled list, or one matched to the workload's mix.

A static-layout comparison only says something about placement when the layouts can serve
the workload: with every GPU at ``all-balanced`` no 7g.80gb or 4g.40gb request ever runs,
whatever the scorer. Two ways to give GPUs different layouts:

- **cycled**: ``--layout "7g.80gb;7g.80gb;4g.40gb,3g.40gb"`` — per-GPU layouts separated by
  ``;`` (each a named config such as ``all-balanced`` or a comma-separated profile list). The
  cluster's GPUs, counted across nodes in node-list order, take them in turn: GPU *i* gets
  layout *i* mod *k*. The counter runs on from one node to the next, so the cluster holds the
  list's mix exactly (up to one round) even when nodes have fewer GPUs than the list.
- **demand-matched**: derived from the workload's instances (``PodSpec.expected`` × its
  containers; fill mode draws pods uniformly, so this is the arrival mix):

  1. scale each profile's instance count *n_p* so that Σ *n_p* × compute slices equals the
     cluster's capacity (GPUs × 7 on an A100), rounded by largest remainder;
  2. pack them first-fit decreasing (largest memory, then compute, first) onto the GPUs:
     an instance goes to the first already-opened GPU *layout kind* (in the order kinds were
     opened) that still has room for it, else opens a new GPU while GPUs remain, else is
     dropped;
  3. fill what each GPU has left with the largest demanded profile that still fits (then
     the next largest), so no slice is left unconfigured; unopened GPUs take the most
     demanded profile's ``all-<profile>`` layout;
  4. give each node one kind for all its GPUs (so 8 × 7g.80gb requests find whole nodes),
     spreading the kinds over the node list by smooth weighted round-robin on GPU counts,
     so every stretch of nodes holds the mix (``spread``).

  Deterministic: the same workload and GPU count give the same layouts.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Mapping, Sequence

from migfit import errors, layouts, migparted, profiles
from migfit.simulate import spec, workload

Layout = tuple[profiles.ProfileName, ...]
DEMAND_MATCHED = "demand-matched"


def parse_option(text: str) -> list[str | list[str]]:
    """``--layout`` text -> one entry per GPU in the cycle (a named config or profile list)."""
    out: list[str | list[str]] = []
    for item in text.split(";"):
        item = item.strip()
        if not item:
            raise errors.UsageError(f"--layout {text!r}: an empty per-GPU layout (two ';' in a "
                                    f"row, or one at an end)")
        if "," in item or not item.startswith("all-"):
            out.append([p.strip() for p in item.split(",") if p.strip()])
        else:
            out.append(item)
    return out


def instance_mix(pods: Sequence[workload.PodSpec], model: profiles.GpuModel | None = None
                 ) -> Counter[str]:
    """Instances per profile that the workload's GPU pods ask for (by the mapping).

    With ``model``, in that model's profiles: the mapping's profile where the model has it,
    else each container's smallest fitting profile of the model by the pod's request (a
    mixed cluster's other models: the mapping names the reference model's profiles); pods
    the model cannot hold are left out."""
    mix: Counter[str] = Counter()
    for p in pods:
        if not p.gpu:
            continue
        if p.explicit:
            if model is None or all(model.has_profile(q) for q in p.explicit):
                mix.update(p.explicit)
        elif p.expected is not None and (model is None or model.has_profile(p.expected)):
            mix[p.expected] += p.containers
        elif model is not None:
            fits = [workload.smallest_fit(model, r) for r in workload.gpu_requests(p)]
            if fits and all(f is not None for f in fits):
                mix.update(f.name for f in fits if f is not None)
    return mix


def _order(model: profiles.GpuModel, name: str) -> tuple[int, int, str]:
    p = model.profile(name)
    return (-p.memory_slices, -p.compute_slices, name)


def _fits(model: profiles.GpuModel, names: Sequence[str]) -> bool:
    return bool(layouts.check(model, names).valid)


def demand_matched(model: profiles.GpuModel, mix: Mapping[str, int], gpus: int
                   ) -> Counter[Layout]:
    """How many of ``gpus`` GPUs take each layout so the instance mix follows ``mix``
    (steps 1–3 of the module doc)."""
    wanted = {p: n for p, n in mix.items() if n > 0 and model.has_profile(p)}
    if gpus <= 0:
        return Counter()
    if not wanted:
        raise errors.UsageError(f"demand-matched: the workload asks for no profile of "
                                f"{model.id}")
    slices = sum(n * model.profile(p).compute_slices for p, n in wanted.items())
    factor = gpus * model.compute_slices / slices
    exact = {p: n * factor for p, n in wanted.items()}
    counts = {p: int(v) for p, v in exact.items()}
    short = gpus * model.compute_slices - sum(c * model.profile(p).compute_slices
                                              for p, c in counts.items())
    for p in sorted(exact, key=lambda q: (-(exact[q] - counts[q]), _order(model, q))):
        size = model.profile(p).compute_slices
        if size <= short:
            counts[p] += 1
            short -= size
    by_size = sorted(counts, key=lambda q: _order(model, q))
    # First-fit decreasing over layout kinds: kind -> how many GPUs hold it now.
    kinds: dict[Layout, int] = {}
    opened = 0
    for p in by_size:
        for _ in range(counts[p]):
            for kind in kinds:
                grown = tuple(sorted((*kind, profiles.ProfileName(p))))
                if _fits(model, grown):
                    kinds[kind] -= 1
                    if not kinds[kind]:
                        del kinds[kind]
                    kinds[grown] = kinds.get(grown, 0) + 1
                    break
            else:
                if opened < gpus:
                    opened += 1
                    one = (profiles.ProfileName(p),)
                    kinds[one] = kinds.get(one, 0) + 1
    most = max(wanted, key=lambda q: (wanted[q], _order(model, q)))
    if opened < gpus:
        kinds[()] = gpus - opened
    final: Counter[Layout] = Counter()
    for kind, k in kinds.items():
        names: list[str] = list(kind)
        if not names:
            names = [most]
            while _fits(model, [*names, most]):
                names.append(most)
        for p in by_size:
            while _fits(model, [*names, p]):
                names.append(p)
        final[tuple(profiles.ProfileName(n) for n in sorted(names))] += k
    return final


def spread(nodes: Sequence[spec.NodeSpec], counts: Mapping[Layout, int]
           ) -> list[spec.NodeSpec]:
    """Whole nodes take one layout kind each, by smooth weighted round-robin over GPUs (step
    4): in node order, every kind gains its share of the node's GPUs in credit, the kind with
    the most credit (ties: layout order) takes the node and pays its GPUs. Every GPU of a
    node alike keeps multi-GPU requests (8 × 7g.80gb) servable; the kinds' GPU counts match
    ``counts`` to within one node's GPUs."""
    kinds = sorted(k for k, n in counts.items() if n > 0)
    total = sum(counts[k] for k in kinds)
    if not kinds or not total:
        raise errors.UsageError("demand-matched: no layout to spread")
    credit = dict.fromkeys(kinds, 0.0)
    out: list[spec.NodeSpec] = []
    for n in nodes:
        for k in kinds:
            credit[k] += counts[k] * n.gpus / total
        pick = kinds[max(range(len(kinds)), key=lambda i: (credit[kinds[i]], -i))]
        credit[pick] -= n.gpus
        lays = (pick,) * n.gpus
        out.append(dataclasses.replace(n, gpu_layouts=lays, config=migparted.custom_name(lays)))
    return out


def resolve(model: profiles.GpuModel, entries: Sequence[str | Sequence[str]], *, where: str
            ) -> list[Layout]:
    """Each ``parse_option`` entry as one GPU's valid layout (a ConfigError when invalid)."""
    return [spec.resolve_layout(model, e, where=where)[0] for e in entries]


def assign(nodes: Sequence[spec.NodeSpec], cycle: Sequence[Layout]) -> list[spec.NodeSpec]:
    """The nodes with their GPUs taking ``cycle``'s layouts in turn, across nodes in order.

    A node whose GPUs all got the same layout keeps a readable config name
    (``migparted.custom_name``); a mixed one gets the hashed custom name.
    """
    if not cycle:
        raise errors.UsageError("--layout names no per-GPU layout")
    out: list[spec.NodeSpec] = []
    i = 0
    for n in nodes:
        lays = tuple(cycle[(i + k) % len(cycle)] for k in range(n.gpus))
        i += n.gpus
        out.append(dataclasses.replace(n, gpu_layouts=lays,
                                       config=migparted.custom_name(lays)))
    return out


# ---------------------------------------------------------------- named configs in proportions


def parse_proportions(text: str) -> list[tuple[str, float]] | None:
    """``all-balanced=50%,all-1g.10gb=25%,all-7g.80gb=25%`` -> [(config, share)]; None when
    ``text`` is not of that form. Shares are normalised (they need not add up to 100 %)."""
    if "=" not in text:
        return None
    out: list[tuple[str, float]] = []
    for item in text.split(","):
        name, eq, share = item.strip().partition("=")
        name, share = name.strip(), share.strip().removesuffix("%")
        try:
            value = float(share)
        except ValueError:
            value = -1.0
        if not eq or not name or not (math.isfinite(value) and value >= 0):
            raise errors.UsageError(f"--layout {item.strip()!r}: use CONFIG=SHARE%, e.g. "
                                    f"all-balanced=50%")
        out.append((name, value))
    if sum(v for _, v in out) <= 0:
        raise errors.UsageError(f"--layout {text!r}: the shares add up to 0")
    return out


def proportions(nodes: Sequence[spec.NodeSpec], shares: Sequence[tuple[str, float]]
                ) -> list[spec.NodeSpec]:
    """Whole nodes take one named config each, so that each config's share of the GPUs
    follows ``shares`` (to within one node's GPUs; ``spread``'s smooth round-robin), per
    GPU model; a node keeps the config's name as its ``nvidia.com/mig.config``."""
    total = sum(v for _, v in shares)
    by_model: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        if n.gpus:
            by_model.setdefault(n.model.id, []).append(i)
    out = list(nodes)
    for positions in by_model.values():
        group = [nodes[i] for i in positions]
        model = group[0].model
        gpus = sum(n.gpus for n in group)
        names: dict[Layout, str] = {}
        counts: Counter[Layout] = Counter()
        for name, share in shares:
            lay, _ = spec.resolve_layout(model, name, where="--layout")
            names.setdefault(lay, name)
            counts[lay] += round(gpus * share / total)
        spread_out = spread(group, counts)
        for i, n in zip(positions, spread_out, strict=True):
            out[i] = dataclasses.replace(n, config=names[n.gpu_layouts[0]])
    return out


def history_split(pods: Sequence[workload.PodSpec], share: float
                  ) -> tuple[list[workload.PodSpec], list[workload.PodSpec]]:
    """The pod list (in creation order) cut in two: the first ``share`` sizes the layouts
    (``history``), the rest is replayed."""
    if not 0 < share < 1:
        raise errors.UsageError(f"--history-share {share:g}: use a share between 0 and 1")
    cut = max(1, min(len(pods) - 1, round(len(pods) * share)))
    return list(pods[:cut]), list(pods[cut:])
