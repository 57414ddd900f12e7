"""What a soak trial's finished run must show, whatever was faulted (fault_trials.run_trial calls them): every step
trained once, K_inf within the pace's budget, a consume-once rollout trained at most once, the eval rows whole and
in order, final_model this run's own and equal to its checkpoint's learner state, the recovery lines naming the
faulted role, and no process of the run left behind."""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path

import psutil
import torch
from safetensors.torch import load_file

from replay_rl.config import RunConfig
from replay_rl.driver.run_folder import read_run_id
from replay_rl.metrics import read_metrics
from replay_rl.replay.budget_check import k_inf_past_budget
from replay_rl.replay.served_log import trained_twice

# how a role is named in the lines a run prints about it ("generator 1", not "generator reports")
NAMED = {"generator": r"\bgenerator \d", "replay shard": r"\breplay shard", "learner rank": r"\blearner rank",
         "weight board": r"\bweight board", "generator reports": r"\bgenerator reports", "evaluator": r"\bevaluator\b"}
LEFT_BEHIND_S = 60  # how long a run's processes may take to exit after it did


def check_run(cfg: RunConfig, out: Path) -> list[str]:
    problems, rows = [], read_metrics(out / "metrics.jsonl", "train")
    if (steps := [r["step"] for r in rows]) != list(range(1, cfg.run.steps + 1)):
        problems.append(f"train rows are not steps 1..{cfg.run.steps} once each: {steps}")
    if past := k_inf_past_budget(cfg.pace_setting, rows):
        problems.append(f"K_inf past the pace's budget (step, K_inf, bound): {past[:3]}")
    if cfg.consumes_once:
        problems += check_consumed_once(cfg, out)
    evals = [r["step"] for r in read_metrics(out / "metrics.jsonl", "eval")]
    if not evals or evals[0] != 0 or evals[-1] != cfg.run.steps or evals != sorted(set(evals)):
        problems.append(f"eval rows are not 0 .. {cfg.run.steps} in order, each once: {evals}")
    return problems + check_final_model(cfg, out)


def check_consumed_once(cfg: RunConfig, out: Path) -> list[str]:
    """Each key the shards served to a trained step (their audit logs, the last batch of each version) once, and
    a whole batch for every step: an exact count, where K_train + buffer size <= K_inf only bounds it."""
    logs = sorted((out / "replay_served").glob("shard_*.keys"))
    trained, twice = trained_twice(logs, range(cfg.run.steps))
    want = cfg.run.steps * cfg.rank_batch_size * cfg.cluster.learners
    problems = [f"consume-once: keys trained at two steps: {twice[:5]}"] if twice else []
    if trained != want:
        problems.append(f"consume-once: the shards' logs ({len(logs)}) hold {trained} trained keys, not {want}")
    return problems


def check_final_model(cfg: RunConfig, out: Path) -> list[str]:
    """final_model is the last checkpoint's HF folder, of this run, holding the learner state DeepSpeed saved there."""
    final, want = out / "final_model", out / "checkpoints" / f"step_{cfg.run.steps}"
    if not final.is_dir() or final.resolve().parent != want.resolve():
        return [f"final_model is not checkpoints/step_{cfg.run.steps}/hf_model: {os.path.realpath(final)}"]
    if read_run_id(want) != read_run_id(out) or read_run_id(out) is None:
        return [f"final_model's run id {read_run_id(want)} is not the run's {read_run_id(out)}"]
    states = torch.load(want / f"step_{cfg.run.steps}" / "mp_rank_00_model_states.pt", map_location="cpu",
                        weights_only=False)["module"]
    hf = load_file(final / "model.safetensors")
    differ = [k for k, v in hf.items() if k not in states or not torch.equal(states[k].float(), v.float())]
    return [f"final_model differs from the checkpoint's learner state in {differ[:3]}"] if differ else []


def check_named(role: str, lines: list[str]) -> list[str]:
    """The first line the run printed about the fault names the faulted role (not a survivor's symptom). A fault the
    run absorbed without a line (a paused reports actor) has nothing to check."""
    if not lines or role not in NAMED or re.search(NAMED[role], lines[0]):
        return []
    return [f"the first recovery line does not name the {role}: {lines[0][:200]}"]


def left_behind(seen: set[tuple[int, float]], grace_s: float = LEFT_BEHIND_S) -> list[str]:
    """The run's processes ((pid, start time) seen while it ran) still alive grace_s after it ended."""
    end = time.monotonic() + grace_s
    while True:
        alive = sorted(pid for pid, start in seen if running(pid, start))
        if not alive or time.monotonic() > end:
            break
        time.sleep(1)
    return [f"processes left behind: {describe(alive)}"] if alive else []


def running(pid: int, start: float) -> bool:
    """The same process (not a later one given its pid), and not a zombie waiting for its parent."""
    with contextlib.suppress(psutil.Error):
        p = psutil.Process(pid)
        return p.create_time() == start and p.status() != psutil.STATUS_ZOMBIE
    return False


def describe(pids: list[int]) -> str:
    names = []
    for pid in pids[:5]:
        with contextlib.suppress(psutil.Error, IndexError):
            names.append(f"{pid} {psutil.Process(pid).cmdline()[0][:60]}")
    return ", ".join(names) or str(pids[:5])
