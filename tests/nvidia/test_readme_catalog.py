"""The README's catalog section lists every model with its PCI ids and what is provisional."""

from __future__ import annotations

from pathlib import Path

from migfit import profiles

README = Path(__file__).resolve().parents[2] / "README.md"


def _rows() -> dict[str, list[str]]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## The MIG catalog"):]
    section = section[:section.index("\n## ", 5)]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 5:
            rows[cells[0].strip("`")] = cells
    return rows


def test_every_model_is_listed_with_its_ids_and_provisional_values() -> None:
    rows = _rows()
    catalog = profiles.builtin()
    assert set(rows) == {m.id for m in catalog.models}
    for m in catalog.models:
        _, slices, ids, _, provisional = rows[m.id]
        assert slices == str(m.memory_slices)
        listed = [c.strip(" `") for c in ids.split(",")] if ids != "not known" else []
        assert listed == list(m.device_ids), m.id
        marked = [p.name for p in m.profiles if p.provisional]
        if m.provisional or len(marked) == len(m.profiles):
            assert provisional == "all values", m.id
        elif marked:
            assert [c.strip(" `") for c in provisional.split(",")] == marked, m.id
        else:
            assert provisional == "none", m.id
