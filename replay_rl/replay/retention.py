"""Retention: which items to evict when a shard is full. FIFO, or the paper's positive-bias rule (two FIFOs)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol


class Retention(Protocol):
    def on_insert(self, slot: int, correct: bool) -> list[int]: ...  # slots to evict now (never `slot` itself unless cap 0)
    def on_delete(self, slot: int) -> None: ...                     # the Table removed `slot` for another reason
    def region_of(self, slot: int) -> int: ...                      # 0 main FIFO, 1 positive FIFO (for snapshots)
    def restore(self, slot: int, region: int, correct: bool) -> None: ...  # put a snapshotted item back, oldest first


class FifoRetention:
    """Keep the `capacity` most recent items; evict the oldest."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._order: OrderedDict[int, None] = OrderedDict()

    def on_insert(self, slot: int, correct: bool) -> list[int]:
        self._order[slot] = None
        evicted = []
        while len(self._order) > self.capacity:
            evicted.append(self._order.popitem(last=False)[0])
        return evicted

    def on_delete(self, slot: int) -> None:
        self._order.pop(slot, None)

    def region_of(self, slot: int) -> int:
        return 0

    def restore(self, slot: int, region: int, correct: bool) -> None:
        self._order[slot] = None


class PositiveBiasRetention:
    """Keep the freshest (1−δ)N items, plus the freshest δN *correct* items that aged out of them.

    Two FIFOs: when the main FIFO overflows, its oldest item moves to the positive FIFO if correct and is evicted
    otherwise; the positive FIFO evicts its own oldest. δ = 0 is exactly FIFO. The main FIFO gets round((1−δ)N).
    """

    def __init__(self, capacity: int, delta: float) -> None:
        self.main_capacity = round((1 - delta) * capacity)
        self.positive_capacity = capacity - self.main_capacity
        self._main: OrderedDict[int, None] = OrderedDict()
        self._positive: OrderedDict[int, None] = OrderedDict()
        self._correct: dict[int, bool] = {}

    def on_insert(self, slot: int, correct: bool) -> list[int]:
        self._main[slot] = None
        self._correct[slot] = correct
        evicted = []
        while len(self._main) > self.main_capacity:
            old = self._main.popitem(last=False)[0]
            if self._correct[old]:
                self._positive[old] = None
            else:
                evicted.append(old)
        while len(self._positive) > self.positive_capacity:
            evicted.append(self._positive.popitem(last=False)[0])
        for s in evicted:
            del self._correct[s]
        return evicted

    def on_delete(self, slot: int) -> None:
        self._main.pop(slot, None)
        self._positive.pop(slot, None)
        self._correct.pop(slot, None)

    def region_of(self, slot: int) -> int:
        return 1 if slot in self._positive else 0

    def restore(self, slot: int, region: int, correct: bool) -> None:
        (self._positive if region else self._main)[slot] = None
        self._correct[slot] = correct
