"""Weights travel in buckets: named tensors cast to the generators' dtype and packed, in order, into flat byte
buffers of about sync.bucket_mb. A transfer is then a few large messages instead of one per tensor (the per-tensor
overhead is what peers report as slow sync), and the sender holds at most one packed bucket beyond its weights.

The plan (which tensor goes in which bucket, at which byte offset: sync/plan.py) is computed from names, shapes and
dtypes alone, so the learner can gather ZeRO-3 partitions one bucket at a time and a receiver can allocate before
data arrives. This module packs and unpacks the tensors themselves.
"""

from __future__ import annotations

from typing import Iterator

import torch

from replay_rl.sync.plan import Bucket, TensorSlot


def checked(bucket: Bucket, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The bucket's tensors after checking them against the plan, by name."""
    if len(tensors) != len(bucket.slots):
        raise ValueError(f"bucket of {len(bucket.slots)} tensors got {len(tensors)}")
    for slot, t in zip(bucket.slots, tensors):
        if tuple(t.shape) != slot.shape:
            raise ValueError(f"weight {slot.name!r}: shape {tuple(t.shape)} does not match the plan's {slot.shape}")
    return [t.detach() for t in tensors]


def pack(bucket: Bucket, tensors: list[torch.Tensor]) -> torch.Tensor:
    """One flat uint8 buffer holding the bucket's tensors, cast to the plan's dtype (on the tensors' device): one
    message for a collective."""
    tensors = checked(bucket, tensors)
    flat = torch.empty(bucket.nbytes, dtype=torch.uint8, device=tensors[0].device if tensors else "cpu")
    for slot, t in zip(bucket.slots, tensors):
        view(flat, slot).copy_(t)
    return flat


def as_bytes(bucket: Bucket, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor in the plan's dtype as a flat uint8 view: no copy when it is already in that dtype on the CPU
    (a store that serialises the list copies each once, so packing first would copy twice)."""
    return [t.to("cpu", getattr(torch, s.dtype)).contiguous().reshape(-1).view(torch.uint8)
            for s, t in zip(bucket.slots, checked(bucket, tensors))]


def from_bytes(bucket: Bucket, parts: list[torch.Tensor]) -> Iterator[tuple[str, torch.Tensor]]:
    """as_bytes' inverse: views, no copy."""
    for slot, data in zip(bucket.slots, parts):
        yield slot.name, data.view(getattr(torch, slot.dtype)).view(slot.shape)


def view(flat: torch.Tensor, slot: TensorSlot) -> torch.Tensor:
    """The slot's tensor as a view into the flat buffer (no copy)."""
    return flat[slot.offset:slot.offset + slot.nbytes].view(getattr(torch, slot.dtype)).view(slot.shape)


def unpack(bucket: Bucket, flat: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
    for slot in bucket.slots:
        yield slot.name, view(flat, slot)


def plan_bytes(plan: list[Bucket]) -> int:
    return sum(b.nbytes for b in plan)
