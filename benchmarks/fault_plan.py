"""Soak v2's plan (issue 44, item 2): stratified, not drawn. Every role × fault cell runs `per_cell` times, so no
cell is left to chance (a 30-trial random plan missed learner-rank kills 28% of the time), and the faults a random
draw of signals never made run too: the driver killed and the same command rerun, a full disk, a corrupt newest
checkpoint, and a second fault while the run recovers from a first. Only a trial's step, replay type and which of a
role's processes are drawn, from one seed: the same seed plans the same soak."""

from __future__ import annotations

import random

from fault_trials import ROLES, Trial

CELL_FAULTS = ("kill", "stop", "kill in checkpoint", "stop in checkpoint", "stop in publish")
# (role, fault) of the trials fault_special.py runs
SPECIAL = (("driver", "kill, then the same command"), ("disk", "full"), ("checkpoint", "corrupt, then a rank killed"),
           ("learner rank", "kill, then a generator killed in the recovery"))


def cells() -> list[tuple[str, str]]:
    return [(role, fault) for role in ROLES for fault in CELL_FAULTS] + list(SPECIAL)


def first_step(fault: str, checkpoint_every: int) -> int:
    """The earliest step a fault may land at: a corrupt checkpoint needs one before it to fall back to."""
    return 2 * checkpoint_every + 1 if fault.startswith("corrupt") else 2


def plan_v2(seed: int, per_cell: int, steps: int, checkpoint_every: int) -> list[Trial]:
    rng = random.Random(seed)
    chosen = [(role, fault) for role, fault in cells() for _ in range(per_cell)]
    rng.shuffle(chosen)  # a soak cut short still spreads over the cells
    return [Trial(i, role, fault, rng.randint(first_step(fault, checkpoint_every), steps - 6),
                  rng.choice(("fifo", "fifo", "lifo_once")), rng.randrange(2))
            for i, (role, fault) in enumerate(chosen)]
