"""Weights over a broadcast group: learner rank 0 is group rank 0, generators are ranks 1..W (OpenRLHF's design).

NCCL on GPUs; the same code runs on gloo, which is how the CPU tests exercise it. The group is its own process
group (own TCPStore), separate from the learners' DeepSpeed group, formed once by connect() on every member.
Rank 0 announces the bucket plan on the WeightBoard, then broadcasts one flat buffer per bucket; each generator
joins the broadcast when it next checks for weights (between backend calls), so rank 0 waits at most one
generation call. Versions are received in order, none skipped.
"""

from __future__ import annotations

import datetime
from typing import Iterable, Iterator

import ray
import torch
import torch.distributed as dist

from replay_rl.sync.base import send_buckets
from replay_rl.sync.buckets import pack, plan_bytes, unpack
from replay_rl.sync.plan import Bucket, WeightHandle
from replay_rl.sync.object_store import BoardWatch


class BroadcastGroup:
    def __init__(self, host: str, port: int, rank: int, world_size: int, backend: str, timeout_s: float = 600) -> None:
        timeout = datetime.timedelta(seconds=timeout_s)
        store = dist.TCPStore(host, port, world_size, rank == 0, timeout=timeout)
        if backend == "nccl":  # its own timeout is 10 min by default: sync.timeout_s bounds a frozen member
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            self.pg = dist.ProcessGroupNCCL(store, rank, world_size, options)
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.pg = dist.ProcessGroupGloo(store, rank, world_size, timeout)
            self.device = torch.device("cpu")
        self.rank, self.timeout = rank, timeout

    def broadcast(self, tensor: torch.Tensor) -> None:
        self.wait(self.start_broadcast(tensor))

    def wait(self, work) -> None:
        """Wait for one broadcast, at most sync.timeout_s: on NCCL a wait without a timeout only orders the
        device's stream, and the host would block on the tensor for as long as a frozen member holds it."""
        work.wait(self.timeout)

    def start_broadcast(self, tensor: torch.Tensor):
        """Issue the broadcast and return its work handle; every member issues its broadcasts in the same order."""
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        return self.pg.broadcast([tensor], opts)


class GroupSeat:
    """A member's place in the broadcast group: empty until connect() forms the group, which every publish or
    fetch then uses."""

    def __init__(self, backend: str, timeout_s: float) -> None:
        self.backend, self.timeout_s = backend, timeout_s
        self._group: BroadcastGroup | None = None

    def connect(self, host: str, port: int, rank: int, world_size: int) -> None:
        """Form the group (a collective: rank 0 and every generator call it together)."""
        self._group = BroadcastGroup(host, port, rank, world_size, self.backend, self.timeout_s)

    @property
    def group(self) -> BroadcastGroup:
        if self._group is None:
            raise RuntimeError("sync.type=nccl: connect() the broadcast group before the first publish or fetch")
        return self._group


class CollectivePublisher:
    def __init__(self, board, backend: str, timeout_s: float) -> None:
        self.board, self.seat = board, GroupSeat(backend, timeout_s)

    def connect(self, host: str, port: int, rank: int, world_size: int) -> None:
        self.seat.connect(host, port, rank, world_size)

    @property
    def group(self) -> BroadcastGroup:
        return self.seat.group

    def publish(self, plan: list[Bucket], buckets: Iterable[list[torch.Tensor]], version: int,
                probe=None) -> WeightHandle:
        """Double-buffered: bucket k+1 is packed while bucket k is on the wire (at most 2 packed buckets)."""
        announced = WeightHandle(version, plan_bytes(plan), plan, None, probe=probe)
        ray.get(self.board.set.remote(announced))  # announce, then send
        in_flight: list = []

        def send(bucket: Bucket, tensors: list[torch.Tensor]) -> None:
            flat = pack(bucket, [t.to(self.group.device) for t in tensors])
            if in_flight:
                self.group.wait(in_flight.pop()[0])
            in_flight.append((self.group.start_broadcast(flat), flat))  # the buffer lives until its send is done
            if bucket is plan[-1]:
                self.group.wait(in_flight.pop()[0])

        _, gather_s, send_s = send_buckets(plan, buckets, send)
        return WeightHandle(version, plan_bytes(plan), plan, None, gather_s, send_s, probe)


class CollectiveSubscriber:
    def __init__(self, board, backend: str, timeout_s: float) -> None:
        self.board, self.seat, self.watch = board, GroupSeat(backend, timeout_s), BoardWatch(board)

    def connect(self, host: str, port: int, rank: int, world_size: int) -> None:
        self.seat.connect(host, port, rank, world_size)

    @property
    def group(self) -> BroadcastGroup:
        return self.seat.group

    def latest(self) -> WeightHandle | None:
        return ray.get(self.board.latest.remote())

    def newer(self, version: int) -> WeightHandle | None:
        return self.watch.newer(version)

    def fetch(self, handle: WeightHandle) -> Iterator[tuple[str, torch.Tensor]]:
        """Receive every bucket of the plan (the caller must consume the whole iterator: it is a collective).
        Double-buffered: bucket k+1 is received while the caller loads bucket k."""

        def receive(bucket: Bucket):
            flat = torch.empty(bucket.nbytes, dtype=torch.uint8, device=self.group.device)
            return flat, self.group.start_broadcast(flat)

        nxt = receive(handle.plan[0]) if handle.plan else None
        for k, bucket in enumerate(handle.plan):
            flat, work = nxt
            self.group.wait(work)
            nxt = receive(handle.plan[k + 1]) if k + 1 < len(handle.plan) else None
            yield from unpack(bucket, flat)
