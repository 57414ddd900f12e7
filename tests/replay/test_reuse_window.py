"""The sampling window of the adaptive reuse rules: the schedule's capacity at given progress (hand values), the
controller's scale on it, and a Table that samples only from its freshest `size` items."""

from types import SimpleNamespace

import pytest

from replay_rl.config import RunConfig
from replay_rl.config.replay_specs import window_spec
from replay_rl.replay.reuse_window import ReuseWindow, scheduled_capacity, with_window
from replay_rl.replay.table import Table
from tests.replay.helpers import make_batch


def test_scheduled_capacity_at_given_progress():
    # N = 1280 anneals to B = 128 over the first half of the run
    assert [scheduled_capacity(1280, 128, 0.0, 0.5, p) for p in (0, 0.25, 0.5, 0.75, 1)] == [1280, 704, 128, 128, 128]
    # from 20% to 60% of the run: 40% is half way
    assert [scheduled_capacity(1280, 128, 0.2, 0.6, p) for p in (0.1, 0.4, 0.6)] == pytest.approx([1280, 704, 128])


def window(*overrides):
    """The window spec of a run of N = 1280, B = 128, 100 steps on 2 shards; None with no rule on."""
    return window_spec(RunConfig.load(None, ["replay.capacity=1280", "learner.batch_size=128", "run.steps=100",
                                             "cluster.learners=2", *overrides]))


def test_the_window_follows_the_schedule_per_shard_and_reports_totals():
    w = ReuseWindow(window("replay.capacity_schedule={end: 0.5}"))
    assert w.observe(0, {}) == {"reuse/progress": 0.0, "reuse/schedule_capacity": 1280.0, "reuse/capacity": 1280.0}
    assert w.size == 640
    assert w.observe(25, {})["reuse/capacity"] == 704.0 and w.size == 352  # each of 2 shards: half
    assert w.observe(25, {"grad_norm": 9.0})["reuse/capacity"] == 704.0    # once per version
    assert w.observe(60, {})["reuse/capacity"] == 128.0 and w.size == 64   # B: a rank's batch per shard
    w = ReuseWindow(window("replay.capacity_schedule={final_capacity: 8}"))
    assert w.observe(99, {}) and w.size == 64  # never below a rank's batch


def test_the_controller_scales_the_window():
    w = ReuseWindow(window("replay.reuse_controller={warmup: 2, window: 4}"))
    for v, g in enumerate([1.0, 1.1, 1.0]):
        row = w.observe(v, {"grad_norm": g})
    assert row["reuse/controller_action"] == 0 and w.size == 640
    row = w.observe(3, {"grad_norm": 50.0})  # spike: the scale halves
    assert row["reuse/controller_action"] == -1 and row["reuse/controller_scale"] == 0.5
    assert row["reuse/grad_norm"] == 50.0 and row["reuse/signal_z"] > 3 and row["reuse/capacity"] == 640.0
    w = ReuseWindow(window("replay.reuse_controller={signal: entropy_drop, warmup: 2}"))
    assert w.observe(0, {})["reuse/entropy_drop"] != w.observe(0, {})["reuse/entropy_drop"]  # NaN: no step yet
    w.observe(1, {"entropy": 0.5})
    assert w.observe(2, {"entropy": 0.4})["reuse/entropy_drop"] == pytest.approx(0.1)
    assert window() is None  # both rules off: no window at all


def test_a_windowed_table_samples_only_its_freshest_items():
    table = with_window(Table.fifo(16), SimpleNamespace(size=4))
    table.insert(make_batch(16))
    for v in range(5):
        batch, _ = table.sample(4, consumer_version=v)
        assert sorted(batch.reward.tolist()) == [12.0, 13.0, 14.0, 15.0]
    assert len(table) == 16  # the others stay stored
