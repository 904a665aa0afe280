"""The request contract: the ``migfit.io/gpu-*`` annotations a user writes, and the decision record.

Shared by the webhook (which parses the request and writes the decision) and the extender
(which reads ``migfit.io/decision`` to refuse nodes where the recorded request does not fit).
DESIGN.md §3 fixes the annotation keys; values are Kubernetes quantities (WIRE.md §4).
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
from collections.abc import Mapping, Sequence
from typing import Final

from migfit import errors, keys, logs, profiles, quantity

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

#: Longest ``gpu-compute``/``gpu-media`` value read (``"7"``, ``"true"``); longer ones are
#: refused before any conversion (``int()`` of 4,301 digits raises, of millions is slow).
MAX_VALUE_LENGTH: Final = 16
#: Most compute slices a value may name (a whole GPU has at most 8 in today's catalog).
MAX_COMPUTE: Final = 999
#: At most this many characters of client input are quoted back in a message or a log line.
QUOTE_LIMIT: Final = 40
#: A container's name is shown whole: Kubernetes allows a DNS label, at most 63 characters.
#: Cut at QUOTE_LIMIT, names that differ only at the end (``worker-…-07``, ``worker-…-08``)
#: read the same in every warning.
NAME_LIMIT: Final = 63
#: Keys are quoted longer: a per-container key holds a container name after the prefix.
_KEY_LIMIT: Final = 100
#: At most this many container names are listed in a message.
_LIST_LIMIT: Final = 8


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


def quote(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` quoted for a message: at most ``limit`` characters, as ``repr`` writes them
    (control characters, lone surrogates and line separators escaped), and how long it was."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} characters)"


def quote_name(name: str) -> str:
    """A container's name quoted for a message, whole up to ``NAME_LIMIT`` characters."""
    return quote(name, NAME_LIMIT)


def cut(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` whole up to ``limit`` characters, else cut there and marked ``… (N
    characters)``; nothing escaped (for a JSON string, whose encoder escapes)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters)"


def shorten(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` unquoted for a message or a log line: on one line (control characters and
    lone surrogates escaped) and cut after ``limit`` characters (``cut``)."""
    return logs.escape(cut(text, limit))


def quote_list(names: Sequence[str]) -> str:
    """Names for a message: each one shortened, at most a few, and how many more there are."""
    shown = ", ".join(shorten(n, NAME_LIMIT) for n in names[:_LIST_LIMIT])
    more = len(names) - _LIST_LIMIT
    return shown + (f" and {more} more" if more > 0 else "")


def has_request(annotations: Mapping[str, str]) -> bool:
    """True when the pod carries a gpu-memory annotation (pod-wide or per container)."""
    return any(k == GPU_MEMORY or k.startswith(GPU_MEMORY_PREFIX) for k in annotations)


def default_container(
    annotations: Mapping[str, str], containers: Sequence[str],
    init_containers: Sequence[str] = (),
) -> tuple[str | None, str | None]:
    """The pod's main container and, when the default-container annotation had to be ignored,
    why. kubectl falls back to the first container in that case, and so do we."""
    named = annotations.get(DEFAULT_CONTAINER)
    first = containers[0] if containers else None
    if named is None:
        return first, None
    if named in containers:
        return named, None
    what = ("names an init container" if named in init_containers else "names no container")
    return first, (
        f"{DEFAULT_CONTAINER}={quote(named)} {what}; {GPU_MEMORY} applies to the "
        f"first container {quote(first or '')}"
    )


_GPU_KEYS: Final = keys.ANNOTATION_PREFIX + "gpu-"
_KNOWN: Final = frozenset({GPU_MEMORY, GPU_COMPUTE, GPU_MEDIA})
_KNOWN_PREFIXES: Final = (GPU_MEMORY_PREFIX, GPU_COMPUTE_PREFIX, GPU_MEDIA_PREFIX)


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
    unknown = [k for k in annotations if k.startswith(_GPU_KEYS) and k not in _KNOWN
               and not k.startswith(_KNOWN_PREFIXES)]
    if unknown:  # a key guessed (gpu-count, gpu-model): ignored, and said to be
        shown = ", ".join(shorten(k, 40) for k in sorted(unknown)[:3])
        notes.append(f"{shown}{' ...' if len(unknown) > 3 else ''}: not read by migfit, no "
                     f"effect; it reads {GPU_MEMORY}, {GPU_COMPUTE} and {GPU_MEDIA} "
                     f"(README, \"The request contract\")")
    if not has_request(annotations):
        if any(k in (GPU_COMPUTE, GPU_MEDIA)
               or k.startswith((GPU_COMPUTE_PREFIX, GPU_MEDIA_PREFIX)) for k in annotations):
            notes.append(f"{GPU_COMPUTE}/{GPU_MEDIA} have no effect without {GPU_MEMORY}")
        return PodRequest(requests=(), notes=tuple(notes))
    if not containers:
        raise RequestError("the pod has no containers to give GPU memory to")

    regular = frozenset(containers)  # a lookup per key, not a scan of the list

    def check_container(key: str, name: str) -> None:
        if name in regular:
            return
        if name in init_containers:
            raise RequestError(
                f"{shorten(key, _KEY_LIMIT)} names init container {quote_name(name)}; GPU "
                f"memory can be given to regular containers only ({quote_list(containers)})"
            )
        raise RequestError(
            f"{shorten(key, _KEY_LIMIT)} names no container of this pod; use one of: "
            f"{quote_list(containers)}"
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
    main, note = default_container(annotations, containers, init_containers)
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
            notes.append(f"{shorten((compute.get(name) or media[name])[0], _KEY_LIMIT)} has "
                         f"no effect without {shorten(GPU_MEMORY_PREFIX + name, _KEY_LIMIT)} "
                         f"or {GPU_MEMORY}")
    return PodRequest(requests=tuple(out), notes=tuple(notes))


def parse_memory(key: str, value: str) -> int:
    """A memory amount of at least 1Mi in bytes from a quantity, or RequestError naming
    ``key``. Below 1Mi is a unit forgotten (``"12"`` is 12 bytes), never a real request."""
    try:
        amount = quantity.parse_bytes(value)
    except errors.QuantityError as exc:
        raise RequestError(f"{shorten(key, _KEY_LIMIT)}: {exc.message}") from None
    if amount <= 0:
        raise RequestError(
            f"{shorten(key, _KEY_LIMIT)}={quote(value)}: GPU memory must be more than zero; "
            f"write an amount such as 12Gi"
        )
    if amount < _MIB:
        bare = value.strip()
        exact = quantity.parse(bare)
        if bare.isascii() and bare.isdigit():
            why, hint = "GPU memory needs a unit", f"did you mean {bare}Gi?"
        elif bare.endswith("m") and bare[:-1].replace(".", "", 1).isdigit():
            # m is milli (a thousandth): 100m is a tenth of a byte, never 100 MiB
            why, hint = "m is milli, a thousandth", f"did you mean {bare[:-1]}Mi?"
        elif bare[-1:].isalpha():  # a suffix such as Ki: a unit, just too small
            why, hint = "too little for any GPU instance", "write an amount such as 12Gi"
        else:  # 1e5, 0.5: no suffix
            why, hint = "GPU memory needs a unit", "write an amount with a unit such as 12Gi"
        shown = (str(amount) if exact.denominator == 1
                 else format(decimal.Decimal(exact.numerator) / exact.denominator, "f"))
        raise RequestError(
            f"{shorten(key, _KEY_LIMIT)}={quote(value)} is {shown} byte"
            f"{'' if exact == 1 else 's'}, less than 1Mi: {why}; {hint}"
        )
    return amount


def parse_compute(key: str, value: str) -> int:
    """A positive whole number of compute slices, or RequestError naming ``key``. The length
    is checked before any conversion. No space is read around it, as none is around a
    gpu-memory quantity (``resource.Quantity``)."""
    text = value
    if (len(text) > MAX_VALUE_LENGTH or not text.isascii() or not text.isdigit()
            or not 0 < int(text) <= MAX_COMPUTE):
        if value.strip() != value and value.strip():
            raise RequestError(f"{shorten(key, _KEY_LIMIT)}={quote(value)}: remove the "
                               f"surrounding whitespace")
        if text.isascii() and text.isdigit() and len(text) <= MAX_VALUE_LENGTH \
                and int(text) == 0:
            raise RequestError(f"{shorten(key, _KEY_LIMIT)}={quote(value)}: a GPU instance has "
                               f"at least 1 compute slice; write a whole number such as 2, or "
                               f"remove the annotation")
        raise RequestError(
            f"{shorten(key, _KEY_LIMIT)}={quote(value)}: write the number of compute slices "
            f"as a whole number such as 2"
        )
    return int(text)


def parse_media(key: str, value: str) -> bool:
    """``true``/``false`` (also yes/no/1/0, any case, no space around), or RequestError
    naming ``key``."""
    text = value.lower() if len(value) <= MAX_VALUE_LENGTH else None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if value.strip() != value and value.strip():
        raise RequestError(f"{shorten(key, _KEY_LIMIT)}={quote(value)}: remove the "
                           f"surrounding whitespace")
    raise RequestError(
        f"{shorten(key, _KEY_LIMIT)}={quote(value)}: write \"true\" or \"false\"")


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


#: The webhook's record of a pod, as the extender's filter and the advisor read it: per
#: profile (canonical), the largest request (MiB) of the containers given it and the models
#: all of them fit (lower-case; None: every model that has the profile).
RecordedNeeds = tuple[tuple[str, int, frozenset[str] | None], ...]


@functools.lru_cache(maxsize=4096)
def recorded_needs(decision: str | None) -> RecordedNeeds:
    """``RecordedNeeds`` of a ``migfit.io/decision`` value; () without a valid record."""
    record = None if decision is None else keys.decision_of({keys.DECISION: decision})
    out: dict[str, tuple[int, frozenset[str] | None]] = {}
    for c in [] if record is None else record["containers"]:
        p = profiles.canonical_profile(c["profile"])
        mib, models = out.get(p, (0, None))
        if c["models"]:
            these = frozenset(m.lower() for m in c["models"])
            models = these if models is None else models & these
        out[p] = (max(mib, c["request_mib"]), models)
    return tuple((p, mib, models) for p, (mib, models) in sorted(out.items()))
