"""The compute-saved study's runs on disk: what it keeps of a finished run (`load_run`), whether a run is finished
or finished short of a longer budget (and which runs a longer budget extends), the committed runs that
--report-only reads where the run folders are absent, the check that every run starts from one warm model, and what a
study trial does with the folder it finds (`prepare`), so that a trial run again after its driver died is idempotent."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np

from replay_rl.config import ConfigError, RunConfig
from replay_rl.driver.checkpoints import resolve_resume
from replay_rl.driver.run_folder import FolderLock, read_run_id
from replay_rl.metrics import read_metrics
from replay_rl.analysis.study import smooth
from replay_rl.evaluation.warmstart import model_checksum


def pass_at_k_curves(evals: list[dict]) -> dict[str, list[float]]:
    """pass@k per k from the eval rows' n samples a problem. k = 1 is the sampled pass@1 of those same samples:
    eval/pass@1 is greedy, a different policy, which read above pass@2 on the plot."""
    last = evals[-1]
    ks = {key.removeprefix("eval/pass@"): key for key in last
          if key.startswith("eval/pass@") and key.removeprefix("eval/pass@").isdigit() and key != "eval/pass@1"}
    if "eval/pass@1_sampled" in last:
        ks = {"1": "eval/pass@1_sampled", **ks}
    return {k: [r[key] for r in evals] for k, key in ks.items()}


def load_run(cfg: RunConfig) -> dict:
    """What the study keeps of one finished run: its eval curve with counts, per-step learner stats, histograms."""
    out = Path(cfg.run.output_dir)
    # read up to the spec's budget: a run being extended already holds rows past it
    evals, trains = ([r for r in read_metrics(out / "metrics.jsonl", kind) if r["step"] <= cfg.run.steps]
                     for kind in ("eval", "train"))
    hist = json.loads((out / "replay_stats.json").read_text())
    k = cfg.run.eval_k
    col = lambda rows, key: [r[key] for r in rows]  # noqa: E731
    return {"mu": cfg.cluster.emulate.mu, "batch_size": cfg.learner.batch_size, "capacity": cfg.replay.capacity,
            "lr": cfg.learner.lr, "sampler": cfg.replay.sampler, "replay_type": cfg.replay.type,
            "w_t": [cfg.cluster.emulate.generators, cfg.cluster.emulate.learners],
            "steps": col(evals, "step"), "k_train": col(evals, "ledger/k_train"), "k_inf": col(evals, "ledger/k_inf"),
            "compute": col(evals, "ledger/compute"), "tokens": col(evals, "ledger/tokens"),
            "active_s": col(evals, "ledger/active_s"),
            "pass@1": col(evals, "eval/pass@1"), f"pass@{k}": col(evals, f"eval/pass@{k}"),
            "eval_problems": evals[-1]["eval/eval_problems"], "train_steps": col(trains, "step"),
            "entropy": col(trains, "batch/entropy"), "reward": col(trains, "batch/reward_mean"),
            # GRPO learns nothing from a group whose rewards are all equal: the batch rows' share, the fresh
            # groups' (cumulative), and where each step sits on the compute axis (issue 43's measure-first)
            "train_compute": col(trains, "ledger/compute"),
            "zero_variance_share": [r.get("batch/zero_variance_share") for r in trains],  # absent before 33dc033
            "zero_variance_share_fresh": [r.get("ledger/zero_variance_share_fresh") for r in trains],
            "pass_at_k": pass_at_k_curves(evals),
            "model_sha256": model_checksum(cfg.model.start_from), "seed": cfg.run.seed,
            "overlap_prev": [r.get("buffer/overlap_prev") for r in trains], "age_mean": col(trains, "batch/age_mean"),
            "clip_fraction": col(trains, "batch/clip_fraction"), "ratio_mean": col(trains, "batch/ratio_mean"),
            "replay_ratio": hist["replay_ratio"], "age_hist": hist["age_hist"], "reuse_hist": hist["reuse_hist"],
            "since_last_use_hist": hist["since_last_use_hist"], "wall_s": trains[-1]["ledger/wall_s"],
            "run_restarts": trains[-1].get("ledger/run_restarts", 0)}  # STUDY_BASE's run.max_restarts used


def committed_runs(out: Path) -> dict[tuple[str, float], list[dict]]:
    """The runs a task's results.json holds, {(row, lr): runs in the order they ran}: --report-only summarises them
    where their folders are not here (a fresh clone has the committed results, not the run folders)."""
    path = out / "results.json"
    if not path.is_file():
        return {}
    kept: dict[tuple[str, float], list[dict]] = {}
    for name, runs in json.loads(path.read_text()).get("runs", {}).items():
        for run in runs:
            kept.setdefault((name, run["lr"]), []).append(run)
    return kept


def committed_run(kept: dict[tuple[str, float], list[dict]], name: str, cfg: RunConfig) -> dict | None:
    """The committed run standing in for spec (name, cfg) under --report-only: the one of its seed, cut to the
    spec's budget when it was extended past it (as load_run reads a folder). Runs committed before seeds were kept
    stand in by order, at their own budget only, each once."""
    runs = kept.get((name, cfg.learner.lr), [])
    seeded = [r for r in runs if r.get("seed") == cfg.run.seed and r["steps"][-1] >= cfg.run.steps]
    if seeded:
        return at_budget(seeded[0], cfg.run.steps)
    same = [r for r in runs if "seed" not in r and r["steps"][-1] == cfg.run.steps]
    if same:
        runs.remove(same[0])
    return same[0] if same else None


# the lists load_run keeps per eval and per learner step (pass@k's lists are per eval too)
EVAL_LISTS = ("steps", "k_train", "k_inf", "compute", "tokens", "active_s", "pass@1")
TRAIN_LISTS = ("train_steps", "entropy", "reward", "overlap_prev", "age_mean", "clip_fraction", "ratio_mean")


def at_budget(run: dict, steps: int) -> dict:
    """run cut to its evals and learner steps up to `steps`. The histograms and wall_s stay the final run's (a
    folder's replay_stats.json is the final one too; its wall at the budget is not kept)."""
    evals = [s <= steps for s in run["steps"]]
    trains = [s <= steps for s in run["train_steps"]]
    cut = lambda xs, keep: [x for x, k in zip(xs, keep) if k]  # noqa: E731
    per_eval = {*EVAL_LISTS, *(k for k in run if k.startswith("pass@"))}
    out = run | {k: cut(run[k], evals) for k in per_eval if k in run} | {
        k: cut(run[k], trains) for k in TRAIN_LISTS if k in run}
    if "pass_at_k" in run:
        out["pass_at_k"] = {k: cut(v, evals) for k, v in run["pass_at_k"].items()}
    return out


def check_one_model(results: dict[str, list[dict]]) -> str | None:
    """The warm model's sha256 every run started from (None: runs written before the checksum was kept). A study
    compares runs from one warm-started model: mixing models is refused (a rebuilt or re-tuned warm start moves the
    step-0 accuracy and everything after it)."""
    sums = {r.get("model_sha256") for runs in results.values() for r in runs} - {None}
    if len(sums) > 1:
        raise SystemExit(f"the study's runs start from {len(sums)} different warm models ({', '.join(sorted(sums))}):"
                         " rerun the study in a new --out, or delete the runs of the old model")
    return next(iter(sums), None)


def finish_mark(out: Path) -> dict | None:
    """The run's replay_stats.json, written at the end of its loop, if it is the mark of the run the folder holds now
    (a mark naming another run id is not this run's end); None before its end."""
    path = out / "replay_stats.json"
    try:
        mark = json.loads(path.read_text()) if path.is_file() else None
    except ValueError:  # half of one, written before marks were renamed into place: not an end
        return None
    if mark is None or mark.get("run_id") not in (None, read_run_id(out)):  # marks before run ids: None
        return None
    return mark


def finished(cfg: RunConfig) -> bool:
    """A run is finished once it wrote replay_stats.json, at the end of its loop, and reached cfg.run.steps: a rerun
    keeps it. One that finished fewer steps is extended (`extending`)."""
    return extending(cfg) is None and finish_mark(Path(cfg.run.output_dir)) is not None


def extending(cfg: RunConfig) -> int | None:
    """The last step of a run that finished short of cfg.run.steps (a longer budget resumes it from its final
    checkpoint instead of starting over); None for any other run."""
    out = Path(cfg.run.output_dir)
    if (mark := finish_mark(out)) is None:
        return None
    last = mark["step"] if "step" in mark else read_metrics(out / "metrics.jsonl", "train")[-1]["step"]
    return last if last < cfg.run.steps else None


def extension_specs(preset: dict, specs: list, results: dict[str, list[dict]]) -> list:
    """The specs of each side's `extend_best` LRs (highest median smoothed final pass@1 over seeds) with `extend`
    times their steps, resumed from where they finished: the part already run stays as it was."""
    if not preset.get("extend"):
        return []
    chosen = set()
    for name, runs in results.items():
        lrs = {r["lr"] for r in runs}
        final = {lr: float(np.median([smooth(r["pass@1"])[-1] for r in runs if r["lr"] == lr])) for lr in lrs}
        chosen |= {(name, lr) for lr in sorted(final, key=final.get)[-preset["extend_best"]:]}
    longer = lambda c: c.model_copy(update={"run": c.run.model_copy(  # noqa: E731
        update={"steps": c.run.steps * preset["extend"], "resume_from": "auto"})})
    return [(name, seed, longer(cfg)) for name, seed, cfg in specs if (name, cfg.learner.lr) in chosen]


class StudyStopped(RuntimeError):
    """The study's driver was told to stop while runs were left: they resume when the same command runs again."""


def prepare(cfg: RunConfig) -> RunConfig | None:
    """What a study trial runs for spec `cfg`, from what its folder holds: None for a finished run (nothing to run);
    a run finished short of the spec's steps resumes from its final checkpoint (extension_specs set resume_from);
    a run stopped part-way (its trial or its driver killed) resumes from its own newest checkpoint if it has one,
    else starts over in an emptied folder, as the study always did."""
    if finished(cfg):
        return None
    out = Path(cfg.run.output_dir)
    if extending(cfg) is not None or resolve_resume("auto", out) is not None:
        return cfg.model_copy(update={"run": cfg.run.model_copy(update={"resume_from": "auto"})})
    shutil.rmtree(out, ignore_errors=True)
    return cfg


def wait_for_locks(cfgs: list[RunConfig], bound_s: float = 60.0) -> None:
    """Wait up to bound_s for the run folders of `cfgs` to be free: after a study's driver is killed, its trials'
    workers may still be exiting with their folders' locks. One still held then is refused in one line."""
    deadline = time.monotonic() + bound_s
    for cfg in cfgs:
        out = Path(cfg.run.output_dir)
        while out.is_dir():
            try:
                FolderLock(out).release()
                break
            except ConfigError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
