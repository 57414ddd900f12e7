"""The reuse controller's decisions on a hand-made signal sequence (a pure policy: no Ray, no config)."""

import math
import statistics

import pytest

from replay_rl.replay.reuse_controller import GROW, HOLD, SHRINK, SpikeController


def test_spikes_shrink_the_scale_to_its_floor_and_calm_stretches_grow_it_back():
    c = SpikeController(window=4, warmup=3, z_high=3.0, z_low=1.0, patience=2, down=0.5, up=2.0, min_scale=0.25)
    seq = [1, 2, 3,          # warm-up: no decision, the reference becomes [1, 2, 3] (mean 2, sd 0.816)
           10, 12, 20,       # spikes (z 9.8, 12.2, 22): 1 → 0.5 → 0.25, then held at min_scale; kept out of the reference
           2, 2,             # calm twice (z 0): patience 2 → grow to 0.5
           2.5,              # calm once (z 0.58)
           3.2,              # in the band (z 1.99): neither spike nor calm, resets the calm count
           2, 2,             # calm twice: grow to 1.0
           2]                # calm, but the scale is at its maximum
    want = [(HOLD, 1.0)] * 3 + [(SHRINK, 0.5), (SHRINK, 0.25), (HOLD, 0.25), (HOLD, 0.25), (GROW, 0.5),
                                (HOLD, 0.5), (HOLD, 0.5), (HOLD, 0.5), (GROW, 1.0), (HOLD, 1.0)]
    decisions = [c.update(v) for v in seq]
    assert [(d.action, d.scale) for d in decisions] == want
    assert decisions[3].z == pytest.approx((10 - 2) / statistics.pstdev([1, 2, 3]))
    assert decisions[5].z > 3.0  # the spike at the floor is still seen in z
    assert decisions[9].z == pytest.approx((3.2 - 2.375) / statistics.pstdev([2, 3, 2, 2.5]))
    assert list(c.calm_values) == [3.2, 2, 2, 2]  # the last `window` calm values; no spike among them


def test_a_missing_signal_holds_and_a_flat_history_does_not_divide_by_zero():
    c = SpikeController(window=5, warmup=2, z_high=3.0, z_low=1.0, patience=1, down=0.5, up=2.0, min_scale=0.1)
    assert c.update(math.nan).action == HOLD and len(c.calm_values) == 0
    c.update(1.0), c.update(1.0)
    d = c.update(1.01)  # sd 0: floored at 1e-3 of the mean, so a 1% rise is a spike (z = 10)
    assert d.action == SHRINK and d.z == pytest.approx(10.0)
