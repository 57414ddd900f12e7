"""Tier 0: a weight bucket written as safetensors bytes into one buffer, and read back as views of it."""

import pytest
import torch
from safetensors.torch import load, save

from replay_rl.generation.weight_bytes import from_safetensors, to_safetensors


def bucket():
    torch.manual_seed(0)
    embed = torch.randn(7, 3)
    return [("embed.weight", embed), ("lm_head.weight", embed),  # tied: one storage, saved twice
            ("q.weight", torch.randn(4, 6).t()),  # not contiguous
            ("norm.weight", torch.randn(5).to(torch.bfloat16)), ("step", torch.tensor(3)),
            ("mask", torch.tensor([True, False])), ("empty", torch.zeros(0, 4))]


def test_the_buffer_is_safetensors_and_reads_back_as_views_of_itself():
    tensors = bucket()
    buf = to_safetensors(tensors)
    theirs, ours = load(bytes(buf)), from_safetensors(buf)
    for name, t in tensors:
        for got in (theirs[name], ours[name]):
            assert got.dtype == t.dtype and got.shape == t.shape and torch.equal(got, t), name
    first = ours["embed.weight"].data_ptr()
    assert ours["lm_head.weight"].data_ptr() - first == 7 * 3 * 4  # no copy: views into the one buffer
    # widest first: the bf16 and bool tensors after every 4- and 8-byte one, so each view is aligned
    assert all(t.data_ptr() % t.element_size() == 0 for t in ours.values())
    q = tensors[2][1].contiguous()
    assert from_safetensors(save({"q.weight": q, "step": tensors[4][1]}))["q.weight"].equal(q)  # safetensors' own


def test_an_unknown_dtype_or_a_name_given_twice_is_named():
    with pytest.raises(KeyError, match="complex64"):
        to_safetensors([("z", torch.zeros(2, dtype=torch.complex64))])
    with pytest.raises(ValueError, match="names a tensor twice"):
        to_safetensors([("w", torch.zeros(2)), ("w", torch.ones(2))])
