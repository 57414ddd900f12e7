"""ShardSpec: everything a replay shard is built from, as frozen numbers and choices. replay/ is a lower layer than
config/ and never reads a RunConfig: config/replay_specs.py translates one (after config/ validated it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay_rl.replay.reuse_window import WindowSpec
from replay_rl.replay.table import TableSpec


@dataclass(frozen=True)
class ShardSpec:
    """The same for every shard of a run; shard i adds its own id (keys, seed, snapshot folder)."""
    table: TableSpec             # each shard's Table; its capacity is one shard's share
    window: WindowSpec | None    # the adaptive reuse rules' sampling window; None: the rules are off
    shards: int                  # T = cluster.learners, one shard per learner rank
    seed: int                    # run.seed; shard i seeds its table with seed·1000 + i
    rank_batch_size: int         # what a learner rank samples from its shard each step
    consumes_once: bool          # lifo_once: every rollout is used once (RunConfig.consumes_once)
    sample_timeout_s: float      # replay.sample_timeout_s: the longest a sample or insert waits
    snapshot_every_steps: int | None  # live snapshots' cadence; None: none
    live_root: Path              # RUN/replay_live: shard i keeps its live snapshot in live_root/shard_i
    served_root: Path | None     # RUN/replay_served: a consume-once queue's audit of the keys served; None: none
    restarts: int                # how often Ray restarts a shard in place (0 without live snapshots)
    replay_settings: dict[str, Any]  # the replay config a snapshot records, which a restore must match
