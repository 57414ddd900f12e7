"""Bucket planning and packing: what is packed is what is unpacked, in the plan's dtype, under the size budget."""

import pytest
import torch

from replay_rl.sync.buckets import pack, plan_bytes, unpack
from replay_rl.sync.plan import plan_buckets


def specs(dtype="float32"):
    return [("emb", (10, 8), dtype), ("w1", (8, 8), dtype), ("b1", (8,), dtype), ("big", (40, 8), dtype),
            ("steps", (3,), "int64")]


def test_buckets_close_before_overflowing_and_a_large_tensor_gets_its_own():
    plan = plan_buckets(specs(), bucket_bytes=500)
    assert [b.names for b in plan] == [["emb"], ["w1", "b1"], ["big"], ["steps"]]
    assert all(b.nbytes <= 500 for b in plan if len(b.slots) > 1)
    assert plan[2].nbytes == 40 * 8 * 4                        # alone, above the budget
    assert all(s.offset % 16 == 0 for b in plan for s in b.slots)


def test_one_large_bucket_holds_everything_in_order():
    plan = plan_buckets(specs(), bucket_bytes=2**20)
    assert len(plan) == 1 and plan[0].names == ["emb", "w1", "b1", "big", "steps"]
    assert plan_bytes(plan) >= (80 + 64 + 8 + 320) * 4 + 3 * 8


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_unpack_returns_what_was_packed_cast_to_the_plan_dtype(dtype):
    g = torch.Generator().manual_seed(0)
    state = {n: (torch.arange(3) if d == "int64" else torch.randn(*s, generator=g)) for n, s, d in specs()}
    for bucket in plan_buckets(specs(dtype), bucket_bytes=600):
        got = dict(unpack(bucket, pack(bucket, [state[n] for n in bucket.names])))
        for slot in bucket.slots:
            assert got[slot.name].dtype == getattr(torch, slot.dtype)
            assert torch.equal(got[slot.name], state[slot.name].to(getattr(torch, slot.dtype)))


def test_a_tensor_of_the_wrong_shape_is_refused_by_name():
    bucket = plan_buckets(specs(), bucket_bytes=2**20)[0]
    tensors = [torch.zeros(s) for _, s, _ in specs()]
    tensors[1] = torch.zeros(8, 9)
    with pytest.raises(ValueError, match="'w1'"):
        pack(bucket, tensors)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_byte_views_round_trip_and_cost_no_copy_in_the_plan_dtype(dtype):
    from replay_rl.sync.buckets import as_bytes, from_bytes

    state = {n: (torch.arange(3) if d == "int64" else torch.randn(*s)) for n, s, d in specs()}
    (bucket,) = plan_buckets(specs(dtype), bucket_bytes=2**20)
    parts = as_bytes(bucket, [state[n] for n in bucket.names])
    got = dict(from_bytes(bucket, parts))
    assert all(torch.equal(got[n], state[n].to(got[n].dtype)) for n in state)
    assert (parts[0].data_ptr() == state["emb"].data_ptr()) == (dtype == "float32")  # fp32 → fp32: a view
