"""LearnerEngine on one real DeepSpeed rank (gloo, world size 1) in this process, without Ray."""

import os
import socket
from unittest.mock import patch

import numpy as np
import pytest

from replay_rl.config import RunConfig
from replay_rl.learner.engine import LearnerEngine
from tests.learner.steps import assert_same_step
from tests.replay.helpers import make_batch

pytestmark = [pytest.mark.deepspeed]


@pytest.fixture(scope="module")
def one_rank():
    """The rendezvous variables the engines set are restored afterwards. Their one-rank gloo group stays for the
    session: DeepSpeed caches its groups, so an engine made after a teardown would meet a destroyed one; a later
    engine in this process joins this group instead."""
    with patch.dict(os.environ):
        yield


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("stage", [2, 3])
def test_packed_micro_batched_step_equals_the_padded_full_batch_step(one_rank, init_model, stage):
    """Same start, same batch of different completion lengths: one step on packed micro-batches of at most 24
    real tokens leaves the same weights, loss, gradient norm and entropy as one step on the whole padded batch."""
    batch = make_batch(8, completion_len=lambda i: 2 + (i * 5) % 7)   # 5 to 11 tokens, 61 in all
    metrics, states = {}, {}
    packed = ["learner.pack_sequences=true", "learner.micro_batch_tokens=24"]
    for name, overrides in (("padded", []), ("packed", packed)):
        cfg = RunConfig.load(None, [f"model.path={init_model}", "cluster.learners=1", "cluster.generators=1",
                                    "learner.batch_size=8", "replay.capacity=8", "cluster.emulate=null",
                                    "learner.lr=1e-3", f"learner.zero_stage={stage}", *overrides])
        engine = LearnerEngine(cfg, 0, str(init_model))
        engine.setup("127.0.0.1", free_port())
        metrics[name], states[name] = engine.train_on(batch), engine.full_state()
    assert metrics["padded"]["micro_batches"] == 1 and metrics["packed"]["micro_batches"] == 3
    assert_same_step([metrics["packed"]], [metrics["padded"]], states["packed"], states["padded"], cfg.learner.lr)


def test_warmup_rises_to_the_lr_and_a_resumed_engine_goes_on_from_its_step(one_rank, init_model, tmp_path):
    """learner.warmup_steps=4: steps 1 and 2 take lr/4 and lr/2; an engine loaded from their checkpoint takes
    3·lr/4 and then lr (the schedule goes on from the restored step, it does not start over)."""
    cfg = RunConfig.load(None, [f"model.path={init_model}", "cluster.learners=1", "cluster.generators=1",
                                "learner.batch_size=8", "replay.capacity=8", "cluster.emulate=null",
                                "learner.lr=1e-3", "learner.warmup_steps=4"])
    first = LearnerEngine(cfg, 0, str(init_model))
    first.setup("127.0.0.1", free_port())
    lrs = [first.train_on(make_batch(8))["lr"] for _ in range(2)]
    first.save(str(tmp_path), "step_2")
    resumed = LearnerEngine(cfg, 0, str(init_model))
    resumed.setup("127.0.0.1", free_port())
    resumed.load(str(tmp_path), "step_2")
    lrs += [resumed.train_on(make_batch(8))["lr"] for _ in range(2)]
    assert lrs == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3])
    # the same checkpoint resumed without a warmup takes learner.lr, not the rate its optimizer state was saved with
    constant = LearnerEngine(cfg.model_copy(update={"learner": cfg.learner.model_copy(update={"warmup_steps": 0})}),
                             0, str(init_model))
    constant.setup("127.0.0.1", free_port())
    constant.load(str(tmp_path), "step_2")
    assert constant.train_on(make_batch(8))["lr"] == pytest.approx(1e-3)


@pytest.mark.parametrize("loss", [[], ["learner.loss.aggregation=seq_mean"],
                                  # a micro-batch of only left-out rows (rows 0 and 3, the two shortest)
                                  ["learner.loss.aggregation=global_token_mean", "learner.micro_batch_tokens=12"],
                                  ["learner.loss.type=asymre", "learner.loss.baseline_shift=-0.1"]],
                         ids=["token_mean", "seq_mean", "global_micro", "asymre_shifted"])
def test_drop_zero_advantage_takes_the_step_of_the_smaller_batch(one_rank, init_model, loss):
    """learner.drop_zero_advantage: a batch whose first four rows carry advantage 0 (a group whose rewards were all
    equal) takes the same step as the other four rows alone, under each aggregation, and says it trained on half;
    without it the four rows change the step (GRPO: they dilute the mean; AsymRE: −baseline_shift weighs them)."""
    batch = make_batch(8, completion_len=lambda i: 2 + i % 3)
    batch.advantage[:4] = 0.0
    batch.reward[:4], batch.baseline[:4] = 1.0, 1.0  # all equal in their group: r − V̂ = 0
    runs = {"dropped": (batch, ["learner.drop_zero_advantage=true"]), "alone": (batch.take(np.arange(4, 8)), []),
            "kept": (batch, [])}
    metrics, states = {}, {}
    for name, (rows, drop) in runs.items():
        cfg = RunConfig.load(None, [f"model.path={init_model}", "cluster.learners=1", "cluster.generators=1",
                                    "learner.batch_size=8", "replay.capacity=8", "cluster.emulate=null",
                                    "learner.lr=1e-3", *loss, *drop])
        engine = LearnerEngine(cfg, 0, str(init_model))
        engine.setup("127.0.0.1", free_port())
        metrics[name], states[name] = engine.train_on(rows), engine.full_state()
    assert metrics["dropped"]["trained_share"] == 0.5 and metrics["kept"]["trained_share"] == 1.0
    # entropy is read over every row the batch holds, trained or not: left out of the comparison
    same = lambda m: {**m, "entropy": 0.0}  # noqa: E731
    assert_same_step([same(metrics["dropped"])], [same(metrics["alone"])], states["dropped"], states["alone"],
                     cfg.learner.lr)
    assert metrics["kept"]["grad_norm"] != pytest.approx(metrics["alone"]["grad_norm"], rel=1e-2)
