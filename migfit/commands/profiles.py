"""``migfit profiles``: the MIG catalog (built-in plus any --catalog file) as a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TypedDict

from migfit import profiles


class ProfileJson(TypedDict):
    name: str
    resource: str
    gi_profile_id: int | None
    compute_slices: int
    memory_slices: int
    memory_mib: int
    max_instances: int
    starts: list[int]
    media: bool
    provisional: bool


class VariantJson(TypedDict):
    products: list[str]
    device_ids: list[str]


class ModelJson(TypedDict):
    id: str
    memory_slices: int
    compute_slices: int
    memory_mib: int
    products: list[str]
    device_ids: list[str]
    variants: list[VariantJson]
    provisional: bool
    source: str
    profiles: list[ProfileJson]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu", metavar="MODEL",
                        help="only this model (canonical id such as A100-80GB, or a product "
                             "label such as NVIDIA-A100-SXM4-80GB)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--catalog", metavar="FILE",
                        help="YAML file of models to add or override (same schema as the "
                             "built-in catalog)")


def profile_json(p: profiles.Profile) -> ProfileJson:
    return ProfileJson(
        name=p.name, resource=p.resource, gi_profile_id=p.gi_profile_id,
        compute_slices=p.compute_slices, memory_slices=p.memory_slices,
        memory_mib=p.memory_mib, max_instances=p.max_instances, starts=list(p.starts),
        media=p.media, provisional=p.provisional,
    )


def model_json(m: profiles.GpuModel) -> ModelJson:
    return ModelJson(
        id=m.id, memory_slices=m.memory_slices, compute_slices=m.compute_slices,
        memory_mib=m.memory_mib, products=list(m.products), device_ids=list(m.device_ids),
        variants=[VariantJson(products=list(v.products), device_ids=list(v.device_ids))
                  for v in m.variants],
        provisional=m.provisional, source=m.source,
        profiles=[profile_json(p) for p in m.profiles],
    )


_HEADER = ("profile", "GI id", "c-slices", "m-slices", "MiB", "max", "starts", "+me")


def render_table(models: tuple[profiles.GpuModel, ...]) -> str:
    """One block per model; provisional values carry ``*`` and a footnote at the end."""
    lines: list[str] = []
    any_provisional = False
    for m in models:
        mark = "*" if m.provisional else ""
        any_provisional |= m.provisional
        lines.append(f"{m.id}{mark}: {m.compute_slices} compute slices, {m.memory_slices} "
                     f"memory slices, {m.memory_mib} MiB; PCI ids "
                     f"{', '.join(m.device_ids) or 'not known'}")
        rows: list[tuple[str, ...]] = [_HEADER]
        for p in m.profiles:
            any_provisional |= p.provisional
            rows.append((
                p.name + ("*" if p.provisional else ""),
                "-" if p.gi_profile_id is None else str(p.gi_profile_id),
                str(p.compute_slices),
                str(p.memory_slices),
                str(p.memory_mib),
                str(p.max_instances),
                ",".join(map(str, p.starts)),
                "yes" if p.media else "",
            ))
        widths = [max(len(r[i]) for r in rows) for i in range(len(_HEADER))]
        for r in rows:
            # Text columns left-aligned, numbers right-aligned.
            cells = [c.ljust(w) if i in (0, 6, 7) else c.rjust(w)
                     for i, (c, w) in enumerate(zip(r, widths, strict=True))]
            lines.append("  " + "  ".join(cells).rstrip())
        lines.append("")
    if any_provisional:
        lines.append("* provisional: not seen on real hardware; verify with "
                     "`nvidia-smi mig -lgip` / `-lgipp` and override with --catalog FILE")
    return "\n".join(lines).rstrip("\n")


def run(args: argparse.Namespace) -> int:
    catalog = profiles.load(args.catalog)
    # An empty --gpu (a variable left unset: --gpu "$GPU") is an unknown name, not "all".
    models = (catalog.get(args.gpu),) if args.gpu is not None else catalog.models
    if args.json:
        json.dump([model_json(m) for m in models], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render_table(models))
    return 0
