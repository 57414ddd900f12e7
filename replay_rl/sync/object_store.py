"""Weights through Ray's object store: one ray.put per bucket per version (a list of byte arrays), many gets.
A tiny WeightBoard actor holds the latest handle; holding its ObjectRefs keeps exactly one version alive (the
previous one is released)."""

from __future__ import annotations

import asyncio
import warnings
from typing import Iterable, Iterator

import ray
import torch

from replay_rl.sync.base import WeightHandle, send_buckets
from replay_rl.sync.buckets import Bucket, as_bytes, from_bytes, plan_bytes


@ray.remote(num_cpus=0)
class WeightBoard:
    """The latest weights' handle. Subscribers watch it with newer_than, one call each left waiting until a newer
    version is set, rather than polling it: W generators polling every 50 ms were W·20 calls a second on one actor
    (an async actor serves up to 1000 waiting calls)."""

    def __init__(self) -> None:
        self._latest: WeightHandle | None = None
        self._version = -1
        self._cond: asyncio.Condition | None = None

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:  # created lazily, inside the actor's event loop
            self._cond = asyncio.Condition()
        return self._cond

    async def set(self, handle: WeightHandle) -> int:
        async with self._condition():
            if handle.version >= self._version:
                self._latest, self._version = handle, handle.version
                self._condition().notify_all()
        return self._version

    def release(self) -> None:
        """Drop the board's hold on the latest weights before the next version is put, so that the object store
        holds one version, not two, while it is written. A subscriber mid-fetch holds its own handle, which
        keeps that version's objects alive until it is done; until the next set, latest() is None."""
        self._latest = None

    def latest(self) -> WeightHandle | None:
        return self._latest

    def version(self) -> int:
        return self._version

    async def newer_than(self, version: int) -> WeightHandle:
        """The latest handle once its version is above `version` (waits until then)."""
        async with self._condition():
            await self._condition().wait_for(lambda: self._latest is not None and self._version > version)
            return self._latest


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

    def publish(self, plan: list[Bucket], buckets: Iterable[list[torch.Tensor]], version: int) -> WeightHandle:
        ray.get(self.board.release.remote())
        # numpy, not torch: Ray stores numpy arrays out of band (one copy into the store) and a get maps them
        refs, gather_s, send_s = send_buckets(
            plan, buckets, lambda bucket, tensors: ray.put([t.numpy() for t in as_bytes(bucket, tensors)]))
        handle = WeightHandle(version, plan_bytes(plan), plan, refs, gather_s, send_s)
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
                parts = [torch.from_numpy(a) for a in ray.get(ref)]
            yield from from_bytes(bucket, parts)
