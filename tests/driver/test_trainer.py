"""The trainer's fast checks: when the next batch is drawn ahead, what Ctrl-C and SIGTERM do, and a bad config's one
line. The runs themselves are in test_trainer_runs.py and test_trainer_signals.py (slow)."""

import signal
import subprocess
import sys

from replay_rl.config import RunConfig
from replay_rl.driver.trainer import draw_ahead


def test_the_next_batch_is_drawn_ahead_except_before_a_checkpoint_or_the_end():
    cfg = RunConfig.load(None, ["run.steps=10", "run.checkpoint_every=4"])
    assert [s for s in range(1, 11) if not draw_ahead(cfg, s)] == [4, 8, 10]
    cfg = RunConfig.load(None, ["run.steps=3", "run.checkpoint_every=null"])
    assert [draw_ahead(cfg, s) for s in (1, 2, 3)] == [True, True, False]
    for off in ("learner.draw_ahead=false", "run.rollout_budget=1000"):  # a budget's stop no step can foresee
        cfg = RunConfig.load(None, ["run.steps=3", off])
        assert not any(draw_ahead(cfg, s) for s in (1, 2, 3))


def test_ctrl_c_and_sigterm_take_the_same_path():
    """Both signals get the handler that bounds cleanup and raises KeyboardInterrupt; the run below is stopped by
    SIGTERM, which without it would print Ray's native stack dump and exit 15."""
    from replay_rl.driver.session import _interrupt, stop_on_signals

    replaced = stop_on_signals()
    try:
        assert set(replaced) == {signal.SIGINT, signal.SIGTERM}
        assert signal.getsignal(signal.SIGINT) is _interrupt and signal.getsignal(signal.SIGTERM) is _interrupt
    finally:
        for sig, handler in replaced.items():
            signal.signal(sig, handler)


def test_cli_rejects_bad_config_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "replay_rl.cli", "train", "-s", "replay.capcity=8"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == \
        "config error: replay.capcity: unknown key; check the spelling with `replay-rl config`"


def test_an_eval_the_death_cut_off_is_made_again_on_resume(tmp_path):
    """The soak's trial 8: the evaluator died in the eval of the last step, the restart resumed that step's
    checkpoint and the run ended with no final eval and no train row to summarise (KeyError 'ledger/compute')."""
    from replay_rl.driver.trainer import eval_lost
    from replay_rl.metrics import MetricsSink, read_metrics, row_at

    cfg = RunConfig.load(None, ["run.steps=24", "run.eval_every=8"])
    sink = MetricsSink(tmp_path)
    for step in (0, 8):
        sink.log(step, "eval", {"eval/pass@1": 0.5})
    for step in range(1, 25):
        sink.log(step, "train", {"ledger/compute": float(step)})
    sink.close()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [s for s in (8, 16, 20, 24) if eval_lost(cfg, rows, s)] == [16, 24]  # due and missing; 20 not due
    assert row_at(rows, "train", 24) == {"ledger/compute": 24.0}
    assert row_at(rows, "eval", 24) == {}
