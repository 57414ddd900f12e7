"""Full-stack GPU check: on a GPU node with the whole install (Ray, vLLM, DeepSpeed: `pip install -e '.[vllm,dev]'`).
Prints PASS/FAIL lines. cluster/gpu_check.py is the Ray-free check of the learner, generation and sync on one GPU.

    python cluster/gpu_stack_check.py [--workdir /tmp/gpu_check]

1. the vLLM backend contract (greedy = HF, log-probs = teacher-forced forward, in-place reload) on CUDA;
2. the NCCL broadcast transport in the sync contract (needs 2 GPUs: NCCL refuses two ranks on one device,
   so on a single GPU this line reports SKIP, and the gloo run of the same code is what covers it);
3. a DeepSpeed learner on the GPU (bf16, ZeRO-2) taking a few steps from a vLLM generator through the replay
   service and the object-store sync: `replay-rl train` with W=1, T=1 sharing the GPU (0.5 each), a small real
   Qwen2 architecture (hidden 256, 4 layers).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def line(name: str, ok: bool | None, detail: str = "") -> None:
    print(f"{'SKIP' if ok is None else 'PASS' if ok else 'FAIL'} {name} {detail}".rstrip(), flush=True)


def pytest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          capture_output=True, text=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", default="/tmp/replay_rl_gpu_check")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        line("cuda", False, "no CUDA device visible")
        return 1
    line("cuda", True, torch.cuda.get_device_name(0))
    r = pytest("tests/generation/test_backend_contract.py", "-k", "vllm")
    line("vllm backend contract", r.returncode == 0, r.stdout.strip().splitlines()[-1] if r.stdout else r.stderr[-300:])
    if torch.cuda.device_count() >= 2:
        r = pytest("tests/sync/test_sync_contract.py", "-k", "nccl")
        line("nccl sync contract", r.returncode == 0, r.stdout.strip().splitlines()[-1])
    else:
        line("nccl sync contract", None, "one GPU: NCCL needs a device per rank (gloo covers the same code)")
    out = Path(args.workdir)
    # run.overwrite: a check run again in the same workdir starts over (its model folder, beside it, is kept)
    overrides = [f"model.build_dir={out / 'model'}", f"run.output_dir={out / 'run'}", "run.overwrite=true",
                 "run.steps=5", "run.eval_every=5", "run.eval_prompts=32", "model.tiny.hidden_size=256",
                 "model.tiny.num_layers=4", "model.tiny.intermediate_size=768", "model.dtype=bfloat16",
                 "generation.backend.type=vllm",
                 "generation.backend.gpu_memory_utilization=0.3", "generation.backend.enforce_eager=true",
                 "cluster.generators=1", "cluster.learners=1", "cluster.gpus_per_generator=0.5",
                 "cluster.gpus_per_learner=0.4", "cluster.gpus_per_evaluator=0.1", "learner.batch_size=16",
                 "replay.capacity=64", "warmstart.steps=300"]
    r = subprocess.run([sys.executable, "-m", "replay_rl.cli", "train", *[a for o in overrides for a in ("-s", o)]],
                       cwd=ROOT, capture_output=True, text=True)
    ok = r.returncode == 0
    detail = r.stdout.strip().splitlines()[-1] if ok and r.stdout.strip() else r.stderr[-600:]
    line("train: vllm generator + deepspeed bf16 learner on GPU", ok, detail)
    if ok:
        final = [json.loads(row) for row in (out / "run" / "metrics.jsonl").read_text().splitlines()][-1]
        line("weights reached the generator", final.get("ledger/generator_version_min", 0) >= 4,
             f"K_train {final.get('ledger/k_train')}, slowest generator at version "
             f"{final.get('ledger/generator_version_min')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
