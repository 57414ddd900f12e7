"""RunConfig → the frozen specs replay/ builds from. replay/ is the lower layer and imports no config, so this is
the one place that reads a RunConfig for a shard, its table, its window and the generators' pace."""

from __future__ import annotations

from pathlib import Path

from replay_rl.config.root import RunConfig
from replay_rl.replay.limits import Pace
from replay_rl.replay.reuse_window import ControllerSpec, ScheduleSpec, WindowSpec
from replay_rl.replay.shard_spec import ShardSpec
from replay_rl.replay.table import RateLimit, TableSpec

# what a shard's contents do not depend on: how often or how long it waits, and which of them it samples
NOT_IN_SNAPSHOT_SETTINGS = {"snapshot_every_steps", "sample_timeout_s", "capacity_schedule", "reuse_controller"}


def shard_spec(cfg: RunConfig) -> ShardSpec:
    """What every shard of the run is built from (create_shards, ReplayShardImpl)."""
    r = cfg.replay
    return ShardSpec(table=table_spec(cfg), window=window_spec(cfg), shards=cfg.cluster.learners, seed=cfg.run.seed,
                     rank_batch_size=cfg.rank_batch_size, consumes_once=cfg.consumes_once,
                     sample_timeout_s=r.sample_timeout_s, snapshot_every_steps=r.snapshot_every_steps,
                     live_root=Path(cfg.run.output_dir) / "replay_live", restarts=shard_restarts(cfg),
                     served_root=Path(cfg.run.output_dir) / "replay_served" if cfg.consumes_once else None,
                     replay_settings=r.model_dump(mode="json", exclude=NOT_IN_SNAPSHOT_SETTINGS))


def table_spec(cfg: RunConfig) -> TableSpec:
    r, limit = cfg.replay, cfg.replay.rate_limit
    # the tolerance is derived once here, not per shard: exploring the limiter's states is not free
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
    setting = cfg.pace_setting
    return None if setting is None else setting.pace()


def shard_restarts(cfg: RunConfig) -> int:
    """How often Ray restarts each shard in place: only with live snapshots to restore from."""
    return cfg.run.max_shard_restarts if cfg.replay.snapshot_every_steps else 0
