"""What travels when weights are published: the bucket plan (which tensor goes in which bucket, at which byte
offset, from names, shapes and dtypes alone) and the handle of a published version. No torch import at module level:
the weight boards only store handles, and a board that imported torch to unpickle one would pay seconds to start."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable


def itemsize(dtype: str) -> int:
    """Bytes per element of a torch dtype named as in "bfloat16"."""
    import torch

    return getattr(torch, dtype).itemsize


@dataclass(frozen=True)
class TensorSlot:
    name: str
    shape: tuple[int, ...]
    dtype: str      # the dtype it travels and loads in, e.g. "bfloat16"
    offset: int     # byte offset inside its bucket

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * itemsize(self.dtype)


@dataclass(frozen=True)
class Bucket:
    slots: tuple[TensorSlot, ...]
    nbytes: int

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.slots]


def plan_buckets(specs: Iterable[tuple[str, tuple[int, ...], str]], bucket_bytes: int) -> list[Bucket]:
    """specs: (name, shape, dtype to travel in). Greedy, in order: a bucket closes when the next tensor would
    overflow it; a tensor larger than a bucket gets one to itself. Offsets are aligned to 16 bytes so every slot
    is a valid view for any dtype."""
    buckets, slots, used = [], [], 0
    for name, shape, dtype in specs:
        size = math.prod(shape) * itemsize(dtype)
        if slots and used + size > bucket_bytes:
            buckets.append(Bucket(tuple(slots), used))
            slots, used = [], 0
        slots.append(TensorSlot(name, tuple(shape), dtype, used))
        used += -(-size // 16) * 16
    if slots:
        buckets.append(Bucket(tuple(slots), used))
    return buckets


@dataclass(frozen=True)
class WeightHandle:
    version: int        # learner version the weights were taken at (= optimizer steps done)
    nbytes: int         # bytes sent, in the generators' dtype
    plan: list[Bucket]  # which tensor travels in which bucket
    payload: Any        # transport-specific: one ObjectRef per bucket for the object store, nothing for a broadcast
    gather_s: float = 0.0  # seconds the sender waited for the next bucket's tensors (ZeRO gather, device copy)
    send_s: float = 0.0    # seconds spent packing and handing buckets to the transport
    probe: Any = None      # the learner's log-probs of the probe set at this version (sync/weight_check.py)
