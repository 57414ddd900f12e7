"""Weights through Ray's object store: one ray.put per bucket per version (a list of byte arrays), many gets.
A tiny WeightBoard actor holds the latest handle; holding its ObjectRefs keeps exactly one version alive (the
previous one is released)."""

from __future__ import annotations

import warnings
from typing import Iterable, Iterator

import ray
import torch

from replay_rl.sync.base import WeightHandle, send_buckets
from replay_rl.sync.buckets import Bucket, as_bytes, from_bytes, plan_bytes


@ray.remote(num_cpus=0)
class WeightBoard:
    def __init__(self) -> None:
        self._latest: WeightHandle | None = None
        self._version = -1

    def set(self, handle: WeightHandle) -> int:
        if handle.version >= self._version:
            self._latest, self._version = handle, handle.version
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
        self.board = board

    def latest(self) -> WeightHandle | None:
        return ray.get(self.board.latest.remote())

    def fetch(self, handle: WeightHandle) -> Iterator[tuple[str, torch.Tensor]]:
        """One bucket at a time, as read-only views of the object store's copy: load them, do not write them."""
        for bucket, ref in zip(handle.plan, handle.payload):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # torch warns that the mapped arrays are read-only
                parts = [torch.from_numpy(a) for a in ray.get(ref)]
            yield from from_bytes(bucket, parts)
