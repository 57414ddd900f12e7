"""Tier 0: the local-diversity samplers (least_recent, fresh_anchored) on real Tables, and what a snapshot keeps."""

import numpy as np

from replay_rl.replay.snapshot import read_snapshot, write_snapshot
from replay_rl.replay.table import Table
from tests.replay.helpers import make_batch


def ids(batch):
    return sorted(int(r) for r in batch.reward)


def test_least_recent_uses_every_item_before_any_repeat():
    t = Table.fifo(10, sampler="least_recent", seed=0)
    t.insert(make_batch(10))
    first = [ids(t.sample(3, v)[0]) for v in range(3)]
    assert len(set(sum(first, []))) == 9                    # three batches, nine distinct items
    fourth = ids(t.sample(3, 3)[0])
    unused = set(range(10)) - set(sum(first, []))
    assert unused < set(fourth) and set(fourth) - unused < set(first[0])  # the unused one, then the oldest batch's


def test_least_recent_returns_the_least_recently_returned_items():
    # every step, each returned item was last returned no later than any item left out: cycles through the buffer
    firsts = set()
    for seed in range(5):
        t = Table.fifo(10, sampler="least_recent", seed=seed)
        t.insert(make_batch(10))
        batches = [set(ids(t.sample(3, v)[0])) for v in range(30)]
        last = dict.fromkeys(range(10), -1)
        for v, picked in enumerate(batches):
            assert max(last[i] for i in picked) <= min(last[i] for i in set(last) - picked)
            last |= dict.fromkeys(picked, v)
        firsts.add(frozenset(batches[0]))
        t.insert(make_batch(2, start=10))                    # never returned: they go first
        assert {10, 11} < set(ids(t.sample(3, 30)[0]))
    assert len(firsts) > 1  # ties (here: all never returned) are broken at random, not by insertion order


def test_fresh_anchored_takes_every_new_item_and_fills_from_older_ones():
    t = Table.fifo(64, sampler="fresh_anchored", seed=1)
    t.insert(make_batch(12))
    assert set(ids(t.sample(4, 0)[0])) < set(range(12))    # no previous sample: everything counts as new
    rng, start = np.random.default_rng(0), 12
    for v in range(1, 20):
        k = int(rng.integers(0, 4))                          # fewer new items than the batch of 4
        t.insert(make_batch(k, start=start))
        batch = set(ids(t.sample(4, v)[0]))
        new = set(range(start, start + k))
        assert new <= batch and all(i < start for i in batch - new)
        start += k


def test_fresh_anchored_with_more_new_items_than_fit_takes_a_subset_of_them_only():
    t = Table.fifo(64, sampler="fresh_anchored", seed=2)
    t.insert(make_batch(10))
    t.sample(4, 0)
    t.insert(make_batch(20, start=10))
    assert set(ids(t.sample(4, 1)[0])) < set(range(10, 30))
    t.insert(make_batch(1, start=30))                        # the 16 new items not taken are old now
    assert ids(t.sample(1, 2)[0]) == [30]


def restored(t, sampler, tmp_path):
    """A new table (another seed) restored from t's snapshot through the disk format, JSON counters included."""
    write_snapshot(tmp_path / "s", *t.state(), {})
    u = Table.fifo(t.capacity, sampler=sampler, seed=99)
    u.load_state(*read_snapshot(tmp_path / "s", {}))
    return u


def test_a_restore_keeps_the_items_fresh_anchored_owes(tmp_path):
    t = Table.fifo(16, sampler="fresh_anchored", seed=3)
    t.insert(make_batch(20))                                 # 4 evicted: seq and slots no longer line up
    t.sample(4, 0)
    t.insert(make_batch(3, start=20))
    u = restored(t, "fresh_anchored", tmp_path)
    batch = ids(u.sample(4, 1)[0])
    assert {20, 21, 22} < set(batch) and batch == ids(t.sample(4, 1)[0])
    assert ids(u.sample(4, 2)[0]) == ids(t.sample(4, 2)[0])  # none new: the boundary moved on in both


def test_a_restore_keeps_least_recent_cycling(tmp_path):
    t = Table.fifo(10, sampler="least_recent", seed=4)
    t.insert(make_batch(10))
    used = ids(t.sample(3, 0)[0]) + ids(t.sample(3, 1)[0])
    u = restored(t, "least_recent", tmp_path)
    assert not set(ids(u.sample(4, 2)[0])) & set(used)
