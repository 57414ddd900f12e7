"""One name per quantity: the sources merged into a metrics line never share a key."""

import pytest

from replay_rl.accounting import ComputeLedger
from replay_rl.replay.table import Table
from replay_rl.trainer import merge_disjoint
from tests.replay.helpers import make_batch


def test_merge_refuses_a_key_from_two_sources():
    with pytest.raises(KeyError, match=r"\['age_mean'\] come from two sources"):
        merge_disjoint({"age_mean": 1.0, "loss": 0.5}, {"age_mean": 3.0})
    assert merge_disjoint({"a": 1}, {"b": 2}, {}) == {"a": 1, "b": 2}


def test_ledger_and_buffer_summaries_are_disjoint():
    table = Table.fifo(16)
    table.insert(make_batch(16))
    table.sample(8, consumer_version=2)
    ledger = ComputeLedger(5, 3, 8, 5.28)
    ledger.extra["generator_restarts"] = 0
    record = merge_disjoint(table.stats().summary(), ledger.summary())
    assert {"buffer_age_mean", "replay_ratio", "k_inf", "compute", "generator_restarts"} <= record.keys()
    assert not {"inserts", "samples"} & record.keys()  # K_inf and K_train have one name each: the ledger's
