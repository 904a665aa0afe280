"""The simulated workload: the trace's pod list mapped to MIG requests, or a synthetic mix.

The trace's GPUs are not MIG GPUs, so each request is mapped to a profile of a reference
model exactly as the trace README defines (state the mapping with every result):

- ``compute``: g = ceil(gpu_milli × 7 / 1000) → 1g, 2g, 3g, 4g, and 7g for 5–7;
- ``memory``: ceil(gpu_milli × 8 / 1000) memory slices → the smallest profile with at least
  that many;
- ``gpu_milli`` = 1000 → ``num_gpu`` whole GPUs (7g each); ``num_gpu`` 0 → a cpu-only pod.

The profile itself is chosen by the webhook's decision code, not here: each pod carries the
``migfit.io/gpu-memory`` (and ``migfit.io/gpu-compute``) annotations a user would write for
that request, and ``expected`` records what the mapping says, to check the decision against.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from migfit import errors, profiles, requests
from migfit.simulate import csvrows, objects
from migfit.webhook import choice

Mapping_ = Literal["compute", "memory"]
ANN_MEMORY = requests.GPU_MEMORY
ANN_COMPUTE = requests.GPU_COMPUTE


@dataclasses.dataclass(frozen=True, slots=True)
class PodSpec:
    """One pod of the workload, before the webhook has seen it."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int  # 0: cpu-only
    gpu_milli: int  # per GPU, 1000 for whole GPUs
    arrival: float  # seconds (trace creation time)
    duration: float  # seconds it runs once started (events mode)
    annotations: Mapping[str, str]  # what a user writes for this request
    containers: int  # containers that each hold one instance
    expected: profiles.ProfileName | None  # the profile the mapping names, per container
    gpu_memory_mib: int  # GPU memory the pod needs per container (for rounding waste)
    explicit: tuple[str, ...] = ()  # profiles requested directly (no annotation, no webhook)
    # ``gpu_spec``: the trace GPU models the pod may run on ('|'-separated in the trace;
    # empty = any). A node affinity on the node's trace model (``objects.LABEL_TRACE_MODEL``).
    gpu_spec: frozenset[str] = frozenset()

    @property
    def gpu(self) -> bool:
        return self.num_gpu > 0

    @property
    def trace_gpus(self) -> float:
        """The pod's GPU request in the trace's units (whole GPUs)."""
        return self.num_gpu * self.gpu_milli / 1000


def _partial_profiles(model: profiles.GpuModel) -> list[profiles.Profile]:
    return [p for p in model.profiles if not p.media]


def expected_profile(model: profiles.GpuModel, *, gpu_milli: int, mapping: Mapping_
                     ) -> profiles.Profile:
    """The README's mapping of one GPU's share to a profile of ``model``."""
    cands = _partial_profiles(model)
    if gpu_milli >= 1000:
        return max(cands, key=lambda p: (p.memory_slices, p.compute_slices))
    if mapping == "compute":
        g = math.ceil(gpu_milli * model.compute_slices / 1000)
        fitting = [p for p in cands if p.compute_slices >= g]
    else:
        m = math.ceil(gpu_milli * model.memory_slices / 1000)
        fitting = [p for p in cands if p.memory_slices >= m]
    return min(fitting, key=profiles.profile_order)


def request_annotations(model: profiles.GpuModel, *, gpu_milli: int, mapping: Mapping_
                        ) -> dict[str, str]:
    """The annotations that ask the webhook for what the mapping means, for one container.

    ``compute``: a nominal 1Mi of memory and ``gpu-compute: g``; a whole GPU is ``g`` all
    the model's compute slices. ``memory``: one MiB more than the usable memory of the
    largest profile with fewer memory slices than the mapping asks for, so the smallest
    fitting profile is the mapped one.
    """
    cands = _partial_profiles(model)
    if gpu_milli < 1000 and mapping == "compute":
        g = math.ceil(gpu_milli * model.compute_slices / 1000)
        return {ANN_MEMORY: "1Mi", ANN_COMPUTE: str(g)}
    if gpu_milli >= 1000:
        # A whole GPU on every model with as many compute slices: all of them (by memory
        # alone, more than the reference's 4g.40gb, an H100's 3g.40gb would hold it).
        return {ANN_MEMORY: "1Mi", ANN_COMPUTE: str(model.compute_slices)}
    m = math.ceil(gpu_milli * model.memory_slices / 1000)
    below = [p.memory_mib for p in cands if p.memory_slices < m]
    return {ANN_MEMORY: f"{max(below) + 1 if below else 1}Mi"}


def gpu_requests(s: PodSpec) -> tuple[requests.GpuRequest, ...]:
    """What the pod's annotations ask for, per container, as the webhook reads them (none
    when they do not parse: the webhook denies such a pod)."""
    try:
        return requests.parse(s.annotations,
                              containers=objects.container_names(s.containers)).requests
    except requests.RequestError:
        return ()


def fitting(model: profiles.GpuModel, req: requests.GpuRequest) -> list[profiles.Profile]:
    """The model's profiles that hold ``req``, by the webhook's rule (``choice.meets``) on
    the catalog's memory."""
    return [p for p in model.profiles if p.memory_mib >= req.memory_mib and choice.meets(p, req)]


def smallest_fit(model: profiles.GpuModel, req: requests.GpuRequest
                 ) -> profiles.Profile | None:
    """The model's smallest profile that holds ``req``, in the webhook's order
    (``choice.smallest_first``), or None."""
    return min(fitting(model, req), key=lambda p: choice.smallest_first(p, p.memory_mib),
               default=None)


def parse_gpu_spec(text: str) -> frozenset[str]:
    """The trace's ``gpu_spec`` ("V100M16|V100M32"; empty = any model)."""
    return frozenset(m.strip() for m in text.split("|") if m.strip())


def make_pod(model: profiles.GpuModel, *, name: str, cpu_milli: int, memory_mib: int,
             num_gpu: int, gpu_milli: int, arrival: float, duration: float,
             mapping: Mapping_, gpu_spec: frozenset[str] = frozenset()) -> PodSpec:
    if num_gpu <= 0 or gpu_milli <= 0:
        return PodSpec(name=name, cpu_milli=cpu_milli, memory_mib=memory_mib, num_gpu=0,
                       gpu_milli=0, arrival=arrival, duration=duration, annotations={},
                       containers=0, expected=None, gpu_memory_mib=0)
    gpu_milli = min(gpu_milli, 1000)
    whole = gpu_milli >= 1000
    if not whole and num_gpu > 1:
        raise errors.UsageError(f"pod {name}: {num_gpu} shared GPUs ({gpu_milli} milli each) "
                                f"cannot be mapped to MIG; only whole GPUs come in numbers")
    one = request_annotations(model, gpu_milli=gpu_milli, mapping=mapping)
    containers = num_gpu if whole else 1
    if containers == 1:
        ann = one
    else:  # one instance per container: the per-container keys of the request contract
        ann = {f"{requests.GPU_MEMORY_PREFIX}gpu{i}": one[ANN_MEMORY] for i in range(containers)}
        if ANN_COMPUTE in one:
            ann.update({f"{requests.GPU_COMPUTE_PREFIX}gpu{i}": one[ANN_COMPUTE]
                        for i in range(containers)})
    exp = expected_profile(model, gpu_milli=gpu_milli, mapping=mapping)
    return PodSpec(name=name, cpu_milli=cpu_milli, memory_mib=memory_mib, num_gpu=num_gpu,
                   gpu_milli=gpu_milli, arrival=arrival, duration=duration, annotations=ann,
                   containers=containers, expected=exp.name,
                   gpu_memory_mib=math.ceil(gpu_milli * model.memory_mib / 1000),
                   gpu_spec=gpu_spec)


def explicit_pod(model: profiles.GpuModel, *, name: str, profile: str, count: int = 1,
                 cpu_milli: int = 1000, memory_mib: int = 1024, arrival: float = 0.0,
                 duration: float = math.inf) -> PodSpec:
    """A pod that requests ``nvidia.com/mig-<profile>`` itself (the webhook skips it)."""
    p = model.profile(profile)
    return PodSpec(name=name, cpu_milli=cpu_milli, memory_mib=memory_mib, num_gpu=count,
                   gpu_milli=round(1000 * p.compute_slices / model.compute_slices),
                   arrival=arrival, duration=duration, annotations={}, containers=count,
                   expected=p.name, gpu_memory_mib=p.memory_mib,
                   explicit=(p.name,) * count)


POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
# A time field of the pod list (seconds of trace time) is 0 to this: about 317 years, against
# the trace's 149 days; the simulated clock (``engine.CLOCK_LIMIT_S``) has room for ten times
# as much, waits included.
TIME_LIMIT_S = 1e10


def _time(row: csvrows.Row, name: str) -> float | None:
    """A time field: None when the list has no such column or the field is empty."""
    if not row.text(name):
        return None
    t = row.number(name)
    if not 0 <= t <= TIME_LIMIT_S:
        raise row.error(f"{name} {row.text(name)}: use 0 to {TIME_LIMIT_S:,.0f} seconds of "
                        f"trace time")
    return t


def _times(row: csvrows.Row) -> tuple[float, float]:
    """The pod's arrival and run time from creation_time, scheduled_time and deletion_time.

    A list without creation_time (the trace's multigpu lists) has every pod arrive at 0; an
    empty scheduled_time (the trace's Pending pods) is the creation time, and an empty
    deletion_time (or no such column) a pod still running at the trace's end, which never
    leaves. The run lasts from scheduled_time to deletion_time, at least 1 s. A creation_time
    left empty, a deletion_time before creation_time and a scheduled_time outside the two
    are refused."""
    created = _time(row, "creation_time")
    if created is None:
        if row.has("creation_time"):
            raise row.error("creation_time is empty: give the pod's creation time (seconds "
                            "of trace time)")
        created = 0.0
    end = _time(row, "deletion_time")
    if end is not None and end < created:
        raise row.error(f"deletion_time {row.text('deletion_time')} is before creation_time "
                        f"{row.text('creation_time')}")
    start = _time(row, "scheduled_time")
    if start is None:
        start = created
    elif start < created:
        raise row.error(f"scheduled_time {row.text('scheduled_time')} is before "
                        f"creation_time {row.text('creation_time')}")
    elif end is not None and start > end:
        raise row.error(f"scheduled_time {row.text('scheduled_time')} is after "
                        f"deletion_time {row.text('deletion_time')}")
    return created, (max(1.0, end - start) if end is not None else math.inf)


def _gpus(row: csvrows.Row) -> tuple[int, int]:
    """num_gpu and gpu_milli, which must agree: both 0 (a cpu-only pod) or both above 0."""
    num_gpu = row.integer("num_gpu", low=0)
    gpu_milli = row.integer("gpu_milli", low=0, high=1000,
                            what=" (thousandths of a GPU, 1000 for whole GPUs)")
    if num_gpu > 0 and gpu_milli == 0:
        raise row.error(f"num_gpu {num_gpu} with gpu_milli 0: give the share of each GPU "
                        f"(gpu_milli 1 to 1000), or num_gpu 0 for a cpu-only pod")
    if num_gpu == 0 and gpu_milli > 0:
        raise row.error(f"num_gpu 0 with gpu_milli {gpu_milli}: give the GPUs (num_gpu 1 or "
                        f"more), or gpu_milli 0 for a cpu-only pod")
    return num_gpu, gpu_milli


def load_trace(path: Path, *, model: profiles.GpuModel, mapping: Mapping_) -> list[PodSpec]:
    """The trace's pod list, in creation order. A bad row is refused with its line and
    field: a negative cpu_milli, memory_mib or num_gpu, a gpu_milli outside 0 to 1000,
    num_gpu and gpu_milli that disagree, times out of order or out of range (``_times``), an
    empty or repeated name (a list pasted twice, or two lists joined)."""
    out: list[PodSpec] = []
    lines: dict[str, int] = {}  # pod name -> its line
    for row in csvrows.rows(path, what="the trace's pod list", columns=POD_COLUMNS):
        name = row.name("name", lines, "pod")
        created, duration = _times(row)
        num_gpu, gpu_milli = _gpus(row)
        try:
            out.append(make_pod(
                model, name=name, cpu_milli=row.integer("cpu_milli", low=0),
                memory_mib=row.integer("memory_mib", low=0),
                num_gpu=num_gpu, gpu_milli=gpu_milli, arrival=created,
                duration=duration, mapping=mapping,
                gpu_spec=parse_gpu_spec(row.text("gpu_spec"))))
        except errors.ConfigError:
            raise
        except errors.UsageError as exc:
            raise row.error(str(exc)) from None
    out.sort(key=lambda p: p.arrival)
    return out


# (gpu_milli, num_gpu, share) of the synthetic mix: many small shares, some whole GPUs.
SYNTHETIC_MIX: tuple[tuple[int, int, float], ...] = (
    (0, 0, 0.10), (100, 1, 0.22), (250, 1, 0.15), (400, 1, 0.12), (500, 1, 0.08),
    (1000, 1, 0.25), (1000, 2, 0.03), (1000, 4, 0.03), (1000, 8, 0.02),
)


def synthetic(n: int, *, model: profiles.GpuModel, mapping: Mapping_, seed: int,
              mean_interval: float = 60.0, mean_duration: float = 6 * 3600.0
              ) -> list[PodSpec]:
    """``n`` pods of ``SYNTHETIC_MIX``: Poisson arrivals, exponential run times."""
    rng = random.Random(seed)
    weights = [w for _, _, w in SYNTHETIC_MIX]
    t = 0.0
    out: list[PodSpec] = []
    for i in range(n):
        milli, num, _ = rng.choices(SYNTHETIC_MIX, weights=weights)[0]
        t += rng.expovariate(1 / mean_interval)
        cpu = rng.choice((2000, 4000, 8000, 16000))
        out.append(make_pod(model, name=f"synthetic-{i:05d}", cpu_milli=cpu,
                            memory_mib=cpu * 4, num_gpu=num, gpu_milli=milli, arrival=t,
                            duration=max(1.0, rng.expovariate(1 / mean_duration)),
                            mapping=mapping))
    return out


def arrivals(pods: Sequence[PodSpec], *, mode: str, order: str, target: float, seed: int,
             gpus: int, arrival_scale: float = 1.0) -> list[PodSpec]:
    """The arrival sequence of one seed. Events: the pods in trace order, their arrival
    times (from the first) multiplied by ``arrival_scale`` (below 1: the same pods, with the
    same run times, arriving faster — a loaded variant of the trace). Fill: pods drawn
    (with replacement, or in trace order and then drawn) until their GPU request reaches
    ``target`` × the cluster's GPUs."""
    if mode == "events":
        if arrival_scale == 1.0 or not pods:
            return list(pods)
        start = min(p.arrival for p in pods)
        return [dataclasses.replace(p, arrival=start + (p.arrival - start) * arrival_scale)
                for p in pods]
    rng = random.Random(f"workload-{seed}")
    goal = target * gpus
    out: list[PodSpec] = []
    total = 0.0
    i = 0
    if not any(p.gpu for p in pods):
        raise errors.UsageError("the workload has no GPU pods to fill the cluster with")
    while total < goal:
        s = pods[i] if order == "trace" and i < len(pods) else pods[rng.randrange(len(pods))]
        i += 1
        out.append(s)
        total += s.trace_gpus
    return out
