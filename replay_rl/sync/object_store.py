"""Weights through Ray's object store: one ray.put per bucket per version (a list of byte arrays), many gets.
A tiny WeightBoard actor (sync/board.py) holds the latest handle; holding its ObjectRefs keeps exactly one version alive (the
previous one is released)."""

from __future__ import annotations

import warnings
from typing import Iterable, Iterator

import ray
import torch

from replay_rl.sync.base import WeightsGone, send_buckets
from replay_rl.sync.buckets import as_bytes, from_bytes, plan_bytes
from replay_rl.sync.plan import Bucket, WeightHandle


class BoardWatch:
    """A subscriber's view of the board: one newer_than call in flight, checked without a round trip."""

    def __init__(self, board) -> None:
        self.board, self._ref, self._asked = board, None, -1

    def newer(self, version: int) -> WeightHandle | None:
        """The board's newest handle if it is newer than `version`, else None. Costs no call while nothing new
        arrived, and one round trip when something did: the waiting call's answer may be a version that a later
        publish has replaced meanwhile (a generator inside a long call polls late), so it is asked again."""
        if self._ref is None or self._asked != version:
            self._ref, self._asked = self.board.newer_than.remote(version), version
        if not ray.wait([self._ref], timeout=0)[0]:
            return None
        self._ref = None
        return ray.get(self.board.newer_than.remote(version))  # answers at once: a newer version is there


class ObjectStorePublisher:
    def __init__(self, board) -> None:
        self.board = board

    def publish(self, plan: list[Bucket], buckets: Iterable[list[torch.Tensor]], version: int,
                probe=None) -> WeightHandle:
        ray.get(self.board.release.remote())
        # numpy, not torch: Ray stores numpy arrays out of band (one copy into the store) and a get maps them
        refs, gather_s, send_s = send_buckets(
            plan, buckets, lambda bucket, tensors: ray.put([t.numpy() for t in as_bytes(bucket, tensors)]))
        handle = WeightHandle(version, plan_bytes(plan), plan, refs, gather_s, send_s, probe)
        ray.get(self.board.set.remote(handle))
        return handle


class ObjectStoreSubscriber:
    def __init__(self, board) -> None:
        self.board, self.watch = board, BoardWatch(board)

    def latest(self) -> WeightHandle | None:
        return ray.get(self.board.latest.remote())

    def newer(self, version: int) -> WeightHandle | None:
        return self.watch.newer(version)

    def fetch(self, handle: WeightHandle) -> Iterator[tuple[str, torch.Tensor]]:
        """One bucket at a time, as read-only views of the object store's copy: load them, do not write them."""
        for bucket, ref in zip(handle.plan, handle.payload):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # torch warns that the mapped arrays are read-only
                try:
                    parts = [torch.from_numpy(a) for a in ray.get(ref)]
                except ray.exceptions.ObjectLostError as e:  # freed, its owner dead, or its ref count lost
                    raise WeightsGone(f"weights version {handle.version}: {type(e).__name__}") from e
            yield from from_bytes(bucket, parts)
