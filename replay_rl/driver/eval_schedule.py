"""EvalSchedule: the eval in flight. Each eval publishes the current weights to the evaluator's own board and
scores them there while learning goes on; one at a time (the board holds one version), each bounded by
run.eval_timeout_s, and an eval whose weights were freed before it read them is skipped in one line."""

from __future__ import annotations

import sys

import ray

from replay_rl.driver.failures import RunFailed
from replay_rl.driver.handles import RoleHandles
from replay_rl.driver.supervision import Phase, publish
from replay_rl.sync.base import WeightsGone


class EvalSchedule:
    def __init__(self, handles: RoleHandles) -> None:
        self.handles = handles
        self.pending: tuple | None = None  # (step, ledger row at that step, the evaluator's result ref)

    def start(self, step: int, ledger_row: dict) -> list[tuple[int, dict]]:
        """Score step's weights beside training. The previous eval is finished first; returns the rows finished by
        then."""
        rows = self.finished(wait=True)
        publish(self.handles, step, for_eval=True)
        self.pending = (step, ledger_row, self.handles.evaluator.evaluate_latest.remote())
        return rows

    def finished(self, wait: bool = False) -> list[tuple[int, dict]]:
        """The (step, eval row) of the eval in flight once it is done; [] while it runs (unless wait: then within
        run.eval_timeout_s)."""
        if self.pending is None or not (wait or ray.wait([self.pending[2]], timeout=0)[0]):
            return []
        step, ledger_row, ref = self.pending
        self.pending = None
        phase = Phase(self.handles, f"eval of step {step}", self.handles.cfg.run.eval_timeout_s, "run.eval_timeout_s")
        try:
            [scores] = phase.wait([ref], ["evaluator"])
        except RunFailed as e:
            if not isinstance(gone := getattr(e.__cause__, "cause", None), WeightsGone):
                raise
            # the eval is of that step's weights and no other: skipped, where it used to end the run
            print(f"eval of step {step} skipped: {str(gone).strip()}; training goes on and the next eval is made",
                  file=sys.stderr, flush=True)
            return []
        return [(step, {f"eval/{k}": v for k, v in scores.items()} | ledger_row)]
