"""Weights through Ray's object store: one ray.put per version, many gets. A tiny WeightBoard actor holds the
latest handle; holding the ObjectRef keeps exactly one version alive (the previous one is released)."""

from __future__ import annotations

import time
from typing import Iterable, Iterator

import ray
import torch

from replay_rl.sync.base import WeightHandle


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

    def publish(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> WeightHandle:
        t0 = time.perf_counter()
        state = {name: t.detach().to("cpu", copy=True).contiguous() for name, t in named_tensors}
        nbytes = sum(t.numel() * t.element_size() for t in state.values())
        handle = WeightHandle(version, nbytes, [ray.put(state)], time.perf_counter() - t0)
        ray.get(self.board.set.remote(handle))
        return handle


class ObjectStoreSubscriber:
    def __init__(self, board) -> None:
        self.board = board

    def latest(self) -> WeightHandle | None:
        return ray.get(self.board.latest.remote())

    def fetch(self, handle: WeightHandle) -> Iterator[tuple[str, torch.Tensor]]:
        state = ray.get(handle.payload[0])
        return iter(state.items())
