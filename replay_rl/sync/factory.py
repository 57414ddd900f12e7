"""make_weight_sync: the one place a role's weight transport is chosen, from config, at construction."""

from __future__ import annotations

from typing import Literal

from replay_rl.config import SyncConfig
from replay_rl.sync.base import WeightPublisher, WeightSubscriber
from replay_rl.sync.collective import CollectivePublisher, CollectiveSubscriber
from replay_rl.sync.object_store import ObjectStorePublisher, ObjectStoreSubscriber


def make_weight_sync(cfg: SyncConfig, role: Literal["publisher", "subscriber"], board
                     ) -> WeightPublisher | WeightSubscriber:
    """The learner's rank 0 is the publisher, generators subscribe. sync.type=nccl needs connect() on every member
    once the group's address is known (launch.build does it)."""
    if cfg.type == "nccl":
        kind = CollectivePublisher if role == "publisher" else CollectiveSubscriber
        return kind(board, cfg.backend, cfg.timeout_s)
    return ObjectStorePublisher(board) if role == "publisher" else ObjectStoreSubscriber(board)
