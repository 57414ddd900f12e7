"""Weight sync cost: our bucketed publish + load against the raw transport of the same bytes, on real Ray actors.

    python benchmarks/weight_sync.py                              # tiny, SmolLM2-135M and Qwen2.5-0.5B shapes
    python benchmarks/weight_sync.py --sizes qwen2p5_1p5b        # needs more than a 24 GiB box in float32
    python benchmarks/weight_sync.py --sizes tiny,smollm2_135m --repeats 3

For each model shape (random weights from its HF config's parameter shapes; no download) and transport:
- object_store: ours = ObjectStorePublisher.publish (cast + pack + ray.put per bucket) then, in another actor,
  ObjectStoreSubscriber.fetch + an in-place copy into the receiver's tensors (the transformers backend's load).
  raw = one ray.put of a flat array of the same bytes, then ray.get + one copy into a preallocated buffer.
- gloo: ours = CollectivePublisher / CollectiveSubscriber over a 2-member group + the same in-place load.
  raw = one broadcast of a flat buffer of the same bytes.
Times are the median over --repeats of the wall time from publish start to load end (a warm-up round first).
The sender's peak extra memory is its VmHWM during the publish (reset through /proc/self/clear_refs) minus its
RSS before; the object store's copy lives in shared memory outside it (one version: the board releases the old
one first). Sent dtype: --dtype, float32 by default (what CPU runs send). bfloat16 adds a cast of the fp32
master weights, which a GPU does on device and this CPU does on one thread. Prints JSON, writes results.json and
a PNG.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import statistics
import sys
import time
import warnings
from pathlib import Path

import ray
import torch

from replay_rl.config import NcclSyncConfig, ObjectStoreSyncConfig
from replay_rl.sync.plan import plan_buckets
from replay_rl.sync.factory import make_weight_sync
from replay_rl.sync.board import WeightBoard

SHAPES = {  # HF configs of the model shapes; parameters only, so random values stand in for real weights
    "tiny": ("qwen2", dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, vocab_size=100, tie_word_embeddings=False)),
    "smollm2_135m": ("llama", dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9,
                                   num_key_value_heads=3, intermediate_size=1536, vocab_size=49152,
                                   tie_word_embeddings=True)),
    "qwen2p5_0p5b": ("qwen2", dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                                   num_key_value_heads=2, intermediate_size=4864, vocab_size=151936,
                                   tie_word_embeddings=True)),
    "qwen2p5_1p5b": ("qwen2", dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12,
                                   num_key_value_heads=2, intermediate_size=8960, vocab_size=151936,
                                   tie_word_embeddings=True)),
}
# 1.5B is left out: in float32 its sender, receiver and object-store copies (~6 GiB each) did not fit a 24 GiB box,
# and the run failed after 13 minutes (a side killed for memory); `fits` now skips such a shape up front
DEFAULT_SIZES = ["tiny", "smollm2_135m", "qwen2p5_0p5b"]
COPIES = 5  # the model's bytes held at once: sender, object store, receiver, and the raw path's flat send and receive


def fits(size: str, dtype: str) -> str | None:
    """Why this shape cannot be measured here (its copies exceed 80% of the free memory), or None."""
    import psutil

    gib = sum(math.prod(s) for _, s in param_shapes(size)) * torch.finfo(getattr(torch, dtype)).bits / 8 / 2**30
    free = psutil.virtual_memory().available / 2**30
    return (f"skipped {size}: {COPIES} copies of its {gib:.1f} GiB of {dtype} weights need {COPIES * gib:.0f} GiB, "
            f"{free:.0f} GiB free") if COPIES * gib > 0.8 * free else None


def param_shapes(size: str) -> list[tuple[str, tuple[int, ...]]]:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    family, kwargs = SHAPES[size]
    config_cls, model_cls = (Qwen2Config, Qwen2ForCausalLM) if family == "qwen2" else (LlamaConfig, LlamaForCausalLM)
    with torch.device("meta"):
        model = model_cls(config_cls(**kwargs))
    return [(n, tuple(p.shape)) for n, p in model.named_parameters()]


def rss_kib(field: str, pid: int | str = "self") -> int:
    """A memory field of /proc/PID/status (VmRSS, VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def sync_cfg(transport: str):
    return ObjectStoreSyncConfig() if transport == "object_store" else NcclSyncConfig(backend="gloo", timeout_s=600)


@ray.remote(num_cpus=0)
class Side:
    """Rank 0 sends fp32 source weights, rank 1 receives into tensors of the sent dtype. Each side's tensors are
    views into one flat buffer, which the raw transport sends or receives as is (so it costs no extra memory)."""

    def __init__(self, rank: int, size: str, dtype: str, transport: str, board, host: str, port: int,
                 bucket_mb: float) -> None:
        torch.set_num_threads(1)
        shapes = param_shapes(size)
        self.plan = plan_buckets([(n, s, dtype) for n, s in shapes], int(bucket_mb * 2**20))
        self.nbytes = sum(b.nbytes for b in self.plan)
        kind = torch.float32 if rank == 0 else getattr(torch, dtype)
        flat = torch.empty(sum(math.prod(s) for _, s in shapes), dtype=kind)
        if rank == 0:
            flat.normal_(generator=torch.Generator().manual_seed(0))
        self.state, at = {}, 0
        for name, shape in shapes:
            self.state[name], at = flat[at:at + math.prod(shape)].view(shape), at + math.prod(shape)
        self.raw = flat.view(torch.uint8)[:self.nbytes]  # the sender's fp32 buffer is larger than the bytes sent
        self.sync = make_weight_sync(sync_cfg(transport), "publisher" if rank == 0 else "subscriber", board)
        if transport == "gloo":
            self.sync.connect(host, port, rank, 2)

    def publish(self, version: int) -> dict:
        before = rss_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        t0 = time.perf_counter()
        handle = self.sync.publish(self.plan, ([self.state[n] for n in b.names] for b in self.plan), version)
        return {"seconds": time.perf_counter() - t0, "extra_gib": (rss_kib("VmHWM") - before) / 2**20,
                "gather_s": handle.gather_s, "send_s": handle.send_s}

    def load(self, version: int) -> float:
        while (handle := self.sync.latest()) is None or handle.version < version:
            time.sleep(0.001)
        t0 = time.perf_counter()
        for name, tensor in self.sync.fetch(handle):
            self.state[name].copy_(tensor)
        return time.perf_counter() - t0

    def raw_put(self):
        return [ray.put(self.raw.numpy())]

    def raw_get(self, refs: list) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the mapped array is read-only; it is only read
            self.raw.copy_(torch.from_numpy(ray.get(refs[0])))

    def raw_broadcast(self) -> None:
        self.sync.group.broadcast(self.raw)


def get(refs, timeout_s: float = 600):
    """ray.get with a bound: a side killed for memory leaves its peer waiting in a broadcast otherwise."""
    try:
        return ray.get(refs, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        sys.exit(f"weight_sync: no answer in {timeout_s:g}s (a side was killed for memory? see `dmesg`); "
                 "try a smaller --sizes or --dtype bfloat16")


def measure(size: str, transport: str, dtype: str, bucket_mb: float, repeats: int) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    board = WeightBoard.remote()
    sender, receiver = [Side.remote(r, size, dtype, transport, board, "127.0.0.1", port, bucket_mb) for r in (0, 1)]
    nbytes, plan = get(sender.__ray_call__.remote(lambda self: (self.nbytes, len(self.plan))))
    get(receiver.__ray_call__.remote(lambda self: None))  # both built (imports, weights) before any timing
    ours, raw, pubs, loads = [], [], [], []
    for _ in range(repeats + 1):  # raw first, so that no published version sits in the object store beside it
        t0 = time.perf_counter()
        if transport == "object_store":
            refs = get(sender.raw_put.remote())
            get(receiver.raw_get.remote(refs))
            del refs
        else:
            get([sender.raw_broadcast.remote(), receiver.raw_broadcast.remote()])
        raw.append(time.perf_counter() - t0)
    for v in range(repeats + 1):
        t0 = time.perf_counter()
        pub, load = sender.publish.remote(v), receiver.load.remote(v)
        pubs.append(get(pub))
        loads.append(get(load))
        ours.append(time.perf_counter() - t0)
    ours, raw, pubs, loads = ours[1:], raw[1:], pubs[1:], loads[1:]  # round 0 warms up (first-call costs)
    for a in (sender, receiver, board):
        ray.kill(a)
    ours_s, raw_s = statistics.median(ours), statistics.median(raw)
    return {"size": size, "transport": transport, "dtype": dtype, "bucket_mb": bucket_mb, "buckets": plan,
            "gib": nbytes / 2**30, "ours_s": ours_s, "raw_s": raw_s, "ratio": ours_s / raw_s,
            "gather_s": statistics.median(p["gather_s"] for p in pubs),
            "send_s": statistics.median(p["send_s"] for p in pubs), "load_s": statistics.median(loads),
            "sender_extra_gib": max(p["extra_gib"] for p in pubs),
            "memory_target_gib": (nbytes + 2 * bucket_mb * 2**20) / 2**30}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for transport, marker in (("object_store", "o"), ("gloo", "s")):
        rs = [r for r in rows if r["transport"] == transport]
        axes[0].plot([r["gib"] for r in rs], [r["ratio"] for r in rs], marker=marker, label=transport)
        axes[1].plot([r["gib"] for r in rs], [r["sender_extra_gib"] / r["memory_target_gib"] for r in rs],
                     marker=marker, label=transport)
    for ax, target, label in ((axes[0], 1.3, "publish + load / raw transport"),
                              (axes[1], 1.0, "sender peak extra / (model + 2 buckets)")):
        ax.axhline(target, color="grey", ls="--", lw=1, label=f"target {target}")
        ax.set_xscale("log")
        ax.set_xlabel("weights sent (GiB)")
        ax.set_ylabel(label)
        ax.legend()
    fig.suptitle("Weight sync on this machine (CPU, loopback)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=",".join(DEFAULT_SIZES), help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--transports", default="object_store,gloo")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="model.dtype sent")
    ap.add_argument("--bucket-mb", type=float, default=256.0, help="sync.bucket_mb")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="runs/bench/weight_sync")
    args = ap.parse_args()
    if unknown := set(args.sizes.split(",")) - SHAPES.keys():
        ap.error(f"--sizes: unknown {sorted(unknown)}; known: {', '.join(SHAPES)}")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never a running cluster
    rows = []
    for size in args.sizes.split(","):
        if why := fits(size, args.dtype):
            print(why, file=sys.stderr, flush=True)
            continue
        for transport in args.transports.split(","):
            rows.append(measure(size, transport, args.dtype, args.bucket_mb, args.repeats))
            r = rows[-1]
            print(f"{size} {transport}: {r['gib']:.3f} GiB in {r['buckets']} buckets, ours {r['ours_s']:.3f} s, "
                  f"raw {r['raw_s']:.3f} s ({r['ratio']:.2f}x; gather {r['gather_s']:.3f}, send {r['send_s']:.3f}, "
                  f"load {r['load_s']:.3f}), sender +{r['sender_extra_gib']:.2f} GiB",
                  file=sys.stderr, flush=True)
    ray.shutdown()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"benchmark": "weight_sync", "dtype": args.dtype, "bucket_mb": args.bucket_mb, "repeats": args.repeats,
              "rows": rows}
    (out / "results.json").write_text(json.dumps(report, indent=1))
    plot(rows, out / "weight_sync.png")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
