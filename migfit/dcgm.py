"""Which MIG instances are in use on which GPU, read from NVIDIA's DCGM exporter (pure: no I/O).

The Kubernetes API counts MIG instances per node; it does not say which GPU holds the
instance a pod got (docs/relayout.md §1). dcgm-exporter (the GPU Operator's DaemonSet
``nvidia-dcgm-exporter``, port 9400, ``/metrics``) does: each series of a MIG instance carries
the GPU's index and the instance, and, with its pod mapping on (kubelet pod-resources), the
pod that holds it. This module reads that text into a per-GPU report for
``migfit.advisor.advise(usage=...)``, which trusts it only where it agrees with the bound
pods' counts (``advisor.usage_holds``).

The label names are dcgm-exporter's own. Its GPU template
(internal/pkg/rendermetrics, ``gpuMetricsFormat``) renders
``gpu="<index>",UUID="...",pci_bus_id="...",device="nvidia0",modelName="..."``, then
``GPU_I_PROFILE="<profile>",GPU_I_ID="<instance id>"`` only when the entity is a MIG instance,
then ``Hostname``, then the attributes; the pod mapper's attributes are ``pod``, ``namespace``
and ``container`` (``podAttribute``/``namespaceAttribute``/``containerAttribute``), or
``pod_name``, ``pod_namespace`` and ``container_name`` with ``--use-old-namespace``
(``oldPodAttribute`` and friends). An instance is in use when a series of it names a pod.

The parser reads only what this needs of the Prometheus text exposition format (version
0.0.4): ``name{label="value",...} value [timestamp]`` lines, label values with the ``\\\\``,
``\\"`` and ``\\n`` escapes; ``#`` lines (HELP, TYPE, comments) and blank lines are ignored.
It is bounded (``max_lines``, ``max_line_chars``) and never raises on bad input: a malformed
line is skipped and counted, and a report that contradicts itself (one instance with two
profiles) says so in ``conflicts``.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Mapping

from migfit import profiles

ProfileName = profiles.ProfileName

# dcgm-exporter's label names (see the module docstring).
LABEL_GPU = "gpu"
LABEL_PROFILE = "GPU_I_PROFILE"
LABEL_INSTANCE = "GPU_I_ID"
LABEL_HOSTNAME = "Hostname"
POD_LABELS = (("namespace", "pod"), ("pod_namespace", "pod_name"))

DEFAULT_MAX_LINES = 200_000
DEFAULT_MAX_LINE_CHARS = 16_384

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"\s*')
_ESCAPE = re.compile(r"\\(.)")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
_INDEX = re.compile(r"0|[1-9][0-9]{0,3}")  # a GPU index: 0..9999, no sign, no leading zero


class _Bad(Exception):
    """A line that is not a sample line of the text format."""


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


@dataclasses.dataclass(frozen=True, slots=True)
class Exposition:
    """The sample lines of one scrape; ``skipped`` lines were not valid, ``truncated`` when
    more than ``max_lines`` lines came."""

    samples: tuple[Sample, ...]
    skipped: int
    truncated: bool


def _unescape(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        char = m.group(1)
        if char not in _ESCAPES:
            raise _Bad(f"unknown escape \\{char}")
        return _ESCAPES[char]

    return _ESCAPE.sub(one, text) if "\\" in text else text


def _value(text: str) -> float:
    # Go's ParseFloat spellings the format allows (NaN, +Inf, -Inf), and plain numbers.
    try:
        return float(text)
    except ValueError:
        raise _Bad(f"bad value {text!r}") from None


def parse_line(line: str) -> Sample:
    """One sample line; ``_Bad`` when it is not one."""
    m = _NAME.match(line)
    if m is None:
        raise _Bad("no metric name")
    name, pos = m.group(), m.end()
    labels: dict[str, str] = {}
    if pos < len(line) and line[pos] == "{":
        pos += 1
        while True:
            while pos < len(line) and line[pos] in " \t":
                pos += 1
            if pos < len(line) and line[pos] == "}":
                pos += 1
                break
            lm = _LABEL.match(line, pos)
            if lm is None:
                raise _Bad("bad label")
            key = lm.group(1)
            if key in labels:
                raise _Bad(f"label {key} twice")
            labels[key] = _unescape(lm.group(2))
            pos = lm.end()
            if pos < len(line) and line[pos] == ",":
                pos += 1
            elif pos < len(line) and line[pos] == "}":
                pos += 1
                break
            else:
                raise _Bad("labels not closed")
    rest = line[pos:].split()
    if not 1 <= len(rest) <= 2 or (pos < len(line) and line[pos] not in " \t"):
        raise _Bad("no value")
    value = _value(rest[0])
    if len(rest) == 2 and not re.fullmatch(r"-?[0-9]+", rest[1]):
        raise _Bad("bad timestamp")
    return Sample(name=name, labels=labels, value=value)


def parse(text: str, *, max_lines: int = DEFAULT_MAX_LINES,
          max_line_chars: int = DEFAULT_MAX_LINE_CHARS) -> Exposition:
    """The sample lines of ``text``; at most ``max_lines`` lines are read."""
    samples: list[Sample] = []
    skipped = 0
    truncated = False
    for count, raw in enumerate(text.splitlines()):
        if count >= max_lines:
            truncated = True
            break
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if len(line) > max_line_chars:
            skipped += 1
            continue
        try:
            samples.append(parse_line(line))
        except _Bad:
            skipped += 1
    return Exposition(samples=tuple(samples), skipped=skipped, truncated=truncated)


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Instance:
    """One MIG instance the exporter reports, and the pods (``namespace/name``) it names."""

    gpu: int
    instance_id: str
    profile: ProfileName
    pods: frozenset[str] = frozenset()

    @property
    def in_use(self) -> bool:
        return bool(self.pods)


@dataclasses.dataclass(frozen=True, slots=True)
class Report:
    """What one node's exporter says: its GPUs (by index) and their MIG instances."""

    gpus: frozenset[int]
    instances: tuple[Instance, ...]
    hostname: str | None = None
    skipped: int = 0  # lines not in the text format, or GPU series with a bad index
    truncated: bool = False
    conflicts: tuple[str, ...] = ()  # one instance reported with two profiles, ...

    @property
    def usable(self) -> bool:
        """Whether the report can be used at all: complete, consistent, with GPUs."""
        return bool(self.gpus) and not self.truncated and not self.conflicts

    def usage(self) -> list[Counter[ProfileName]]:
        """Per GPU index 0..max: the instances in use, per profile (``advisor.GpuUse``). A
        GPU without MIG instances (MIG off, or not reported) has an empty Counter; the advisor
        checks the length against the node's GPUs and the totals against its bound pods."""
        out: list[Counter[ProfileName]] = [Counter() for _ in range(max(self.gpus, default=-1)
                                                                    + 1)]
        for inst in self.instances:
            if inst.in_use:
                out[inst.gpu][inst.profile] += 1
        return out


def _pod(labels: Mapping[str, str]) -> str | None:
    for ns_key, pod_key in POD_LABELS:
        name = labels.get(pod_key, "")
        if name:
            return f"{labels.get(ns_key, '')}/{name}"
    return None


def report(exposition: Exposition) -> Report:
    """The per-GPU report of one scrape (every series of a GPU counts, whatever metric)."""
    gpus: set[int] = set()
    found: dict[tuple[int, str], tuple[ProfileName, set[str]]] = {}
    conflicts: list[str] = []
    skipped = exposition.skipped
    hostname: str | None = None
    for s in exposition.samples:
        index = s.labels.get(LABEL_GPU)
        if index is None:
            continue  # not a GPU series (NVSwitch, CPU, the exporter's own)
        if not _INDEX.fullmatch(index):
            skipped += 1
            continue
        gpu = int(index)
        gpus.add(gpu)
        hostname = hostname or s.labels.get(LABEL_HOSTNAME) or None
        profile = s.labels.get(LABEL_PROFILE, "")
        instance = s.labels.get(LABEL_INSTANCE, "")
        if not profile or not instance:
            continue  # the GPU itself (MIG off, or a device-level field)
        key = (gpu, instance)
        held = found.setdefault(key, (ProfileName(profile), set()))
        if held[0] != profile:
            conflicts.append(f"GPU {gpu} instance {instance}: {held[0]} and {profile}")
            continue
        pod = _pod(s.labels)
        if pod is not None:
            held[1].add(pod)
    instances = tuple(sorted(Instance(gpu=g, instance_id=i, profile=p, pods=frozenset(pods))
                             for (g, i), (p, pods) in found.items()))
    return Report(gpus=frozenset(gpus), instances=instances, hostname=hostname,
                  skipped=skipped, truncated=exposition.truncated,
                  conflicts=tuple(sorted(set(conflicts))))


def read(text: str, *, max_lines: int = DEFAULT_MAX_LINES,
         max_line_chars: int = DEFAULT_MAX_LINE_CHARS) -> Report:
    """``report(parse(text))``."""
    return report(parse(text, max_lines=max_lines, max_line_chars=max_line_chars))
