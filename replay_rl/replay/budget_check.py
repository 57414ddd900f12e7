"""A run's K_inf against the emulated pace's budget, as its metrics rows show it: the check the fault tests
(tests/driver/test_faults.py) and the fault soak (benchmarks/fault_soak.py) make after a fault, a restore or a resume."""

from __future__ import annotations

from replay_rl.replay.pace_check import PaceSetting


def k_inf_past_budget(s: PaceSetting | None, rows: list[dict]) -> list[tuple[int, float, float]]:
    """(step, K_inf, bound) of each train row whose K_inf passed what the pace lets generators start by that step:
    Pace.budget(step) plus the one call that crosses it. More means rollouts made or counted twice (resumed
    generators that made again what a checkpoint's buffer held). Empty when generators run free (no pace: the
    run's RunConfig.pace_setting is None)."""
    if s is None:
        return []
    pace = s.pace()
    bounds = [(r["step"], r["ledger/k_inf"], pace.budget(r["step"]) + s.rollouts_per_call) for r in rows]
    return [(step, k, bound) for step, k, bound in bounds if k >= bound]
