"""Weight sync protocol: the learner publishes full weights with a version; generators fetch the latest.

The generator never knows how the tensors travelled; the learner never knows who loads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Protocol

import torch


@dataclass(frozen=True)
class WeightHandle:
    version: int        # learner version the weights were taken at (= optimizer steps done)
    nbytes: int
    payload: Any        # transport-specific: a list holding one ObjectRef for the object store
    publish_s: float    # seconds the learner spent publishing (gather excluded)


class WeightPublisher(Protocol):
    def publish(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> WeightHandle: ...


class WeightSubscriber(Protocol):
    def latest(self) -> WeightHandle | None: ...
    def fetch(self, handle: WeightHandle) -> Iterator[tuple[str, torch.Tensor]]: ...


def load_if_newer(subscriber: WeightSubscriber, backend) -> WeightHandle | None:
    """Load the latest published weights into a generation backend when they are newer than what it holds.
    Returns the handle it loaded, or None when there was nothing new."""
    handle = subscriber.latest()
    if handle is None or handle.version <= backend.version:
        return None
    backend.load_weights(subscriber.fetch(handle), handle.version)
    return handle
