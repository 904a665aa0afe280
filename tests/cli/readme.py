"""The README's examples, read from the README itself, so tests can hold them to real output."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


@dataclasses.dataclass(frozen=True, slots=True)
class Block:
    lang: str
    text: str
    after: str  # the prose just before the block (to find a block by what introduces it)


def blocks() -> list[Block]:
    """Every fenced code block of the README, in order."""
    found = []
    lines = README.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\S*)\s*$", lines[i])
        if fence is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = "\n".join(lines[max(0, i - 8):i])
        found.append(Block(fence.group(1), "\n".join(lines[i + 1:end]), before))
        i = end + 1
    return found


def block_after(marker: str) -> Block:
    """The first block whose preceding prose contains ``marker``."""
    matches = [b for b in blocks() if marker in b.after]
    assert matches, f"README has no code block after {marker!r}"
    return matches[0]


def console_examples() -> list[tuple[str, str]]:
    """``(command, expected output)`` for each ``$ migfit ...`` line of the console blocks."""
    out: list[tuple[str, str]] = []
    for block in blocks():
        if block.lang != "console":
            continue
        command: str | None = None
        expected: list[str] = []
        for line in block.text.splitlines():
            if line.startswith("$ "):
                if command is not None:
                    out.append((command, "\n".join(expected)))
                command, expected = line[2:], []
            else:
                expected.append(line)
        if command is not None:
            out.append((command, "\n".join(expected)))
    return out
