"""cluster/gpu_check.py in its CPU mode, where Ray cannot be imported (as on our GPU box): real DeepSpeed, a real
HF model and tokenizer, real buckets. The same code runs on CUDA with the Qwen3 shapes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.deepspeed]
ROOT = Path(__file__).parents[1]


def test_gpu_check_passes_on_cpu_with_ray_unimportable(tmp_path):
    blocker = tmp_path / "site" / "ray"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('ray is not installed on the GPU box')\n")
    extensions = tmp_path / "torch_extensions"  # where a JIT-compiled DeepSpeed op would be built
    env = {**os.environ, "PYTHONPATH": str(blocker.parent), "OUT": str(tmp_path / "out"),
           "TORCH_EXTENSIONS_DIR": str(extensions)}
    run = subprocess.run([sys.executable, "cluster/gpu_check.py", "--device", "cpu", "--shapes", "tiny", "--rollouts",
                          "4", "--tokens", "64", "--budgets", "none,128", "--steps", "2", "--mu-prompts", "2",
                          "--mu-tokens", "16", "--workdir",
                          str(tmp_path / "work")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=420)
    verdicts = [line for line in run.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert run.returncode == 0 and all(v.startswith("PASS") for v in verdicts), run.stdout + run.stderr[-3000:]
    checks = {c["check"]: c for c in json.loads((tmp_path / "out" / "gpu_check.json").read_text())["checks"]}
    assert {"generation tiny", "agreement tiny, initial weights", "agreement tiny, after the weight sync",
            "weight sync round trip", "learner step tiny", "no ray imported"} <= checks.keys()
    assert checks["weight sync round trip"]["changed"] > 0 and checks["weight sync round trip"]["differ"] == []
    steps = [c for c in json.loads((tmp_path / "out" / "gpu_check.json").read_text())["checks"]
             if c["check"] == "learner step tiny"]
    assert [s["micro_batches"] for s in steps] == [1, 2] and all(s["tokens_per_s"] > 0 for s in steps)
    mu = checks["mu 16 tokens"]
    assert mu["rollouts"] == 32 and mu["generate_s"] > 0 and mu["train_s"] > 0
    assert abs(mu["mu"] - mu["generate_s"] / mu["train_s"]) < 1e-9
    # DeepSpeed's CPU shared-memory op (inference only) is not compiled: no toolchain, no build lock to hang on
    assert not extensions.exists(), sorted(p.name for p in extensions.rglob("*"))


def test_the_smollm2_shape_is_the_real_models_parameter_for_parameter():
    """The check measures SmolLM2 at random init: its shape must be the preset's model, tensor by tensor."""
    import torch
    from transformers import AutoModelForCausalLM

    sys.path.insert(0, str(ROOT / "cluster"))
    from gpu_shapes import model_config

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(model_config("smollm2_135m", pad_token_id=2, eos_token_id=2,
                                                              bos_token_id=1))
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert sum(p.numel() for p in model.parameters()) == 134_515_008  # SmolLM2-135M-Instruct, tied head
    assert shapes["model.layers.29.self_attn.k_proj.weight"] == (192, 576) and len(shapes) == 272  # as in its safetensors
