"""The compute ledger owns its updates and its persistence: observe() per step, state() / load_state() across a
resume, which refuses a checkpoint taken on another cluster shape."""

import json

import pytest

from replay_rl.analysis.accounting import ComputeLedger


def step(ledger, **kw):
    base = dict(inserts=0, lost=0, consumed=32, tokens=0, generator_busy_s=0.0, learner_busy_s=0.0, wall_s=1.0)
    ledger.observe(**(base | kw))


def test_observe_accumulates_what_is_per_step_and_keeps_totals_monotone():
    ledger = ComputeLedger(5, 3, 32, 5.28, generator_actors=1, learner_ranks=1)
    step(ledger, inserts=100, tokens=500, generator_busy_s=4.0, learner_busy_s=1.0, publish_s=0.5, publish_bytes=10,
         generator_restarts=0)
    # a replaced generator restarts its own counters: the ledger keeps the larger totals; a restored shard's lost
    # rollouts still count in K_inf
    step(ledger, inserts=90, lost=30, tokens=100, generator_busy_s=1.0, learner_busy_s=1.5, wall_s=2.0,
         publish_s=0.25, publish_bytes=10, generator_restarts=1)
    assert (ledger.k_inf, ledger.k_train, ledger.tokens, ledger.generator_busy_s) == (120, 64, 500, 4.0)
    assert (ledger.sync_s, ledger.sync_bytes, ledger.extra["generator_restarts"]) == (0.75, 20, 1)
    assert ledger.compute == pytest.approx((64 + 5.28 * 120) / 32)
    assert ledger.learner_busy_frac == pytest.approx(1.5 / 2.0)


def test_state_round_trips_through_json_and_refuses_another_cluster():
    ledger = ComputeLedger(5, 3, 32, 5.28)
    step(ledger, inserts=64, tokens=7, generator_restarts=2)
    saved = json.loads(json.dumps(ledger.state()))
    again = ComputeLedger(5, 3, 32, 5.28)
    again.load_state(saved)
    assert again == ledger and again.summary() == ledger.summary()
    with pytest.raises(ValueError, match=r"run.resume_from: the checkpoint's ledger has \(W, T, B, μ\) = "
                                         r"\(5, 3, 32, 5.28\), this run \(4, 4, 32, 5.28\)"):
        ComputeLedger(4, 4, 32, 5.28).load_state(saved)


def test_rows_left_out_of_the_loss_are_not_charged_but_count_in_the_estimated_mu():
    """learner.drop_zero_advantage: K_train (compute) counts the rows trained, K_forward the rows the learners ran;
    without cluster.emulate μ is estimated from K_forward, the learners' real throughput. A checkpoint from before
    K_forward resumes with K_forward = K_train."""
    ledger = ComputeLedger(2, 2, 32)
    step(ledger, inserts=64, consumed=24, forward=32)
    assert (ledger.k_train, ledger.k_forward) == (24, 32)
    assert ledger.mu == pytest.approx((32 / 2) / (64 / 2))
    assert ledger.compute == pytest.approx((24 + ledger.mu * 64) / 32)
    old = {k: v for k, v in ledger.state().items() if k != "k_forward"}
    again = ComputeLedger(2, 2, 32)
    again.load_state(old)
    assert again.k_forward == again.k_train == 24
