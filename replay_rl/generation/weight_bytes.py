"""A weight bucket as safetensors bytes, written into one buffer and read back as views of it: the vLLM backend's
load sends each bucket this way (generation/vllm.py), its workers read it (generation/vllm_worker.py). Against
safetensors' own save/load, the sender holds one buffer instead of a copy of every tensor plus the saved bytes,
and the receiver no copy at all: the extra memory of a load stays near one bucket a process."""

from __future__ import annotations

import json
import warnings

import torch

DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
          torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
          torch.bool: "BOOL", torch.uint16: "U16", torch.uint32: "U32", torch.uint64: "U64",
          torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2"}
FROM_NAME = {name: dtype for dtype, name in DTYPES.items()}


def to_safetensors(tensors: list[tuple[str, torch.Tensor]]) -> bytearray:
    """The tensors in safetensors format, each copied once into the returned buffer (shared storage, as tied
    embeddings have, and views are fine). Widest dtype first, as safetensors writes them, so that every tensor
    starts at a multiple of its element size and its view is aligned."""
    tensors = sorted(tensors, key=lambda named: -named[1].element_size())
    if len({name for name, _ in tensors}) < len(tensors):
        raise ValueError(f"a weight bucket names a tensor twice: {[name for name, _ in tensors]}")
    header, offset = {}, 0
    for name, t in tensors:
        size = t.numel() * t.element_size()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the format's alignment of the data that follows
    start = 8 + len(head)
    buf = bytearray(start + offset)
    buf[:start] = len(head).to_bytes(8, "little") + head
    if offset:
        body = torch.frombuffer(buf, dtype=torch.uint8, offset=start)
        for name, t in tensors:
            begin, end = header[name]["data_offsets"]
            body[begin:end].copy_(t.detach().contiguous().reshape(-1).view(torch.uint8))  # from any device
    return buf


def from_safetensors(data) -> dict[str, torch.Tensor]:
    """Tensors viewing `data` (bytes, bytearray or memoryview in safetensors format), read-only when it is: for
    loading into a model, which copies them, not for writing."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(bytes(data[8:8 + size]))
    header.pop("__metadata__", None)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch warns that a bytes buffer is not writable
        for name, spec in header.items():
            begin, end = spec["data_offsets"]
            dtype = FROM_NAME[spec["dtype"]]
            count = (end - begin) // torch.empty((), dtype=dtype).element_size()
            flat = torch.frombuffer(data, dtype=dtype, count=count, offset=8 + size + begin) if count else \
                torch.empty(0, dtype=dtype)
            out[name] = flat.reshape(spec["shape"])
    return out


def digest_input(width: int, dtype):
    """The fixed input the weight digest feeds every linear layer of a given width (vllm_worker.weight_digest); the
    test builds the same one to compute x·Wᵀ from the learner's tensors."""
    return torch.randn(4, width, generator=torch.Generator().manual_seed(width), dtype=torch.float32).to(dtype)
