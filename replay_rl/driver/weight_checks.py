"""The driver's side of the weight-path check (sync/weight_check.py): each generator's newest check, read from the
stats the generators report, goes to weight_checks.jsonl once per (generator, version), into the step's metrics
row (the worst over generators), and through the limit: one line naming the generator and the version, or the
run's stop with it under sync.weight_check_fail."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from replay_rl.config import RunConfig
from replay_rl.driver.failures import RunFailed
from replay_rl.sync.weight_check import check_problem, gap_limit


class WeightChecks:
    def __init__(self, cfg: RunConfig, out: Path) -> None:
        self.statistic, self.limit = gap_limit(cfg.sync.weight_check_limit, cfg.model.dtype)
        self.fail, self.path = cfg.sync.weight_check_fail, out / "weight_checks.jsonl"
        # a restart or a resume appends: the checks logged before it are not logged again
        self.seen = {(c["generator_id"], c["version"]) for c in map(json.loads, self.path.read_text().splitlines())} \
            if self.path.is_file() else set()

    def observe(self, generator_stats: list) -> dict[str, float]:
        """The weight_check/ metrics of this step (none before the first check); new checks logged and judged."""
        checks = [g.weight_check for g in generator_stats if g.weight_check is not None]
        for check in checks:
            if (check.generator_id, check.version) in self.seen:
                continue
            self.seen.add((check.generator_id, check.version))
            with self.path.open("a") as f:
                f.write(json.dumps(asdict(check)) + "\n")
            if line := check_problem(check, self.statistic, self.limit):
                if self.fail:
                    raise RunFailed(f"{line} (sync.weight_check_fail)")
                print(line, file=sys.stderr, flush=True)
        if not checks:
            return {}
        return {"abs_max": max(c.abs_max for c in checks), "abs_mean": max(c.abs_mean for c in checks),
                "kl": max(c.kl for c in checks), "version_min": min(c.version for c in checks),
                "seconds": max(c.seconds for c in checks)}
