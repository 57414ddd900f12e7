"""The status never lets NaN or an unresolved measurement recommend, and the terminal shows what it rests on."""

import dataclasses
import json

import numpy as np

from replay_rl.probe.effective import effective
from replay_rl.probe.estimators import Interval
from replay_rl.probe.report import _finite, _n_interval, effective_json, effective_lines
from replay_rl.probe.status import EXIT_CODES, status
from tests.probe.test_effective import B, real_regime


def _eff():
    return effective(real_regime(alpha=0.3, shrink=0.05, seed=5).sk, B, draws=60)


def test_nan_and_lost_signal_are_not_resolved_and_exit_codes_differ():
    eff = _eff()
    assert status(eff).status == "ok"
    nan = Interval(float("nan"), float("nan"), float("nan"))
    assert status(dataclasses.replace(eff, sigma2_eff=[nan] * len(eff.ages))).status == "not_resolved"
    assert status(dataclasses.replace(eff, growth=nan)).status == "not_resolved"
    lost = [Interval(0.1, -0.05, 0.2)] * len(eff.ages)
    st = status(dataclasses.replace(eff, retention=lost))
    assert st.status == "not_resolved" and "s(τ)" in st.reason and "\n" not in st.reason
    assert len(set(EXIT_CODES.values())) == 3 and EXIT_CODES["ok"] == 0


def test_terminal_lines_show_status_sigma2_eff_retention_and_batch_variance():
    eff = _eff()
    result = json.loads(json.dumps(_finite({"effective": effective_json(eff, {}),
                                            "status": status(eff).as_dict()})))
    lines = effective_lines(result)
    assert lines[0].startswith("status: ok: ")
    assert sum(line.lstrip().split(" ")[0].isdigit() for line in lines) == len(eff.ages)
    assert sum(line.startswith("𝒱(N) N=") for line in lines) == len(eff.pool_ages) > 0
    for a in result["effective"]["ages"]:  # no interval that excludes its own point
        x = a["sigma2_eff"]
        assert x["lo"] <= x["value"] <= x["hi"]
    assert np.all(np.diff([a["sigma2_eff_bar"] for a in result["effective"]["ages"][1:]]) >= -1e-12)


def test_an_interval_on_n_that_misses_n_is_widened_and_starred():
    assert _n_interval(486, None, None) == "[486, ∞]*"   # was printed "N = 486 [∞, ∞]"
    assert _n_interval(160, 128, 200) == "[128, 200]"
    assert _n_interval(100, 128, 200) == "[100, 200]*"
