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

import csv
import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

import pydantic

from migfit import errors, layouts, profiles, quantity, strictfiles
from migfit.simulate import namedconfigs


@dataclasses.dataclass(frozen=True, slots=True)
class NodeSpec:
    """One simulated node: its model, each GPU's initial layout, cpu and memory."""

    name: str
    model: profiles.GpuModel
    gpu_layouts: tuple[tuple[profiles.ProfileName, ...], ...]
    cpu_milli: int
    memory_mib: int
    config: str  # the mig-parted config name the node is labelled with

    @property
    def gpus(self) -> int:
        return len(self.gpu_layouts)


class _Group(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    name: str = pydantic.Field(min_length=1)
    count: int = pydantic.Field(ge=1, le=100_000)
    model: str
    gpus: int = pydantic.Field(ge=1, le=64)
    cpu: str | int | float | None = None
    cpu_milli: int | None = pydantic.Field(default=None, ge=1)
    memory: str | int | None = None
    layout: str | list[str] | None = None
    layouts: list[list[str]] | None = None


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
    return math.ceil(quantity.parse(str(group.cpu)) * 1000)


def _memory(group: _Group, where: str) -> int:
    if group.memory is None:
        raise errors.ConfigError(f"{where}: give memory (e.g. 512Gi)")
    return quantity.parse_bytes(str(group.memory)) // (1024 * 1024)


def load_spec(path: Path, catalog: profiles.Catalog) -> list[NodeSpec]:
    """Node specs from a YAML cluster spec file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise errors.ConfigError(f"cannot read cluster spec {path}: {exc.strerror}") from None
    spec = strictfiles.validate(_Spec, strictfiles.load_yaml(text, where=str(path)),
                                where=str(path))
    strictfiles.require_version(spec.version, where=str(path))
    out: list[NodeSpec] = []
    seen: set[str] = set()
    for i, group in enumerate(spec.nodes):
        where = f"{path}: nodes[{i}] ({group.name})"
        if group.name in seen:
            raise errors.ConfigError(f"{where}: the name prefix is used twice")
        seen.add(group.name)
        model = catalog.get(group.model)
        if group.layouts is not None:
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
                            config=config)
                   for k in range(group.count))
    return out


def load_node_csv(path: Path, *, model: profiles.GpuModel, layout: str | Sequence[str]
                  ) -> list[NodeSpec]:
    """The trace's node list (``sn,cpu_milli,memory_mib,gpu,model``), every GPU as ``model``."""
    lay, config = resolve_layout(model, layout, where=str(path))
    out: list[NodeSpec] = []
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            for row in csv.DictReader(fh):
                gpus = int(row["gpu"])
                if gpus <= 0:
                    continue
                out.append(NodeSpec(name=row["sn"], model=model, gpu_layouts=(lay,) * gpus,
                                    cpu_milli=int(row["cpu_milli"]),
                                    memory_mib=int(row["memory_mib"]), config=config))
    except OSError as exc:
        raise errors.ConfigError(f"cannot read node list {path}: {exc.strerror}") from None
    except (KeyError, ValueError) as exc:
        raise errors.ConfigError(f"{path}: not the trace's node list "
                                 f"(sn,cpu_milli,memory_mib,gpu,model): {exc}") from None
    if not out:
        raise errors.ConfigError(f"{path}: no GPU nodes")
    return out
