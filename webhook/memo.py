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
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Hashable
from typing import Final, Generic, TypeVar

from migfit.webhook import view

#: Default number of distinct requests remembered (a few KiB each, mostly the patch).
DEFAULT_CAPACITY: Final = 4096

T = TypeVar("T")


@dataclasses.dataclass(slots=True)
class Stats:
    """Counts since the memo was made."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    resets: int = 0  # the supply changed, so every entry was dropped


class DecisionMemo(Generic[T]):
    """Least-recently-used answers for one supply snapshot at a time, at most ``capacity``.

    A snapshot other than the one the entries were made for drops them all (they were
    decided against another supply); ``capacity`` 0 remembers nothing.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 0:
            raise ValueError(f"memo capacity {capacity}: use 0 or more")
        self.capacity = capacity
        self.stats = Stats()
        self._entries: OrderedDict[Hashable, T] = OrderedDict()
        self._supply: view.Supply | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def _for(self, supply: view.Supply) -> None:
        if supply is not self._supply:
            if self._entries:
                self.stats.resets += 1
            self._entries.clear()
            self._supply = supply

    def get(self, key: Hashable, supply: view.Supply) -> T | None:
        """The answer remembered for ``key`` against ``supply``, or None."""
        self._for(supply)
        entry = self._entries.get(key)
        if entry is None:
            self.stats.misses += 1
            return None
        self._entries.move_to_end(key)
        self.stats.hits += 1
        return entry

    def put(self, key: Hashable, supply: view.Supply, entry: T) -> None:
        """Remember ``entry`` for ``key`` against ``supply``, forgetting the least recent."""
        if self.capacity == 0:
            return
        self._for(supply)
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
            self.stats.evictions += 1
