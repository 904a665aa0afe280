"""The request contract: the ``migfit.io/gpu-*`` annotations a user writes, and the decision record.

Shared by the webhook (which parses the request and writes the decision) and the extender
(which reads ``migfit.io/decision`` to refuse nodes where the recorded request does not fit).
DESIGN.md §3 fixes the annotation keys; values are Kubernetes quantities (WIRE.md §4).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Final

from migfit import errors, keys, quantity

# ---------------------------------------------------------------- annotation keys
# Spelled in migfit.keys, the one home of every key; re-exported here under the names the
# request contract's users know.

PREFIX: Final = keys.ANNOTATION_PREFIX
GPU_MEMORY: Final = keys.GPU_MEMORY
#: ``migfit.io/gpu-memory.<container>``: the same for one named container (overrides GPU_MEMORY).
GPU_MEMORY_PREFIX: Final = keys.GPU_MEMORY_PREFIX
GPU_COMPUTE: Final = keys.GPU_COMPUTE
GPU_COMPUTE_PREFIX: Final = keys.GPU_COMPUTE_PREFIX
GPU_MEDIA: Final = keys.GPU_MEDIA
GPU_MEDIA_PREFIX: Final = keys.GPU_MEDIA_PREFIX
#: Written by the webhook: the chosen profile (comma-joined in container order if several).
PROFILE: Final = keys.PROFILE
#: Written by the webhook: the JSON decision record (``DecisionRecord``).
DECISION: Final = keys.DECISION
#: kubectl's default-container annotation; the pod-wide key applies to the container it names.
DEFAULT_CONTAINER: Final = keys.DEFAULT_CONTAINER

DECISION_VERSION: Final = keys.DECISION_VERSION
Strategy = keys.Strategy
STRATEGIES: Final = keys.STRATEGIES

_TRUE: Final = frozenset({"true", "yes", "1"})
_FALSE: Final = frozenset({"false", "no", "0", ""})
_MIB: Final = 2**20


class RequestError(errors.UsageError):
    """A ``migfit.io/gpu-*`` annotation that cannot be honoured; the message says what to change."""


@dataclasses.dataclass(frozen=True, slots=True)
class GpuRequest:
    """What one container asks for: GPU memory, and optionally compute slices and media engines."""

    container: str
    memory_bytes: int
    compute: int | None = None  # at least this many compute slices (the ``g`` of a profile)
    media: bool = False  # needs a media-extension (+me) profile

    @property
    def memory_mib(self) -> int:
        """The request in whole MiB, rounded up (profile sizes are whole MiB)."""
        return -(-self.memory_bytes // _MIB)


@dataclasses.dataclass(frozen=True, slots=True)
class PodRequest:
    """The parsed request of a pod: one GpuRequest per container that asks, in container order."""

    requests: tuple[GpuRequest, ...]
    notes: tuple[str, ...] = ()  # non-fatal remarks worth a warning (e.g. an unknown default)


def has_request(annotations: Mapping[str, str]) -> bool:
    """True when the pod carries a gpu-memory annotation (pod-wide or per container)."""
    return any(k == GPU_MEMORY or k.startswith(GPU_MEMORY_PREFIX) for k in annotations)


def default_container(
    annotations: Mapping[str, str], containers: Sequence[str]
) -> tuple[str | None, str | None]:
    """The pod's main container and, when the default-container annotation had to be ignored,
    why. kubectl falls back to the first container in that case, and so do we."""
    named = annotations.get(DEFAULT_CONTAINER)
    first = containers[0] if containers else None
    if named is None:
        return first, None
    if named in containers:
        return named, None
    return first, (
        f"{DEFAULT_CONTAINER}={named!r} names no container; {GPU_MEMORY} applies to the first "
        f"container {first!r}"
    )


def parse(
    annotations: Mapping[str, str],
    *,
    containers: Sequence[str],
    init_containers: Sequence[str] = (),
) -> PodRequest:
    """Parse a pod's annotations into per-container requests.

    ``containers`` are the names of ``spec.containers`` in order; ``init_containers`` only
    improve the error for a per-container key naming one. No gpu-memory key gives an empty
    request. Raises RequestError for an unparseable, zero or negative amount, a per-container
    key naming no container, or a bad compute/media value.
    """
    notes: list[str] = []
    if not has_request(annotations):
        if any(k in (GPU_COMPUTE, GPU_MEDIA)
               or k.startswith((GPU_COMPUTE_PREFIX, GPU_MEDIA_PREFIX)) for k in annotations):
            notes.append(f"{GPU_COMPUTE}/{GPU_MEDIA} have no effect without {GPU_MEMORY}")
        return PodRequest(requests=(), notes=tuple(notes))
    if not containers:
        raise RequestError("the pod has no containers to give GPU memory to")

    def check_container(key: str, name: str) -> None:
        if name in containers:
            return
        if name in init_containers:
            raise RequestError(
                f"{key} names init container {name!r}; GPU memory can be given to regular "
                f"containers only ({', '.join(containers)})"
            )
        raise RequestError(
            f"{key} names no container of this pod; use one of: {', '.join(containers)}"
        )

    memory: dict[str, tuple[str, str]] = {}  # container -> (key, value)
    compute: dict[str, tuple[str, str]] = {}
    media: dict[str, tuple[str, str]] = {}
    per_key = ((GPU_MEMORY_PREFIX, memory), (GPU_COMPUTE_PREFIX, compute),
               (GPU_MEDIA_PREFIX, media))
    for key, value in annotations.items():
        for prefix, into in per_key:
            if key.startswith(prefix):
                name = key[len(prefix):]
                check_container(key, name)
                into[name] = (key, value)
    main, note = default_container(annotations, containers)
    if GPU_MEMORY in annotations and main is not None:
        if note is not None:
            notes.append(note)
        memory.setdefault(main, (GPU_MEMORY, annotations[GPU_MEMORY]))

    out: list[GpuRequest] = []
    for name in containers:
        if name not in memory:
            continue
        key, value = memory[name]
        ckey, cvalue = compute.get(name) or (GPU_COMPUTE, annotations.get(GPU_COMPUTE))
        mkey, mvalue = media.get(name) or (GPU_MEDIA, annotations.get(GPU_MEDIA))
        out.append(GpuRequest(
            container=name,
            memory_bytes=parse_memory(key, value),
            compute=None if cvalue is None else parse_compute(ckey, cvalue),
            media=False if mvalue is None else parse_media(mkey, mvalue),
        ))
    for name in set(compute) | set(media):
        if name not in memory:
            notes.append(f"{(compute.get(name) or media[name])[0]} has no effect without "
                         f"{GPU_MEMORY_PREFIX}{name} or {GPU_MEMORY}")
    return PodRequest(requests=tuple(out), notes=tuple(notes))


def parse_memory(key: str, value: str) -> int:
    """A positive memory amount in bytes from a quantity, or RequestError naming ``key``."""
    try:
        amount = quantity.parse_bytes(value)
    except errors.QuantityError as exc:
        raise RequestError(f"{key}: {exc.message}") from None
    if amount <= 0:
        raise RequestError(
            f"{key}={value!r}: GPU memory must be more than zero; write an amount such as 12Gi"
        )
    return amount


def parse_compute(key: str, value: str) -> int:
    """A positive whole number of compute slices, or RequestError naming ``key``."""
    text = value.strip()
    if not text.isascii() or not text.isdigit() or int(text) <= 0 or len(text) > 3:
        raise RequestError(
            f"{key}={value!r}: write the number of compute slices as a whole number such as 2"
        )
    return int(text)


def parse_media(key: str, value: str) -> bool:
    """``true``/``false`` (also yes/no/1/0, any case), or RequestError naming ``key``."""
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise RequestError(f"{key}={value!r}: write \"true\" or \"false\"")


# ---------------------------------------------------------------- the decision record
# Its schema, writer and reader live in migfit.keys (the home of migfit's JSON annotations).

DecisionContainer = keys.DecisionContainer
DecisionRecord = keys.DecisionRecord
encode_decision = keys.encode_decision
profile_annotation = keys.profile_annotation
decision_of = keys.decision_of


def decode_decision(text: str) -> DecisionRecord:
    """Parse and validate a ``migfit.io/decision`` value; RequestError when it is not one."""
    try:
        return keys.decode_decision(text)
    except keys.AnnotationError as exc:
        raise RequestError(exc.message) from None
