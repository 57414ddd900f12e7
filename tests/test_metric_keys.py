"""One name per quantity: metric keys are namespaced by the role that owns them (batch/, buffer/, ledger/, sync/),
and the sources merged into a metrics line never share a key."""

import pytest

from replay_rl.analysis.accounting import ComputeLedger
from replay_rl.metrics import namespaced
from replay_rl.replay.table import Table
from replay_rl.driver.trainer import merge_disjoint
from tests.replay.helpers import make_batch


def test_merge_refuses_a_key_from_two_sources():
    with pytest.raises(KeyError, match=r"\['age_mean'\] come from two sources"):
        merge_disjoint({"age_mean": 1.0, "loss": 0.5}, {"age_mean": 3.0})
    assert merge_disjoint({"a": 1}, {"b": 2}, {}) == {"a": 1, "b": 2}


def test_namespaces_keep_the_batch_age_apart_from_the_buffer_age():
    table = Table.fifo(16)
    table.insert(make_batch(16))
    table.sample(8, consumer_version=2)
    ledger = ComputeLedger(5, 3, 8, 5.28)
    ledger.extra["generator_restarts"] = 0
    learner = {"age_mean": 2.0, "loss": 0.1, "mismatch/abs_mean": 1e-7}
    record = merge_disjoint(namespaced("batch", learner), namespaced("buffer", table.stats().summary()),
                            namespaced("ledger", ledger.summary()), namespaced("sync", {"publish_s": 0.1}))
    assert {"batch/age_mean", "buffer/age_mean", "buffer/replay_ratio", "ledger/k_inf", "ledger/compute",
            "ledger/generator_restarts", "sync/publish_s", "mismatch/abs_mean"} <= record.keys()
    assert all(k.split("/")[0] in {"batch", "buffer", "ledger", "sync", "mismatch"} for k in record)
    # K_inf and K_train have one name each, the ledger's: the buffer does not repeat its inserts and samples
    assert not any(k.endswith(("/inserts", "/samples")) for k in record)


def test_the_adaptive_rules_keys_keep_their_own_namespaces_beside_the_learners():
    import torch

    from replay_rl.config import RunConfig
    from replay_rl.config.replay_specs import window_spec
    from replay_rl.learner.trust_region import trust_region_weights
    from replay_rl.replay.reuse_window import ReuseWindow

    window = ReuseWindow(window_spec(RunConfig.load(None, ["replay.capacity_schedule={}",
                                                           "replay.reuse_controller={}"])))
    rules = window.observe(3, {"grad_norm": 1.0, "entropy": 0.5})
    _, trust = trust_region_weights(0.1, 0.5, torch.zeros(1, 2), torch.ones(1, 2))
    learner = {"age_mean": 2.0, "reuse_mean": 1.5, "grad_norm": 1.0, **rules, **trust}
    record = merge_disjoint(namespaced("batch", learner), namespaced("buffer", {"age_mean": 1.0}))
    assert {k.split("/")[0] for k in rules} == {"reuse"} and {k.split("/")[0] for k in trust} == {"trust"}
    assert (rules.keys() | trust.keys()) <= record.keys() and "batch/reuse_mean" in record
