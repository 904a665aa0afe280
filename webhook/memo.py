"""A bounded memo of the webhook's answers: the same request against the same supply is
answered from ready bytes.

Pods of one Deployment or Job arrive in bursts, all alike. The key is what the decision reads
of the pod (``reading.memo_key``: migfit's annotation values, the containers' names and GPU
resources, affinity, scheduler name) and the supply snapshot (``Supply.generation`` moves
only when the content the decision reads moves, free counts included (less what pending
pods ask for: a pod of a burst that claims a free instance moves them); ``--choice free`` and
``ceiling`` read whether each offer has a free instance, and the warnings quote the counts, so
keying on a free bit per offer, as the simulator's cache does, would serve stale warnings
here); the value is the verdict with its AdmissionResponse already encoded, so that a hit
only writes the new uid in front. One memo belongs to one app (one policy); the composition
root makes it. Pure: no I/O, no HTTP.

Bounded by count and by bytes: the supply may not move for hours, and one AdmissionReview may
be up to a MiB (a pod of thousands of containers), so a count alone let 40 large answers hold
most of the webhook's memory limit. Each entry is measured (``footprint``: its key, the
encoded answer and the patch objects the verdict keeps); one over ``DEFAULT_MAX_ENTRY_BYTES``
is not remembered (deciding it again costs less than it would hold), and the oldest entries
go while all of them hold more than ``DEFAULT_MAX_BYTES``.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Final, Generic, TypeVar

from migfit.webhook import view

#: Default number of distinct requests remembered (a few KiB each, mostly the patch).
DEFAULT_CAPACITY: Final = 4096
#: Default bytes all entries may hold together (``footprint``): a few percent of the webhook
#: pod's 1 GiB memory limit, and room for the default capacity of typical entries.
DEFAULT_MAX_BYTES: Final = 32 * 1024 * 1024
#: Default bytes one entry may hold: a pod of up to about 16 GPU containers (a typical one
#: holds 7 KiB); larger answers are decided afresh each time (a burst of such pods is rare).
DEFAULT_MAX_ENTRY_BYTES: Final = 64 * 1024
#: What the memo's own table spends per entry beside the key and the value (an OrderedDict
#: node and the (value, size) pair), counted with each entry.
_TABLE_BYTES: Final = 200

T = TypeVar("T")


@dataclasses.dataclass(slots=True)
class Stats:
    """Counts since the memo was made."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    resets: int = 0  # the supply changed, so every entry was dropped
    too_large: int = 0  # answers not remembered: over the memo's bytes per entry


def footprint(value: object, limit: int) -> int:
    """About how many bytes ``value`` holds: ``sys.getsizeof`` summed over the objects it
    reaches through tuples, lists, dicts, sets and other objects' slots and ``__dict__``
    (an object reached twice counts twice, so shared ones are overcounted). Stops once the sum
    passes ``limit`` and returns that partial sum (over ``limit``), so measuring costs at
    most ``limit`` bytes' worth of objects."""
    total = 0
    stack: list[Any] = [value]
    pop, push, sizeof = stack.pop, stack.extend, sys.getsizeof
    while stack:
        item = pop()
        total += sizeof(item)
        if total > limit:
            return total
        kind = type(item)
        if kind in _LEAVES:
            continue
        if kind is dict:
            push(item.keys())
            push(item.values())
        elif kind in _SEQUENCES:
            push(item)
        else:  # an object: what its slots (a slotted dataclass's fields) or __dict__ hold
            slots = getattr(kind, "__slots__", ())
            push([getattr(item, name, None) for name in
                  ((slots,) if isinstance(slots, str) else slots)])
            push(getattr(item, "__dict__", {}).values())
    return total


_SEQUENCES: Final = frozenset({tuple, list, set, frozenset})
_LEAVES: Final = frozenset({str, bytes, int, float, bool, type(None)})


class DecisionMemo(Generic[T]):
    """Least-recently-used answers for one supply snapshot at a time: at most ``capacity``
    of them, holding at most ``max_bytes`` together, none over ``max_entry_bytes``.

    A snapshot other than the one the entries were made for drops them all (they were
    decided against another supply); ``capacity`` 0 remembers nothing.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY, *,
                 max_bytes: int = DEFAULT_MAX_BYTES,
                 max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES) -> None:
        if capacity < 0:
            raise ValueError(f"memo capacity {capacity}: use 0 or more")
        if max_bytes < 0 or max_entry_bytes < 0:
            raise ValueError(f"memo bytes {max_bytes}, per entry {max_entry_bytes}: use 0 or "
                             f"more")
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.max_entry_bytes = min(max_entry_bytes, max_bytes)
        self.stats = Stats()
        self._entries: OrderedDict[Hashable, tuple[T, int]] = OrderedDict()
        self._bytes = 0
        self._supply: view.Supply | None = None

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        """What the entries hold together (``footprint`` of each, and the table's share)."""
        return self._bytes

    def _for(self, supply: view.Supply) -> None:
        if supply is not self._supply:
            if self._entries:
                self.stats.resets += 1
            self._entries.clear()
            self._bytes = 0
            self._supply = supply

    def get(self, key: Hashable, supply: view.Supply) -> T | None:
        """The answer remembered for ``key`` against ``supply``, or None."""
        self._for(supply)
        found = self._entries.get(key)
        if found is None:
            self.stats.misses += 1
            return None
        self._entries.move_to_end(key)
        self.stats.hits += 1
        return found[0]

    def put(self, key: Hashable, supply: view.Supply, entry: T, *,
            size: int | None = None) -> None:
        """Remember ``entry`` for ``key`` against ``supply`` unless it holds more than
        ``max_entry_bytes``, forgetting the least recent ones beyond the bounds. ``size``:
        the caller's estimate of what key and entry hold (an upper bound it can make in
        O(1)); None: measured (``footprint``, tens of µs for a typical answer)."""
        if self.capacity == 0:
            return
        self._for(supply)
        size = _TABLE_BYTES + (footprint((key, entry), self.max_entry_bytes) if size is None
                               else size)
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        if size > self.max_entry_bytes:
            self.stats.too_large += 1
            return
        self._entries[key] = (entry, size)
        self._bytes += size
        while len(self._entries) > self.capacity or self._bytes > self.max_bytes:
            _key, (_entry, dropped) = self._entries.popitem(last=False)
            self._bytes -= dropped
            self.stats.evictions += 1
