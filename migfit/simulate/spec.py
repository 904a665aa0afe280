"""The simulated cluster's inputs: node groups from a YAML spec or from the trace's node CSV.

A spec file (strict; unknown keys are errors)::

    version: v1
    nodes:
    - name: a100          # name prefix; nodes are a100-000, a100-001, ...
      count: 4
      model: A100-80GB
      gpus: 8
      cpu: "64"           # a Kubernetes quantity (or cpu_milli: 64000)
      memory: 512Gi
      layout: all-balanced                                   # a named config, or
      # layout: ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"] # the same on every GPU, or
      # layouts: [[...], [...]]                              # one list per GPU

Named configs follow mig-parted's ``all-<profile>`` and ``all-balanced`` conventions
(``namedconfigs``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

import pydantic

from migfit import errors, layouts, profiles, quantity, strictfiles
from migfit.simulate import csvrows, namedconfigs


@dataclasses.dataclass(frozen=True, slots=True)
class NodeSpec:
    """One simulated node: its model, each GPU's initial layout, cpu and memory."""

    name: str
    model: profiles.GpuModel
    gpu_layouts: tuple[tuple[profiles.ProfileName, ...], ...]
    cpu_milli: int
    memory_mib: int
    config: str  # the mig-parted config name the node is labelled with
    trace_model: str = ""  # the trace's GPU model of the node (node list ``model``), if any

    @property
    def gpus(self) -> int:
        return len(self.gpu_layouts)


class _Group(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    name: str = pydantic.Field(min_length=1)
    count: int = pydantic.Field(ge=1, le=100_000)
    model: str
    gpus: int = pydantic.Field(ge=0, le=64)  # 0: a cpu-only node group
    cpu: str | int | float | None = None
    cpu_milli: int | None = pydantic.Field(default=None, ge=1)
    memory: str | int | None = None
    layout: str | list[str] | None = None
    layouts: list[list[str]] | None = None


SPEC_FILE = ("a cluster spec is YAML with `version: v1` and `nodes:`, a list of node groups "
             "(name, count, model, gpus, cpu, memory, layout or layouts)")
"""What ``migfit simulate --cluster SPEC.yaml`` must be, said after each problem found in one."""


class _Spec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    version: str = "v1"
    nodes: list[_Group] = pydantic.Field(min_length=1)


def resolve_layout(
    model: profiles.GpuModel, layout: str | Sequence[str], *, where: str
) -> tuple[tuple[profiles.ProfileName, ...], str]:
    """A named config or an explicit profile list -> one GPU's valid layout and a config name."""
    if isinstance(layout, str):
        names = namedconfigs.layout(model, layout)
        config = layout
    else:
        names = [model.profile(n).name for n in layout]
        config = "custom-" + "-".join(sorted(names))
    fit = layouts.check(model, names)
    if not fit.valid:
        reason = fit.reason.message if fit.reason else "invalid"
        raise errors.ConfigError(f"{where}: layout {' '.join(names)} does not fit one "
                                 f"{model.id}: {reason}")
    return tuple(profiles.ProfileName(n) for n in sorted(names)), config


def _cpu(group: _Group, where: str) -> int:
    if group.cpu_milli is not None:
        return group.cpu_milli
    if group.cpu is None:
        raise errors.ConfigError(f"{where}: give cpu (e.g. \"64\") or cpu_milli")
    milli = math.ceil(quantity.parse(str(group.cpu)) * 1000)
    if milli < 1:
        raise errors.ConfigError(f"{where}: cpu {group.cpu}: a node needs cpu (e.g. \"64\")")
    return milli


def _memory(group: _Group, where: str) -> int:
    if group.memory is None:
        raise errors.ConfigError(f"{where}: give memory (e.g. 512Gi)")
    mib = quantity.parse_bytes(str(group.memory)) // (1024 * 1024)
    if mib < 1:
        raise errors.ConfigError(f"{where}: memory {group.memory}: a node needs at least "
                                 f"1Mi (e.g. 512Gi)")
    return mib


def load_spec(path: Path, catalog: profiles.Catalog) -> list[NodeSpec]:
    """Node specs from a YAML cluster spec file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise errors.ConfigError(f"cannot read cluster spec {path}: {exc.strerror}") from None
    text = strictfiles.text(data, where=str(path))
    spec = strictfiles.validate(_Spec, strictfiles.load_yaml(text, where=str(path)),
                                where=str(path), expected=SPEC_FILE)
    strictfiles.require_version(spec.version, where=str(path))
    out: list[NodeSpec] = []
    seen: set[str] = set()
    for i, group in enumerate(spec.nodes):
        where = f"{path}: nodes[{i}] ({group.name})"
        if group.name in seen:
            raise errors.ConfigError(f"{where}: the name prefix is used twice")
        seen.add(group.name)
        model = catalog.get(group.model)
        if group.gpus == 0:
            if group.layout is not None or group.layouts is not None:
                raise errors.ConfigError(f"{where}: a cpu-only group (gpus: 0) has no layout")
            gpu_layouts: tuple[tuple[profiles.ProfileName, ...], ...] = ()
            config = ""
        elif group.layouts is not None:
            if group.layout is not None:
                raise errors.ConfigError(f"{where}: give layout or layouts, not both")
            if len(group.layouts) != group.gpus:
                raise errors.ConfigError(f"{where}: layouts has {len(group.layouts)} entries "
                                         f"for {group.gpus} GPUs")
            per_gpu = [resolve_layout(model, lay, where=where) for lay in group.layouts]
            gpu_layouts = tuple(lay for lay, _ in per_gpu)
            config = f"custom-{group.name}"
        else:
            lay, config = resolve_layout(model, group.layout or "all-balanced", where=where)
            gpu_layouts = (lay,) * group.gpus
        cpu, mem = _cpu(group, where), _memory(group, where)
        width = max(3, len(str(group.count - 1)))
        out.extend(NodeSpec(name=f"{group.name}-{k:0{width}d}", model=model,
                            gpu_layouts=gpu_layouts, cpu_milli=cpu, memory_mib=mem,
                            config=config, trace_model=model.id if group.gpus else "")
                   for k in range(group.count))
    return out


# The trace's GPU models (node list ``model``) -> MIG models. None of them has MIG; by default
# every one is treated as an A100-80GB so that the trace mapping has one reference model and
# figures stay comparable with FGD's (who treat every GPU alike). ``--model-map`` changes it.
DEFAULT_MODEL = "A100-80GB"


def parse_model_map(text: str, catalog: profiles.Catalog) -> dict[str, profiles.GpuModel]:
    """``--model-map V100M32=A100-80GB,T4=A30-24GB`` (``*=MODEL`` for every other model);
    each trace model once (``load_node_csv`` checks that the node list has them)."""
    out: dict[str, profiles.GpuModel] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        trace, eq, mig = item.partition("=")
        if not eq or not trace.strip() or not mig.strip():
            raise errors.UsageError(f"--model-map {item!r}: use TRACE_MODEL=MIG_MODEL, e.g. "
                                    f"V100M32=A100-80GB")
        name = trace.strip()
        if name in out:
            raise errors.UsageError(f"--model-map names {name} twice; give each trace model "
                                    f"once")
        try:
            out[name] = catalog.get(mig.strip())
        except errors.UnknownModelError as exc:
            raise errors.UsageError(f"--model-map {item!r}: {exc}") from None
    return out


NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu")


def load_node_csv(path: Path, *, model: profiles.GpuModel, layout: str | Sequence[str],
                  model_map: dict[str, profiles.GpuModel] | None = None) -> list[NodeSpec]:
    """The trace's node list (``sn,cpu_milli,memory_mib,gpu,model``).

    Each node keeps its trace model (``trace_model``, for the pods' ``gpu_spec``); its GPUs
    are ``model_map[trace model]``, else ``model_map["*"]``, else ``model``. A node with no
    GPU is kept as a cpu-only node (it takes cpu-only pods). A ``model_map`` key that no
    GPU node of the list has (but ``*``) is refused.
    """
    mapping = dict(model_map or {})
    out: list[NodeSpec] = []
    lines: dict[str, int] = {}  # node name -> its line
    has_model = False
    for row in csvrows.rows(path, what="the trace's node list", columns=NODE_COLUMNS):
        has_model = row.has("model")
        name = row.name("sn", lines, "node")
        gpus = row.integer("gpu", low=0)
        trace = row.text("model")
        mig = mapping.get(trace, mapping.get("*", model))
        if gpus > 0:
            lay, config = resolve_layout(mig, layout, where=str(path))
        else:
            lay, config = (), ""
        out.append(NodeSpec(name=name, model=mig, gpu_layouts=(lay,) * max(0, gpus),
                            cpu_milli=row.integer("cpu_milli", low=1),
                            memory_mib=row.integer("memory_mib", low=1), config=config,
                            trace_model=trace if gpus > 0 else ""))
    if not any(n.gpus for n in out):
        raise errors.ConfigError(f"{path}: no GPU nodes")
    named = sorted(k for k in mapping if k != "*")
    if named and not has_model:
        raise errors.UsageError(
            f"--model-map {','.join(f'{k}={mapping[k].id}' for k in named)}: the node list "
            f"{path} has no model column, so no node has a trace model to map; add the "
            f"column, or use --model (or --model-map *=MODEL)")
    present = sorted({n.trace_model for n in out if n.gpus})
    for name in sorted(mapping):
        if name != "*" and name not in present:
            near = [m for m in present if m.lower() == name.lower()]
            hint = f" (did you mean {near[0]}? names are case-sensitive)" if near else ""
            raise errors.UsageError(
                f"--model-map {name}={mapping[name].id}: the node list {path} has no GPU "
                f"model {name}{hint}; its models are {', '.join(present)}, and * stands for "
                f"the others")
    return out
