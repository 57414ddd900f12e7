"""One contract for every weight transport: what the publisher sends is what every subscriber gets, bit for bit,
with the version it was published at. Real Ray actors; the collective path runs on gloo here, NCCL on GPUs."""

import socket
import time

import pytest
import ray
import torch

from replay_rl.config import NcclSyncConfig, ObjectStoreSyncConfig
from replay_rl.sync.base import publish_state
from replay_rl.sync.plan import WeightHandle
from replay_rl.sync.factory import make_weight_sync
from replay_rl.sync.board import WeightBoard
from replay_rl.sync.object_store import BoardWatch

pytestmark = pytest.mark.ray
SUBSCRIBERS = 2


def weights(version):
    g = torch.Generator().manual_seed(version)
    return {"a.weight": torch.randn(64, 32, generator=g), "b.bias": torch.randn(7, generator=g),
            "c.int": torch.arange(5, dtype=torch.int64) * version, "d.weight": torch.randn(3, 5, generator=g)}



@ray.remote(num_cpus=0)
class Side:
    def __init__(self, transport, board, rank, host=None, port=None):
        cfg = (ObjectStoreSyncConfig() if transport == "object_store"
               else NcclSyncConfig(type="nccl", backend=transport, timeout_s=60))
        self.pub, self.sub = make_weight_sync(cfg, "publisher", board), make_weight_sync(cfg, "subscriber", board)
        if transport != "object_store":  # one group object per member: its publisher or its subscriber forms it
            (self.pub if rank == 0 else self.sub).connect(host, port, rank, SUBSCRIBERS + 1)

    def publish(self, version, after_s: float = 0.0):
        time.sleep(after_s)  # a publish still on its way when a subscriber finds its version gone
        # 64·32 floats are 8 KiB: a bucket of 4 KiB holds it alone (larger than a bucket); the small ones share one
        h = publish_state(self.pub, weights(version), version, bucket_bytes=4096)
        return h.version, h.nbytes, len(h.plan)

    def fetch_when(self, version):
        while (h := self.sub.newer(version - 1)) is None:  # as a generator polls: no call while nothing new
            time.sleep(0.001)
        return h.version, dict(self.sub.fetch(h))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("transport", ["object_store", "gloo", pytest.param("nccl", marks=pytest.mark.gpu)])
def test_subscribers_receive_exactly_what_was_published(ray_cluster, transport):
    if transport == "nccl" and not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    board, port = WeightBoard.remote(), free_port()
    sides = [Side.remote(transport, board, r, "127.0.0.1", port) for r in range(SUBSCRIBERS + 1)]
    publisher, subscribers = sides[0], sides[1:]
    for version in (1, 2):
        sent = publisher.publish.remote(version)
        got = ray.get([s.fetch_when.remote(version) for s in subscribers])
        v, nbytes, buckets = ray.get(sent)
        assert buckets == 2 and v == version
        assert nbytes >= sum(t.numel() * t.element_size() for t in weights(version).values())
        for got_version, state in got:
            assert got_version == version
            assert state.keys() == weights(version).keys()
            assert all(torch.equal(state[k].cpu(), weights(version)[k]) for k in state)
    assert ray.get(board.version.remote()) == 2


def test_a_subscriber_watches_the_board_with_one_call_in_flight(ray_cluster):
    board = WeightBoard.remote()
    watch = BoardWatch(board)
    assert watch.newer(-1) is None                    # nothing published yet
    waiting = watch._ref
    assert watch.newer(-1) is None and watch._ref is waiting  # polled again: the same call, none sent
    ray.get(board.set.remote(WeightHandle(3, 0, [], [])))
    deadline = time.monotonic() + 30
    while (handle := watch.newer(-1)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert handle is not None and handle.version == 3
    assert watch.newer(3) is None                     # not newer than what the caller holds
    ray.get(board.release.remote())                   # between a release and the next set: nothing to load
    ray.get(board.set.remote(WeightHandle(4, 0, [], [])))
    assert ray.get(board.newer_than.remote(3)).version == 4


def gone_within(handle, seconds):
    """Wait until Ray reports the handle's first bucket lost (its owner's death is noticed asynchronously)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            ray.get(handle.payload[0], timeout=5)
        except ray.exceptions.ObjectLostError:
            return
        time.sleep(0.2)
    raise AssertionError(f"version {handle.version} still readable {seconds} s after its owner was killed")


class Holder:
    """A generation backend's weight side: what it loaded last, and its version."""

    def __init__(self):
        self.version, self.state = 0, {}

    def load_weights(self, named_tensors, version):
        self.state.update((n, t.clone()) for n, t in named_tensors)
        self.version = version


def test_a_version_lost_before_its_fetch_is_replaced_by_the_boards_newest(ray_cluster):
    """A resumed study trial's generator once failed on weights whose bytes Ray had lost (a borrowed ref): the
    subscriber loads the board's newest whole version instead, waiting up to sync.timeout_s for one being published
    (the publish that freed the lost version is the likeliest case); none coming is WeightsGone, which the driver
    takes as the generator's death. Lost here: the publisher that owns a version's objects is killed."""
    from replay_rl.sync.base import WeightsGone, load_if_newer

    board = WeightBoard.remote()
    sub = make_weight_sync(ObjectStoreSyncConfig(), "subscriber", board)
    first, second = Side.remote("object_store", board, 0), Side.remote("object_store", board, 0)
    ray.get(first.publish.remote(1))
    lost = sub.latest()
    ray.get(second.publish.remote(2))
    ray.kill(first)  # version 1's owner: its bytes are gone while this subscriber still holds their handle
    gone_within(lost, 30)
    holder = Holder()
    assert load_if_newer(sub, holder, lost).version == 2 and holder.version == 2
    assert all(torch.equal(holder.state[n], t) for n, t in weights(2).items())
    # the newest lost too, and the next version still being published: waited for within sync.timeout_s
    third = Side.remote("object_store", board, 0)
    ray.kill(second)
    gone_within(sub.latest(), 30)
    coming = third.publish.remote(3, after_s=2.0)
    holder = Holder()
    assert load_if_newer(sub, holder, sub.latest(), wait_s=60).version == 3 and holder.version == 3
    assert all(torch.equal(holder.state[n], t) for n, t in weights(3).items())
    ray.get(coming)
    # and none coming: one line naming the lost version and the bound
    ray.kill(third)
    gone_within(sub.latest(), 30)
    t0 = time.monotonic()
    with pytest.raises(WeightsGone, match=r"weights version 3 is gone and no newer version came within 1s "
                                          r"\(sync.timeout_s\)"):
        load_if_newer(sub, Holder(), sub.latest(), wait_s=1)
    assert time.monotonic() - t0 < 10
