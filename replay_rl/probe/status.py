"""Whether the probe's measurements support a recommendation: ok, premise_failed or not_resolved, with one line why.

- not_resolved: the data cannot tell. ‖∇F‖²'s interval contains 0 (the fresh set does not resolve the gradient,
  so no retention or noise per signal is defined), σ²_eff is not finite at some age or in most bootstrap draws
  (NaN never recommends), s(τ)'s interval contains 0, or α's interval straddles ALPHA_MIN (growth not resolved).
- premise_failed: measured against the theorem's premise. σ²_eff does not grow with age (the monotone fit's α below
  ALPHA_MIN; its interval cannot lie below, as an isotonic fit is never decreasing), so Theorem 4.5 has no finite
  horizon and its "optimum" would be the probe's own --horizon: a pilot over N has to decide (issue 30, item 5).
- ok: σ²_eff grows with age, resolved; the plan's setting stands.
A paste line is printed only with ok; the CLI exits with EXIT_CODES[status].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from replay_rl.probe.effective import Effective
from replay_rl.probe.recommend import ALPHA_MIN

EXIT_CODES = {"ok": 0, "not_resolved": 3, "premise_failed": 4}  # 1: no probe point in time, 2: config error


@dataclass(frozen=True)
class Status:
    status: str   # ok | premise_failed | not_resolved
    reason: str   # one line

    def as_dict(self) -> dict[str, str]:
        return {"status": self.status, "reason": self.reason}


def _span(x) -> str:
    return f"{x.value:.3g} [{x.lo:.3g}, {x.hi:.3g}]"


def status(eff: Effective, fresh_groups: int | None = None) -> Status:
    """The first rule of the module doc that applies."""
    n2 = eff.grad_norm2
    if not (math.isfinite(n2.lo) and n2.lo > 0):
        more = f" (now {fresh_groups} a point)" if fresh_groups else ""
        return Status("not_resolved", f"∇F not resolved: ‖∇F‖² = {_span(n2)} contains 0; raise --fresh-groups{more}"
                                      " or the sketch dimension")
    old = [(int(a), s, r) for a, s, r in zip(eff.ages, eff.sigma2_eff, eff.retention) if a >= 1]
    bad = [a for a, s, _ in old if not (math.isfinite(s.value) and math.isfinite(s.lo) and math.isfinite(s.hi))]
    if bad or eff.draws_finite < 0.9:
        return Status("not_resolved", f"σ²_eff not finite at ages {bad} or in {1 - eff.draws_finite:.0%} of the "
                                      "bootstrap draws (retention near 0): noise per unit of signal is not measured")
    lost = [a for a, _, r in old if r.lo <= 0]
    if lost:
        return Status("not_resolved", f"signal retention s(τ) not resolved from 0 at ages {lost}: stale gradients "
                                      "carry no measurable share of ∇F there")
    g = eff.growth
    if not (math.isfinite(g.value) and math.isfinite(eff.alpha.value)):
        return Status("not_resolved", "the growth of σ²_eff with age is not finite")
    if g.value < ALPHA_MIN:
        return Status("premise_failed", f"σ²_eff does not grow with age (slope {_span(g)} < {ALPHA_MIN}): Theorem 4.5 "
                                        "has no finite horizon here; run the pilot over N")
    if g.lo < ALPHA_MIN:
        return Status("not_resolved", f"growth of σ²_eff with age not resolved: slope {_span(g)} straddles {ALPHA_MIN}")
    return Status("ok", f"σ²_eff grows with age: slope {_span(g)}, α {_span(eff.alpha)}; ‖∇F‖² = {_span(n2)}")
