"""Weights through Ray's object store: one ray.put per bucket per version, many gets. A tiny WeightBoard actor
holds the latest handle; holding its ObjectRefs keeps exactly one version alive (the previous one is released)."""

from __future__ import annotations

import warnings
from typing import Iterable, Iterator

import ray
import torch

from replay_rl.sync.base import WeightHandle, send_buckets
from replay_rl.sync.buckets import Bucket, plan_bytes, unpack


@ray.remote(num_cpus=0)
class WeightBoard:
    def __init__(self) -> None:
        self._latest: WeightHandle | None = None

    def set(self, handle: WeightHandle) -> int:
        if self._latest is None or handle.version >= self._latest.version:
            self._latest = handle
        return self._latest.version

    def latest(self) -> WeightHandle | None:
        return self._latest

    def version(self) -> int:
        return -1 if self._latest is None else self._latest.version


class ObjectStorePublisher:
    def __init__(self, board) -> None:
        self.board = board

    def publish(self, plan: list[Bucket], buckets: Iterable[list[torch.Tensor]], version: int) -> WeightHandle:
        # numpy, not torch: Ray stores numpy arrays out of band and a get maps them without a copy
        refs, gather_s, send_s = send_buckets(plan, buckets, lambda flat: ray.put(flat.numpy()))
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
                warnings.simplefilter("ignore", UserWarning)  # torch warns that the mapped array is read-only
                flat = torch.from_numpy(ray.get(ref))
            yield from unpack(bucket, flat)
