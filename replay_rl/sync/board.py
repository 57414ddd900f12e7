"""The WeightBoard: a tiny async actor holding the latest published weights' handle (sync/object_store.py and
sync/collective.py). Its module imports no torch, so the two boards every run starts come up in about half a second,
not the two a torch import takes (each is a fresh Ray worker process)."""

from __future__ import annotations

import asyncio

import ray

from replay_rl.sync.plan import WeightHandle


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
