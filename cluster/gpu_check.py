"""GPU check without Ray: the learner engine, HF generation and bucketed weight transfer on one CUDA device.

Our GPU box has torch and transformers but no Ray or vLLM, so this drives the parts of replay-rl that import
neither (learner/engine.py, generation/hf.py, sync/buckets.py) directly, on random-init models of real shapes:

1. generation: HF generate in the generators' dtype; tokens/s.
2. agreement: the learner's log-probs of those tokens against the generator's (mismatch/abs_mean).
3. learner step: DeepSpeed ZeRO-2, bf16 compute over fp32 master weights, in micro-batches of
   learner.micro_batch_tokens; peak memory, tokens/s and achieved TFLOP/s (6·N·tokens + attention) against
   --peak-tflops, for each budget in --budgets (peak memory must fall with the budget).
4. weight sync: the trained weights, planned into sync.bucket_mb buckets, packed on the device, unpacked and
   loaded into the generator's model; compared bit for bit; GB/s. Then generation from the new weights agrees
   with the learner again.
5. μ on this GPU: seconds to generate a batch of `--mu-prompts`·G rollouts with the HF backend over seconds to
   train on that same batch (one DeepSpeed step), for each of `--mu-tokens` completion lengths. HF generate, not
   vLLM: an upper end for μ, since vLLM decodes many times faster; the paper's μ is 5–7 with vLLM.
6. no Ray: the whole check ran without importing ray.

    bash cluster/gpu_wheels.sh                 # on a machine with pip and internet: .whl/ (deepspeed, pydantic)
    python cluster/gpu_check.py                # on the GPU (Qwen3-0.6B and 1.7B shapes); PASS/FAIL lines + JSON
    python cluster/gpu_check.py --device cpu --shapes tiny    # the same code on CPU, as the test suite runs it
    python cluster/gpu_check.py --shapes smollm2_135m          # the shape of configs/smollm2_135m_gpu.yaml
    python cluster/gpu_check.py --budgets none -s learner.pack_sequences=true -s learner.activation_checkpointing=true

The learner's log-probs take the lm_head a learner.logprob_chunk_tokens chunk at a time (no (B, L, V) fp32
logits); -s sets the other memory and speed knobs. Issue 22's targets on one H200: Qwen3-0.6B at 16 × 1024 tokens
in one pass peaks at ≤ 30 GiB, Qwen3-1.7B reaches MFU ≥ 40%. Packing pays with flash_attention_2 (the flash_attn
package, which the wheels do not carry); under sdpa a packed row's attention is one dense masked product.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_shapes import SHAPES, model_config  # noqa: E402  (beside this file)

results: dict = {"checks": []}


def line(name: str, ok: bool, detail: str = "", **data) -> bool:
    print(f"{'PASS' if ok else 'FAIL'} {name} {detail}".rstrip(), flush=True)
    results["checks"].append({"check": name, "ok": ok, "detail": detail, **data})
    return ok


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_folder(shape: str, root: Path, dtype: torch.dtype, device: torch.device) -> Path:
    """A random-init model of the shape with our offline tokenizer, saved as an HF folder in `dtype`."""
    from transformers import AutoModelForCausalLM

    from replay_rl.models.hf_folder import build_tokenizer, save_model_folder

    tok = build_tokenizer()
    config = model_config(shape, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                          bos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    save_model_folder(model, tok, root / shape)
    del model
    return root / shape


def run_config(path: Path, args, rollouts: int, budget: int | None):
    from replay_rl.config import RunConfig

    gpu = args.device == "cuda"
    return RunConfig.load(None, [
        f"model.path={path}", f"model.dtype={'bfloat16' if gpu else 'float32'}", "cluster.learners=1",
        "cluster.generators=1", f"cluster.gpus_per_learner={1 if gpu else 0}",
        f"cluster.gpus_per_evaluator={0.1 if gpu else 0}", f"learner.batch_size={rollouts}",
        f"replay.capacity={rollouts}", "learner.zero_stage=2", f"sync.bucket_mb={args.bucket_mb}",
        f"learner.micro_batch_tokens={'null' if budget is None else budget}", f"generation.max_new_tokens={args.gen_tokens}",
        *args.set])


def engine_for(cfg):
    from replay_rl.learner.engine import LearnerEngine

    engine = LearnerEngine(cfg, 0, cfg.model.start_from)
    engine.setup("127.0.0.1", free_port())
    return engine


def free_device_memory() -> None:
    """After the caller dropped its last reference to an engine: return its memory before the next one is built,
    so each measurement's peak is its own."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def rollouts_from(groups, prompts) -> "object":
    """Generated groups as a RolloutBatch, with made-up advantages (the check trains on them once)."""
    from replay_rl.rollout import Rollout, RolloutBatch

    rng = np.random.default_rng(0)
    return RolloutBatch.from_rollouts([
        Rollout(p, c.token_ids, c.logprobs, 1.0, float(rng.choice([-1.0, 1.0])), 0.5, True, g, c.version, c.version,
                c.version, 0, c.finish) for g, (p, group) in enumerate(zip(prompts, groups)) for c in group])


def synthetic_batch(rollouts: int, tokens: int, vocab: int):
    from replay_rl.rollout import Rollout, RolloutBatch

    rng = np.random.default_rng(1)
    prompt = tokens // 4
    return RolloutBatch.from_rollouts([
        Rollout(rng.integers(4, vocab, prompt).astype(np.int32), rng.integers(4, vocab, tokens - prompt).astype(np.int32),
                -rng.random(tokens - prompt).astype(np.float32), 1.0, float(rng.choice([-1.0, 1.0])), 0.5, True, i,
                0, 0, 0, 0, 0) for i in range(rollouts)])


def generate(backend, args, tokenizer, n_prompts: int = 4, group: int | None = None, tokens: int | None = None):
    from replay_rl.generation.backend import SamplingParams

    rng = np.random.default_rng(n_prompts)
    prompts = [np.asarray(tokenizer(f"{a}+{b}=", add_special_tokens=False)["input_ids"], np.int32)
               for a, b in rng.integers(0, 100, (n_prompts, 2))]
    params = SamplingParams(1.0, 1.0, tokens or args.gen_tokens, group or args.group)
    t0 = time.perf_counter()
    groups = backend.generate(prompts, params)
    sync(backend.device)
    seconds = time.perf_counter() - t0
    return prompts, groups, sum(len(c.token_ids) for g in groups for c in g) / seconds


def agreement(engine, batch, limit: float, name: str) -> bool:
    m = engine.train_on(batch, np.zeros(len(batch), int))  # every row fresh (age 0): log-probs taken before the update
    gap = m["mismatch/abs_mean"]
    return line(name, bool(gap <= limit), f"mean |log π_learner − log π_generator| = {gap:.2e} (limit {limit:g}) on "
                f"{len(batch)} rollouts", abs_mean=gap, limit=limit)


def learner_steps(engine, args, shape: str) -> dict:
    """--steps timed optimizer steps on a synthetic rank batch, after one warm-up."""
    device, cfg = engine.device, engine.cfg
    batch = synthetic_batch(cfg.learner.batch_size, args.tokens, SHAPES[shape]["vocab_size"])
    engine.train_on(batch)
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        m = engine.train_on(batch)
    sync(device)
    seconds = (time.perf_counter() - t0) / args.steps
    n_params = sum(p.numel() for p in engine.engine.module.parameters())
    s = SHAPES[shape]
    tokens = cfg.learner.batch_size * args.tokens
    # forward + backward: 6 FLOPs per parameter per token, plus attention scores (12·layers·d_attn·seq per token)
    flops = tokens * (6 * n_params + 12 * s["num_hidden_layers"] * s["num_attention_heads"] * s["head_dim"] * args.tokens)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    return {"shape": shape, "parameters": n_params, "micro_batch_tokens": cfg.learner.micro_batch_tokens,
            "micro_batches": m["micro_batches"], "rollouts": cfg.learner.batch_size, "tokens_per_rollout": args.tokens,
            "step_s": seconds, "tokens_per_s": tokens / seconds, "tflops": flops / seconds / 1e12,
            "mfu": flops / seconds / 1e12 / args.peak_tflops, "peak_memory_gib": peak, "loss": m["loss"],
            "overrides": list(args.set)}


def mu_on_this_device(engine, backend, args, tokenizer) -> list[dict]:
    """The cost model's μ measured: generating a batch (HF backend, one call of --mu-prompts prompts × G=16) over
    one learner step on the same rollouts, after a warm-up of each. Both sides are one device, as one generator
    and one learner of a W=T split."""
    rows = []
    for tokens in [int(t) for t in args.mu_tokens.split(",")]:
        generate(backend, args, tokenizer, 1, 2, 8)  # warm-up
        prompts, groups, tok_s = generate(backend, args, tokenizer, args.mu_prompts, 16, tokens)
        batch = rollouts_from(groups, prompts)
        gen_s = batch.completion_offsets[-1] / tok_s
        engine.train_on(batch)
        sync(engine.device)
        t0 = time.perf_counter()
        for _ in range(args.steps):
            engine.train_on(batch)
        sync(engine.device)
        train_s = (time.perf_counter() - t0) / args.steps
        r = {"rollouts": len(batch), "completion_tokens_mean": float(np.diff(batch.completion_offsets).mean()),
             "generate_s": float(gen_s), "train_s": train_s, "mu": float(gen_s / train_s),
             "generate_tokens_per_s": float(tok_s)}
        rows.append(r)
        line(f"mu {tokens} tokens", bool(np.isfinite(r["mu"])), f"{len(batch)} rollouts of {r['completion_tokens_mean']:.0f} "
             f"completion tokens: generate {gen_s:.2f}s (HF, {tok_s:.0f} tokens/s), train {train_s:.3f}s, "
             f"μ = {r['mu']:.1f}", **r)
    return rows


def weight_round_trip(engine, backend, version: int) -> bool:
    """The engine's buckets packed on its device, unpacked and loaded into the generator's model, bit for bit."""
    from replay_rl.sync.buckets import pack, unpack

    plan = engine.weight_plan
    before = {n: t.clone() for n, t in backend.model.state_dict().items()}
    sync(engine.device)
    t0 = time.perf_counter()
    for bucket, tensors in zip(plan, engine.bucket_tensors(plan)):
        backend.load_weights(list(unpack(bucket, pack(bucket, tensors))), version)
    sync(engine.device)
    seconds = time.perf_counter() - t0
    sent = dict(engine.engine.module.named_parameters())
    state = backend.model.state_dict()
    dtype = getattr(torch, engine.cfg.model.dtype)
    differ = [n for n, p in sent.items() if not torch.equal(state[n], p.detach().to(state[n].device, dtype))]
    moved = sum(not torch.equal(before[n], state[n]) for n in sent)  # the learner's step reached the generator
    nbytes = sum(b.nbytes for b in plan)
    return line("weight sync round trip", not differ and moved > 0, f"{len(plan)} buckets, {nbytes / 2**30:.2f} GiB "
                f"in {seconds:.3f}s ({nbytes / seconds / 1e9:.1f} GB/s), {moved} of {len(sent)} tensors changed by "
                f"the load, {len(differ)} differ from the learner's", buckets=len(plan), gib=nbytes / 2**30,
                seconds=seconds, changed=moved, differ=differ[:5])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--shapes", default="qwen3_0p6b,qwen3_1p7b", help=f"comma-separated, of {sorted(SHAPES)}")
    ap.add_argument("--rollouts", type=int, default=16, help="rank batch of the learner-step measurement")
    ap.add_argument("--tokens", type=int, default=1024, help="prompt + completion tokens per rollout")
    ap.add_argument("--budgets", default="none,4096", help="learner.micro_batch_tokens values for the first shape")
    ap.add_argument("--steps", type=int, default=3, help="timed learner steps per measurement")
    ap.add_argument("--group", type=int, default=4, help="completions per prompt in the generation check")
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--mu-prompts", type=int, default=8, help="prompts per generation call in the μ measurement (×16)")
    ap.add_argument("--mu-tokens", default="256,1024", help="completion lengths of the μ measurement")
    ap.add_argument("--bucket-mb", type=float, default=256)
    ap.add_argument("--peak-tflops", type=float, default=790, help="bf16 dense peak, for MFU (H200: about 790)")
    ap.add_argument("--agree-limit", type=float, default=None, help="default 5e-2 in bf16 on CUDA, 1e-3 in fp32")
    ap.add_argument("--workdir", default="/tmp/replay_rl_gpu_check")
    ap.add_argument("--out", default=os.environ.get("OUT"), help="folder for gpu_check.json (default $OUT)")
    ap.add_argument("-s", "--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every learner here, e.g. learner.pack_sequences=true, "
                         "learner.activation_checkpointing=true, model.attn_implementation=flash_attention_2")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.device == "cuda" and not torch.cuda.is_available():
        return not line("cuda", False, "no CUDA device visible; --device cpu runs the same code on the CPU")
    device = torch.device(args.device)
    if device.type == "cuda":
        line("cuda", True, f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    from replay_rl.generation.hf import HFBackend
    from replay_rl.models.hf_folder import load_tokenizer

    shapes = args.shapes.split(",")
    gen_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    limit = args.agree_limit or (5e-2 if device.type == "cuda" else 1e-3)
    root = Path(args.workdir)
    first = model_folder(shapes[0], root, gen_dtype, device)  # generator and learner start from the same weights
    backend = HFBackend(str(first), str(gen_dtype).removeprefix("torch."), args.device)
    prompts, groups, tok_s = generate(backend, args, load_tokenizer(first))
    line(f"generation {shapes[0]}", True, f"{sum(len(g) for g in groups)} completions, {tok_s:.0f} tokens/s",
         tokens_per_s=tok_s)
    budgets = [None if b == "none" else int(b) for b in args.budgets.split(",")]
    # the last budget: the μ measurement trains on --mu-prompts·16 whole rollouts, whose logits would not fit at once
    engine = engine_for(run_config(first, args, len(prompts) * args.group, budgets[-1]))
    agreement(engine, rollouts_from(groups, prompts), limit, f"agreement {shapes[0]}, initial weights")
    weight_round_trip(engine, backend, version=1)  # the weights after that step
    prompts, groups, _ = generate(backend, args, load_tokenizer(first))
    agreement(engine, rollouts_from(groups, prompts), limit, f"agreement {shapes[0]}, after the weight sync")
    mu_on_this_device(engine, backend, args, load_tokenizer(first))
    del engine, backend
    free_device_memory()
    steps = []
    for shape in shapes:
        path = first if shape == shapes[0] else model_folder(shape, root, gen_dtype, device)
        for budget in budgets if shape == shapes[0] else budgets[-1:]:
            engine = engine_for(run_config(path, args, args.rollouts, budget))
            r = learner_steps(engine, args, shape)
            del engine
            free_device_memory()
            steps.append(r)
            line(f"learner step {shape}", bool(np.isfinite(r["loss"])),
                 f"{r['parameters'] / 1e9:.2f}B params, micro_batch_tokens={budget} ({r['micro_batches']} micro-batches), "
                 f"{r['step_s']:.2f}s/step, {r['tokens_per_s']:.0f} tokens/s, {r['tflops']:.1f} TFLOP/s "
                 f"(MFU {r['mfu']:.1%}), peak {r['peak_memory_gib']:.1f} GiB", **r)
    if device.type == "cuda" and len(budgets) > 1:
        peaks = [r["peak_memory_gib"] for r in steps[:len(budgets)]]
        line("peak memory falls with micro_batch_tokens", all(a > b for a, b in zip(peaks, peaks[1:])),
             " → ".join(f"{p:.1f} GiB" for p in peaks))
    line("no ray imported", "ray" not in sys.modules)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "gpu_check.json").write_text(json.dumps(results, indent=1, default=str))
    return int(not all(c["ok"] for c in results["checks"]))


if __name__ == "__main__":
    sys.exit(main())
