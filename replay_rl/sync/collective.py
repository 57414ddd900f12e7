"""Weights over a broadcast group: learner rank 0 is group rank 0, generators are ranks 1..W (OpenRLHF's design).

NCCL on GPUs; the same code runs on gloo, which is how the CPU tests exercise it. The group is its own process
group (own TCPStore), separate from the learners' DeepSpeed group. Rank 0 announces the tensor list on the
WeightBoard, then broadcasts tensor by tensor; each generator joins the broadcast when it next checks for weights
(between backend calls), so rank 0 waits at most one generation call. Versions are received in order, none skipped.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Iterable, Iterator

import ray
import torch
import torch.distributed as dist

from replay_rl.sync.base import WeightHandle


@dataclass(frozen=True)
class TensorMeta:
    name: str
    shape: tuple[int, ...]
    dtype: str  # e.g. "float32"


class BroadcastGroup:
    def __init__(self, host: str, port: int, rank: int, world_size: int, backend: str, timeout_s: float = 600) -> None:
        timeout = datetime.timedelta(seconds=timeout_s)
        store = dist.TCPStore(host, port, world_size, rank == 0, timeout=timeout)
        if backend == "nccl":
            self.pg = dist.ProcessGroupNCCL(store, rank, world_size)
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.pg = dist.ProcessGroupGloo(store, rank, world_size, timeout)
            self.device = torch.device("cpu")
        self.rank = rank

    def broadcast(self, tensor: torch.Tensor) -> None:
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        self.pg.broadcast([tensor], opts).wait()


class CollectivePublisher:
    def __init__(self, board, group: BroadcastGroup) -> None:
        self.board, self.group = board, group

    def publish(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> WeightHandle:
        t0 = time.perf_counter()
        tensors = [(n, t.detach().to(self.group.device).contiguous()) for n, t in named_tensors]
        metas = [TensorMeta(n, tuple(t.shape), str(t.dtype).removeprefix("torch.")) for n, t in tensors]
        nbytes = sum(t.numel() * t.element_size() for _, t in tensors)
        ray.get(self.board.set.remote(WeightHandle(version, nbytes, metas, 0.0)))  # announce, then send
        for _, t in tensors:
            self.group.broadcast(t)
        return WeightHandle(version, nbytes, metas, time.perf_counter() - t0)


class CollectiveSubscriber:
    def __init__(self, board, group: BroadcastGroup) -> None:
        self.board, self.group = board, group

    def latest(self) -> WeightHandle | None:
        return ray.get(self.board.latest.remote())

    def fetch(self, handle: WeightHandle) -> Iterator[tuple[str, torch.Tensor]]:
        """Receive every announced tensor (the caller must consume the whole iterator: it is a collective)."""
        for meta in handle.payload:
            buf = torch.empty(meta.shape, dtype=getattr(torch, meta.dtype), device=self.group.device)
            self.group.broadcast(buf)
            yield meta.name, buf
