"""RunConfig → the frozen specs replay/ builds from: the one place that reads a RunConfig for a shard's table, its
window and the generators' pace."""

from __future__ import annotations

from replay_rl.config.root import RunConfig
from replay_rl.replay.limits import Pace
from replay_rl.replay.pace_check import pace_setting
from replay_rl.replay.reuse_window import ControllerSpec, ScheduleSpec, WindowSpec
from replay_rl.replay.table import RateLimit, TableSpec


def table_spec(cfg: RunConfig) -> TableSpec:
    r, limit = cfg.replay, cfg.replay.rate_limit
    # the tolerance is derived once: exploring the limiter's states is not free
    rate_limit = (RateLimit(limit.samples_per_insert, cfg.rate_limit_tolerance, limit.min_size_to_sample)
                  if limit else None)
    delta = r.delta if r.type == "positive_bias" else 0.0
    return TableSpec(r.type, cfg.shard_capacity, r.sampler, delta, r.max_staleness, r.max_reuse, rate_limit,
                     pace=pace_for(cfg))


def window_spec(cfg: RunConfig) -> WindowSpec | None:
    """None when neither adaptive reuse rule is on: the shard then samples its whole table."""
    s, c, shards = cfg.replay.capacity_schedule, cfg.replay.reuse_controller, cfg.cluster.learners
    if not (s or c):
        return None
    schedule = ScheduleSpec(s.start, s.end, (s.final_capacity or cfg.learner.batch_size) / shards) if s else None
    controller = ControllerSpec(**c.model_dump()) if c else None
    return WindowSpec(shards, cfg.run.steps, cfg.shard_capacity, cfg.rank_batch_size, schedule, controller)


def pace_for(cfg: RunConfig) -> Pace | None:
    """The emulated cluster's schedule, or None when generators run free (no cluster.emulate)."""
    setting = pace_setting(cfg)
    return None if setting is None else setting.pace()

