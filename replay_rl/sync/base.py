"""Weight sync protocol: the learner publishes full weights with a version, bucket by bucket; generators fetch the
latest. The generator never knows how the tensors travelled; the learner never knows who loads them.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Iterator, Protocol

import torch

from replay_rl.sync.plan import Bucket, WeightHandle, plan_buckets


class WeightPublisher(Protocol):
    def publish(self, plan: list[Bucket], buckets: Iterable[list[torch.Tensor]], version: int,
                probe: Any = None) -> WeightHandle:
        """buckets: the plan's tensors, one list per bucket, produced lazily (each is packed before the next).
        probe: the learner's log-probs of the weight-check probe set, handed to subscribers with the version."""


class WeightsGone(RuntimeError):
    """A published version's bytes were no longer there when a subscriber fetched them."""


class WeightSubscriber(Protocol):
    def latest(self) -> WeightHandle | None:
        """The board's handle now (one round trip)."""

    def newer(self, version: int) -> WeightHandle | None:
        """The board's handle if newer than `version`, else None, without a round trip while nothing new came."""

    def fetch(self, handle: WeightHandle) -> Iterator[tuple[str, torch.Tensor]]: ...


def send_buckets(plan: list[Bucket], buckets: Iterable[list[torch.Tensor]],
                 send: Callable[[Bucket, list[torch.Tensor]], Any]) -> tuple[list, float, float]:
    """Hand each bucket's tensors to `send` (which encodes and transmits them) as soon as they arrive; returns what
    send returned per bucket, and the seconds spent waiting for tensors (gather) and encoding + sending (send)."""
    out, gather_s, send_s, stream = [], 0.0, 0.0, iter(buckets)
    for bucket in plan:
        t0 = time.perf_counter()
        tensors = next(stream)
        t1 = time.perf_counter()
        out.append(send(bucket, tensors))
        gather_s, send_s = gather_s + t1 - t0, send_s + time.perf_counter() - t1
    next(stream, None)  # run the stream to its end: a ZeRO-3 gather of the last bucket is released there, not later
    return out, gather_s, send_s


def publish_state(publisher: WeightPublisher, state: dict[str, torch.Tensor], version: int,
                  bucket_bytes: int = 256 * 2**20) -> WeightHandle:
    """Publish a whole state dict that is already in memory (each tensor travels in its own dtype)."""
    plan = plan_buckets([(n, tuple(t.shape), str(t.dtype).removeprefix("torch.")) for n, t in state.items()],
                        bucket_bytes)
    return publisher.publish(plan, ([state[n] for n in b.names] for b in plan), version)


def load_if_newer(subscriber: WeightSubscriber, backend, handle: WeightHandle | None = None,
                  wait_s: float = 0.0) -> WeightHandle | None:
    """Load published weights into a generation backend when they are newer than what it holds: `handle`, or the
    subscriber's newer one (a generator's poll, which costs no call while nothing new arrived). Returns the handle
    it loaded, or None when there was nothing new. A version whose bytes are gone is replaced by the board's next
    one, waited for up to `wait_s` (sync.timeout_s); past it, WeightsGone, which the driver takes as this
    generator's death."""
    handle = handle if handle is not None else subscriber.newer(backend.version)
    if handle is None or handle.version <= backend.version:
        return None
    while True:
        try:
            backend.load_weights(subscriber.fetch(handle), handle.version)
            return handle
        except WeightsGone:
            # its bytes were released before they were read (seen once in a resumed study trial: Ray's ref counting
            # lost a borrowed ref, cf. ray#18456), most likely by the publish of the next version, which may not be
            # on the board yet: wait for it, then load every tensor of it, so a backend that loaded part of the
            # lost version holds one whole version after
            handle = next_version(subscriber, handle, wait_s)


def next_version(subscriber: WeightSubscriber, lost: WeightHandle, wait_s: float) -> WeightHandle:
    """The board's first version newer than `lost`, polled for up to wait_s; WeightsGone if none comes."""
    deadline = time.monotonic() + wait_s
    while True:
        newest = subscriber.latest()
        if newest is not None and newest.version > lost.version:
            return newest
        if time.monotonic() >= deadline:
            raise WeightsGone(f"weights version {lost.version} is gone and no newer version came within "
                              f"{wait_s:g}s (sync.timeout_s)")
        time.sleep(0.05)
