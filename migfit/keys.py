"""The wire keys migfit reads and writes on Nodes and Pods, and its JSON annotations' schemas.

What NVIDIA's GPU Feature Discovery and MIG Manager write (reference/MIG.md 4) and migfit's own
``migfit.io/`` keys, spelled once here so every module reads the same names. migfit's two JSON
annotations are versioned, validated types with one writer and one reader each:
``migfit.io/decision`` (:class:`DecisionRecord`, written by the webhook, read by the extender)
and ``migfit.io/relayout`` (:class:`RelayoutRecord`, written by the advice publisher and the
apply mode, read by both, the extender's filter and ``migfit status``).
"""

from __future__ import annotations

import datetime
import enum
import json
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, NotRequired, TypedDict

import pydantic

from migfit import errors

ANNOTATION_PREFIX = "migfit.io/"
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"
LABEL_GPU_COUNT = "nvidia.com/gpu.count"
LABEL_STRATEGY = "nvidia.com/mig.strategy"
LABEL_CONFIG = "nvidia.com/mig.config"
LABEL_CONFIG_STATE = "nvidia.com/mig.config.state"
ANNOTATION_RELAYOUT = "migfit.io/relayout"
LABEL_RELAYOUT_RECOMMENDED = "migfit.io/relayout-recommended"
TAINT_RELAYOUT = "migfit.io/relayout"
# Node labels kept in the compact record: what GFD and the MIG Manager write about MIG and the
# operand switches (reference/MIG.md 4), and migfit's own.
KEPT_LABEL_PREFIXES = ("nvidia.com/gpu.", "nvidia.com/mig.", "migfit.io/",
                       "kubernetes.io/hostname")
# Values of nvidia.com/mig.config.state while the MIG Manager is re-partitioning the node.
REPARTITIONING_STATES = frozenset({"pending", "rebooting"})

# ---------------------------------------------------------------- more node keys

LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
#: GFD: the node's GPUs support MIG.
LABEL_MIG_CAPABLE: Final = "nvidia.com/mig.capable"
#: GFD's usable-memory label of one MIG profile: ``nvidia.com/mig-<profile>.memory``.
MIG_LABEL_PREFIX: Final = "nvidia.com/mig-"
MIG_MEMORY_LABEL_SUFFIX: Final = ".memory"
#: Values of ``nvidia.com/mig.strategy`` migfit plans for (and the decision record's strategy).
Strategy = Literal["mixed", "single"]
STRATEGIES: Final[tuple[Strategy, ...]] = ("mixed", "single")
#: Every value GPU Feature Discovery writes to ``nvidia.com/mig.strategy`` (reference/MIG.md 4,
#: the device plugin's ``--mig-strategy``).
STRATEGY_LABEL_VALUES: Final = ("none", "single", "mixed")


def device_name(profile: str) -> str:
    """A profile as GFD and the device plugin spell it in resource names and labels: ``+`` as
    ``.`` (``1g.10gb+me`` -> ``1g.10gb.me``; k8s-device-plugin nvml-mig-device.go, GetName)."""
    return profile.replace("+", ".")


def mig_memory_label(profile: str) -> str:
    """The ``nvidia.com/mig-<profile>.memory`` label key, the profile spelled as GFD and the
    device plugin spell it (``1g.10gb+me`` -> ``nvidia.com/mig-1g.10gb.me.memory``)."""
    return f"{MIG_LABEL_PREFIX}{device_name(profile)}{MIG_MEMORY_LABEL_SUFFIX}"


# ---------------------------------------------------------------- the request contract

#: DESIGN.md §3: what a user writes on a pod (values are Kubernetes quantities).
GPU_MEMORY: Final = ANNOTATION_PREFIX + "gpu-memory"
#: ``migfit.io/gpu-memory.<container>``: the same for one named container.
GPU_MEMORY_PREFIX: Final = GPU_MEMORY + "."
GPU_COMPUTE: Final = ANNOTATION_PREFIX + "gpu-compute"
GPU_COMPUTE_PREFIX: Final = GPU_COMPUTE + "."
GPU_MEDIA: Final = ANNOTATION_PREFIX + "gpu-media"
GPU_MEDIA_PREFIX: Final = GPU_MEDIA + "."
#: Written by the webhook: the chosen profile (comma-joined in container order if several).
PROFILE: Final = ANNOTATION_PREFIX + "profile"
#: Written by the webhook: the JSON decision record (:class:`DecisionRecord`).
DECISION: Final = ANNOTATION_PREFIX + "decision"
#: kubectl's default-container annotation; the pod-wide key applies to the container it names.
DEFAULT_CONTAINER: Final = "kubectl.kubernetes.io/default-container"

# ---------------------------------------------------------------- the apply mode's marks

#: Set (JSON ``{"result", "reason"}``) when a re-layout failed; the node is never retried
#: until an operator removes it (and the taint).
ANNOTATION_RELAYOUT_FAILED: Final = ANNOTATION_PREFIX + "relayout-failed"
#: On the mig-parted ConfigMap the apply mode writes custom configs into
#: (``--apply-custom-configs``): JSON, config name -> when migfit added it (RFC 3339). Only the
#: configs it names are ever removed by migfit (once no node uses them).
ANNOTATION_CONFIGS: Final = ANNOTATION_PREFIX + "configs"
TAINT_RELAYOUT_VALUE: Final = "pending"
TAINT_RELAYOUT_EFFECT: Final = "NoSchedule"


def relayout_taint() -> dict[str, str]:
    """The apply mode's taint, ``migfit.io/relayout=pending:NoSchedule``, as the API spells it."""
    return {"key": TAINT_RELAYOUT, "value": TAINT_RELAYOUT_VALUE, "effect": TAINT_RELAYOUT_EFFECT}


class AnnotationError(errors.UsageError):
    """A migfit JSON annotation that is not a valid record; the message says what to change."""


# ---------------------------------------------------------------- migfit.io/decision

DECISION_VERSION: Final = 1


#: What the reason of a decision made under ``--choice usable`` says of the free instance it
#: counted (``webhook.choice``); ``advisor.explain`` reads it back.
REASON_ROOM: Final = " where the pod's cpu and memory fit"


class DecisionContainer(TypedDict):
    """One container's decision: its request, the profile chosen and where it fits."""

    container: str
    request_mib: int
    profile: str
    resource: str
    models: list[str]  # GPU models on which the request fits the profile; empty = any model
    #: Why this profile (``smallest fitting``, ``smallest with a free instance (1g.10gb: 0
    #: free that no waiting pod asks for)``); absent in records written before migfit
    #: recorded it.
    reason: NotRequired[str]


class DecisionRecord(TypedDict):
    """The JSON of ``migfit.io/decision``."""

    v: int
    strategy: Strategy
    containers: list[DecisionContainer]


def encode_decision(record: DecisionRecord) -> str:
    """Compact, deterministic JSON for the annotation (the one writer: the webhook)."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=True)


def profile_annotation(record: DecisionRecord) -> str:
    """The ``migfit.io/profile`` value: the chosen profiles comma-joined in container order."""
    return ",".join(c["profile"] for c in record["containers"])


_CONTAINER_FIELDS: Final = {"container": str, "request_mib": int, "profile": str,
                            "resource": str, "models": list}


def decode_decision(text: str) -> DecisionRecord:
    """Parse and validate a ``migfit.io/decision`` value; AnnotationError when it is not one."""
    try:
        raw: Any = json.loads(text)
    except (ValueError, RecursionError):
        raise AnnotationError(f"{DECISION} is not JSON; remove it and let migfit re-decide"
                              ) from None
    where = f"{DECISION} is not a migfit decision record"
    if not isinstance(raw, dict) or set(raw) != {"v", "strategy", "containers"}:
        raise AnnotationError(f"{where} (expected keys v, strategy, containers)")
    if raw["v"] != DECISION_VERSION or isinstance(raw["v"], bool):
        raise AnnotationError(f"{where} (version {raw['v']!r}; this migfit writes "
                              f"{DECISION_VERSION})")
    if raw["strategy"] not in STRATEGIES:
        raise AnnotationError(f"{where} (strategy {raw['strategy']!r})")
    if not isinstance(raw["containers"], list):
        raise AnnotationError(f"{where} (containers is not a list)")
    containers: list[DecisionContainer] = []
    for item in raw["containers"]:
        if not isinstance(item, dict) or set(item) - {"reason"} != set(_CONTAINER_FIELDS):
            raise AnnotationError(f"{where} (each container needs "
                                  f"{', '.join(_CONTAINER_FIELDS)}, and may have reason)")
        if not isinstance(item.get("reason", ""), str):
            raise AnnotationError(f"{where} (reason is not a str)")
        for field, kind in _CONTAINER_FIELDS.items():
            value = item[field]
            if not isinstance(value, kind) or isinstance(value, bool):
                raise AnnotationError(f"{where} ({field} is not a {kind.__name__})")
        if not all(isinstance(m, str) for m in item["models"]):
            raise AnnotationError(f"{where} (models must be strings)")
        container = DecisionContainer(
            container=item["container"], request_mib=item["request_mib"],
            profile=item["profile"], resource=item["resource"], models=list(item["models"]),
        )
        if "reason" in item:
            container["reason"] = item["reason"]
        containers.append(container)
    return DecisionRecord(v=DECISION_VERSION, strategy=raw["strategy"], containers=containers)


def decision_of(annotations: Mapping[str, str]) -> DecisionRecord | None:
    """The pod's decision record (the one reader), or None when absent or not a valid record."""
    text = annotations.get(DECISION)
    if text is None:
        return None
    try:
        return decode_decision(text)
    except AnnotationError:
        return None


# ---------------------------------------------------------------- migfit.io/relayout

# The record's schema version. A field added to the record (or a meaning changed) needs a
# new version: a reader refuses records of another version, and the apply mode leaves a
# node whose record a newer migfit wrote to that migfit (``newer_relayout``) instead of
# failing it, so that a rolling upgrade or a rollback never fails a run in flight.
RELAYOUT_VERSION: Final = 1


class RelayoutState(enum.StrEnum):
    """Where a node's re-layout stands: exactly the states the apply mode's machine has.

    Only ``recommended`` is written by the advice publisher; the others by the apply mode.
    A node carries the taint exactly while its record is ``tainted``, ``applying`` or
    ``failed``: the taint and the record are always written in one request.
    """

    RECOMMENDED = "recommended"  # advised; nothing on the node changed
    TAINTED = "tainted"  # tainted, no GPU pod may appear; the config label is not set yet
    APPLYING = "applying"  # nvidia.com/mig.config set; waiting for the MIG Manager
    FAILED = "failed"  # the taint stays until an operator clears the node


#: States in which a re-layout is in flight (counted against ``--max-relayouts``, adopted by
#: a new leader, and refused new pods by the extender).
ACTIVE_STATES: Final = frozenset({RelayoutState.TAINTED, RelayoutState.APPLYING})


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, strict=True,
                                       populate_by_name=True)


class GpuChange(_Strict):
    """One GPU's MIG layout before and after, as mig-parted profile names."""

    index: int
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()


class KeptPod(_Strict):
    """A pod running on a GPU a busy-node re-layout keeps exactly, as seen right before the
    ``nvidia.com/mig.config`` label was set: after the MIG Manager's success it must still be
    there, with no container restarted since (docs/relayout.md §5)."""

    pod: str  # namespace/name
    uid: str
    restarts: int = 0  # restarts of its containers (init and sidecars too) when seen
    profiles: dict[str, int] = {}  # the MIG instances it uses


def _rfc3339_text(value: str) -> str:
    if parse_rfc3339(value) is None:
        raise ValueError(f"not an RFC 3339 time: {value[:40]!r}")
    return value


class RelayoutRecord(_Strict):
    """The JSON of ``migfit.io/relayout``: one node's re-layout, from advice to its end.

    Every field but ``v`` and ``state`` may be absent (a reader takes the default), so a
    record written before the version field existed still reads; a record of another
    version, an unknown state or an unknown field does not (one of a newer version:
    :func:`newer_relayout`).
    """

    v: int = RELAYOUT_VERSION
    state: RelayoutState = RelayoutState.RECOMMENDED
    target: str = ""  # the mig-parted config set as nvidia.com/mig.config
    config: str | None = None  # the named config of the ConfigMap; None: a custom one
    mig_parted: dict[str, Any] | None = None  # the custom config document (mig-parted v1)
    from_config: str | None = pydantic.Field(default=None, alias="from")
    gpus: tuple[GpuChange, ...] = ()
    unblocks: tuple[str, ...] = ()  # pods (namespace/name) the re-layout would serve
    disrupts: tuple[str, ...] = ()  # pods it would disrupt
    # Pods on GPUs the change keeps exactly (a busy node): they may stay bound meanwhile.
    running: tuple[str, ...] = ()
    # Of those, the ones bound when the label was set: checked after the change.
    kept: tuple[KeptPod, ...] = ()
    disruptive: bool = False
    command: str = ""  # the kubectl command that applies it by hand
    expected: dict[str, int] = {}  # the allocatable MIG profiles once applied
    started: Annotated[str, pydantic.AfterValidator(_rfc3339_text)] | None = None
    result: str = ""  # when failed: failed | timeout | wedged | error
    reason: str = ""

    @pydantic.field_validator("v", mode="before")
    @classmethod
    def _version(cls, value: Any) -> Any:
        if isinstance(value, bool) or value != RELAYOUT_VERSION:
            raise ValueError(f"version {value!r}; this migfit reads {RELAYOUT_VERSION}")
        return value

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    def started_at(self) -> float | None:
        """``started`` as POSIX seconds, None when not set."""
        return None if self.started is None else parse_rfc3339(self.started)

    def but(self, **changes: Any) -> RelayoutRecord:
        """A copy with ``changes`` (field names), validated."""
        data = self.model_dump(by_alias=False)
        data.update(changes)
        return RelayoutRecord.model_validate(data, strict=False)


def encode_relayout(record: RelayoutRecord) -> str:
    """The annotation value (the one writer): compact, stable JSON without default fields."""
    doc = record.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    doc.update(v=record.v, state=record.state.value)
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def decode_relayout(text: str) -> RelayoutRecord:
    """Parse and validate a ``migfit.io/relayout`` value; AnnotationError when it is not one."""
    try:
        return RelayoutRecord.model_validate_json(text)
    except (pydantic.ValidationError, ValueError, RecursionError) as exc:
        why = exc.errors()[0] if isinstance(exc, pydantic.ValidationError) else None
        detail = (f"{'.'.join(str(p) for p in why['loc']) or 'record'}: {why['msg']}"
                  if why else "not JSON")
        raise AnnotationError(f"{ANNOTATION_RELAYOUT} is not a migfit re-layout record "
                              f"({detail[:120]})") from None


def relayout_of(annotations: Mapping[str, str]) -> RelayoutRecord | None:
    """The node's re-layout record (the one reader); None when absent or not a valid record."""
    text = annotations.get(ANNOTATION_RELAYOUT)
    if text is None:
        return None
    try:
        return decode_relayout(text)
    except AnnotationError:
        return None


def relayout_failed(annotations: Mapping[str, str]) -> bool:
    """Whether migfit's re-layout of the node failed and awaits an operator: the
    ``migfit.io/relayout-failed`` annotation, or the record's ``state: failed`` (the one rule
    for the advisor, the extender's filter and ``migfit status``)."""
    if ANNOTATION_RELAYOUT_FAILED in annotations:
        return True
    mark = relayout_of(annotations)
    return mark is not None and mark.state is RelayoutState.FAILED


class NewerRecord(TypedDict):
    """What can be read of a re-layout record a newer migfit wrote: its version, and the
    config it names (kept in use: not pruned from the custom configs' ConfigMap)."""

    version: int
    target: str


def newer_relayout(annotations: Mapping[str, str]) -> NewerRecord | None:
    """The node's re-layout record when a newer migfit wrote it (its ``v`` above
    :data:`RELAYOUT_VERSION`), which this one cannot read otherwise; None when it did not."""
    text = annotations.get(ANNOTATION_RELAYOUT)
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    version = doc.get("v") if isinstance(doc, dict) else None
    if type(version) is not int or version <= RELAYOUT_VERSION:
        return None
    target = doc.get("target")
    return NewerRecord(version=version, target=target if isinstance(target, str) else "")


def encode_failure(*, result: str, reason: str) -> str:
    """The ``migfit.io/relayout-failed`` value; readers only test that the key is there."""
    return json.dumps({"result": result, "reason": reason}, sort_keys=True)


def rfc3339(ts: float, *, micro: bool = True) -> str:
    """POSIX seconds as RFC 3339, UTC: with microseconds (Kubernetes' MicroTime spelling),
    or to the second (``micro=False``: its Time spelling)."""
    return datetime.datetime.fromtimestamp(ts, tz=datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(value: str) -> float | None:
    """An RFC 3339 time as POSIX seconds; None when it is not one (no zone: UTC)."""
    try:
        ts = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=datetime.UTC)
    return ts.timestamp()


def decode_configs(text: str | None) -> dict[str, float]:
    """``migfit.io/configs``: config name -> POSIX seconds added. Entries that do not read
    (hand-edited) are left out, so migfit never removes a config it cannot account for."""
    if not text:
        return {}
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(raw, dict):
        return {}
    out: dict[str, float] = {}
    for name, stamp in raw.items():
        when = parse_rfc3339(stamp) if isinstance(stamp, str) else None
        if isinstance(name, str) and when is not None:
            out[name] = when
    return out


def encode_configs(added: Mapping[str, float]) -> str:
    """The ``migfit.io/configs`` value: compact JSON, sorted by name."""
    return json.dumps({n: rfc3339(t) for n, t in sorted(added.items())},
                      separators=(",", ":"), ensure_ascii=True)
