"""Tier 0: the client's view of its shards' restarts (ReplayClient.stats on the shards' answers, no Ray): a shard
Ray restored in place after a death is reported once, with what it lost; one the driver killed is not (the
supervisor already said so)."""

from replay_rl.replay.client import ReplayClient
from replay_rl.replay.table_stats import TableStats


def test_a_shard_restored_after_a_death_is_reported_once_and_the_drivers_own_kills_not():
    client = ReplayClient([None, None])
    client.stats([TableStats(inserts=40), TableStats(inserts=40)])
    assert client.take_restored() == []
    # shard 1 died and Ray restored its snapshot of 30 inserts: the 10 after it are lost
    client.stats([TableStats(inserts=50), TableStats(inserts=30, shard_restarts=1, restored_inserts=30)])
    assert client.take_restored() == [(1, 1, 10)] and client.take_restored() == []
    client._kills[0] = 1  # the driver killed shard 0 as hung (ReplayClient.kill, without Ray here)
    client.stats([TableStats(inserts=50, shard_restarts=1, restored_inserts=50), TableStats(inserts=30,
                                                                                           shard_restarts=1)])
    assert client.take_restored() == [] and client.lost == 10
