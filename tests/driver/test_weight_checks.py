"""The driver's side of the weight-path check: each (generator, version) logged once to weight_checks.jsonl, the
step's row carries the worst generator, and a gap above the limit is one line, or the run's stop when asked."""

import json

import pytest

from replay_rl.config import RunConfig
from replay_rl.driver.failures import RunFailed
from replay_rl.driver.weight_checks import WeightChecks
from replay_rl.generation.reports import GeneratorStats
from replay_rl.sync.weight_check import WeightCheck


def stats(generator_id: int, check: WeightCheck | None) -> GeneratorStats:
    return GeneratorStats(generator_id, 0, 0, 0.0, 1.0, check.version if check else 0, 1, 0.0, 1, check)


def test_checks_are_logged_once_and_the_row_holds_the_worst(tmp_path, capsys):
    checks = WeightChecks(RunConfig.load(None, []), tmp_path)
    a, b = WeightCheck(0, 4, 2e-6, 1e-6, 1e-12, 0.01), WeightCheck(1, 3, 5e-6, 2e-6, 3e-12, 0.02)
    assert checks.observe([stats(0, None)]) == {}
    row = checks.observe([stats(0, a), stats(1, b)])
    assert row == {"abs_max": 5e-6, "abs_mean": 2e-6, "kl": 3e-12, "version_min": 3, "seconds": 0.02}
    checks.observe([stats(0, a), stats(1, b)])  # the same checks, reported again: not logged again
    WeightChecks(RunConfig.load(None, []), tmp_path).observe([stats(0, a)])  # nor after a restart
    lines = [json.loads(x) for x in (tmp_path / "weight_checks.jsonl").read_text().splitlines()]
    assert [(x["generator_id"], x["version"]) for x in lines] == [(0, 4), (1, 3)]
    assert capsys.readouterr().err == ""


def test_a_gap_above_the_limit_is_one_line_or_the_runs_stop(tmp_path, capsys):
    stale = WeightCheck(2, 9, 0.04, 0.01, 1e-4, 0.01)
    WeightChecks(RunConfig.load(None, []), tmp_path).observe([stats(2, stale)])
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("weight check: generator 2 at weights version 9")
    strict = WeightChecks(RunConfig.load(None, ["sync.weight_check_fail=true"]), tmp_path / "strict")
    (tmp_path / "strict").mkdir()
    with pytest.raises(RunFailed, match=r"generator 2 at weights version 9 .*\(sync.weight_check_fail\)"):
        strict.observe([stats(2, stale)])
    loose = WeightChecks(RunConfig.load(None, ["sync.weight_check_limit=0.1"]), tmp_path)
    loose.observe([stats(2, WeightCheck(2, 10, 0.04, 0.01, 1e-4, 0.01))])
    assert capsys.readouterr().err == ""
