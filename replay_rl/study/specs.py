"""The compute-saved study's runs as specs: each task's testbed, the buffer size rules, and every run's RunConfig
(row × learning rate × seed) in its own folder under --out."""

from __future__ import annotations

import json
import math
from pathlib import Path

from replay_rl.analysis.theory import plan
from replay_rl.config import ConfigError, RunConfig
from replay_rl.study.table import BASELINE, PAPER_MU

# each task's testbed: None is the embedded default (configs/tiny_cpu.yaml's arithmetic); countdown's YAML ships
# with the package (a copy of configs/tiny_cpu_countdown.yaml), so a study runs from any working directory
TASKS = {"arithmetic": None, "countdown": str(Path(__file__).with_name("countdown.yaml")),
         "smollm2": str(Path(__file__).with_name("smollm2.yaml"))}  # configs/smollm2_135m_cpu.yaml; the smollm2 extra
ONCE = ["replay.type=lifo_once"]  # the on-policy baseline's queue: each rollout trained on once, freshest first
PROBE_DIR = Path("benchmarks") / "results" / "probe"  # the committed probe results the "probe" N rule reads


def capacity_for(rule: str, cfg: RunConfig, w: int, t: int, mu: float) -> tuple[int, str]:
    """N for a row's rule, and how it was set. "probe": `replay-rl probe`'s N at this split, from the task's
    committed benchmarks/results/probe/TASK/probe.json
    (relative to the working directory) (issue 20's check against the grid over N). "horizon":
    `replay-rl plan`'s best N at this split (Theorem 4.5 with α=0.25, ρ=0.1), which is raised to B when smaller (a
    shard must hold a batch: the row is then N = B, and says so); "B", "B+R", "kB": the batch size, one batch plus
    one step's inserts R = B·(W/T)/μ, k batches."""
    b = cfg.learner.batch_size
    if rule == "once":  # the baseline's queue: a backlog bound, not a buffer
        return max(1024, 2 * b), "consume once"
    if rule == "probe":  # issue 20's check: the probe's recommendation on this task, as committed
        probe = PROBE_DIR / cfg.task.type / "probe.json"
        if not probe.is_file():
            raise ConfigError(f"a row sizes N by the probe, but {probe} is not here; run the study from the "
                              "repository's root (it holds the committed probe results), or pick another preset")
        return json.loads(probe.read_text())["recommendation"]["at_config_split"]["capacity"], "probe"
    if rule == "horizon":
        p = plan(mu, 0.25, 0.1, b, w / t)
        raised = p.capacity != p.capacity_unclamped
        return p.capacity, f"horizon {p.capacity_unclamped} < B, raised to B" if raised else "horizon"
    if rule == "B+R":
        return int(math.ceil(b + b * (w / t) / mu)), "B+R"
    return int(math.ceil(float(rule.removesuffix("B") or 1) * b)), rule


def capacity_notes(preset: dict, base: list[str], config: str | None = None) -> dict[str, str]:
    """How each row's N was set (capacity_for), for the study table: a horizon row raised to B must say so."""
    probe = RunConfig.load(config, base)
    return {name: capacity_for(c["n"], probe, c["w"], c["t"], c["mu"])[1]
            for group in ("configs", "sensitivity") for name, c in preset[group].items()} | {BASELINE: "backlog bound"}


def fresh_capacity_floor(cfg: RunConfig) -> int:
    """The smallest N whose fresh part holds one batch: positive-bias keeps only (1−δ)N fresh items, and its δN
    reserve fills only with correct rollouts that age out, so at N = B a paced run could never fill a batch."""
    keep = 1 - cfg.replay.delta if cfg.replay.type == "positive_bias" else 1.0
    t = cfg.cluster.learners
    return int(math.ceil(cfg.learner.batch_size / keep / t)) * t


def run_specs(preset: dict, base: list[str], out: Path, config: str | None = None) -> list[tuple[str, int, RunConfig]]:
    """(config name, seed, RunConfig) for every run, baseline first, each at every learning rate of its row.
    Replay gets the baseline's compute budget; a preset's "budget_multiple" runs every side that many times its
    steps from step 0, at the same eval spacing (the budget "extend" reaches by resuming). A run's folder is
    out/NAME/lr{LR}/seed{S} (out/NAME/seed{S} when the preset keeps the config's LR). `config` is the task's YAML (None: the embedded default)."""
    probe = RunConfig.load(config, base)
    b, steps, every = probe.learner.batch_size, preset["steps"], preset["eval_every"]
    times = preset.get("budget_multiple", 1)
    specs = []

    def add(name: str, seeds: int, overrides: list[str], run_steps: int, run_every: int, lrs) -> None:
        for lr in lrs:
            folder = out / name / (f"lr{lr:g}" if lr is not None else "")
            for seed in range(preset.get("first_seed", 0), preset.get("first_seed", 0) + seeds):
                lr_set = [f"learner.lr={lr}"] if lr is not None else []
                specs.append((name, seed, RunConfig.load(config, [*base, *overrides, *lr_set, f"run.steps={run_steps}",
                                                             f"run.eval_every={run_every}", f"run.seed={seed}",
                                                             f"run.output_dir={folder / f'seed{seed}'}"])))

    add(BASELINE, preset["seeds"], [*ONCE, f"replay.capacity={capacity_for('once', probe, 5, 3, PAPER_MU)[0]}",
                                    f"cluster.emulate={{mu: {PAPER_MU}, generators: 5, learners: 3}}"],
        steps * times, every, preset["lrs"])
    for group, seeds in (("configs", preset["seeds"]), ("sensitivity", preset["sensitivity_seeds"])):
        for name, c in preset[group].items():
            once = c["n"] == "once"  # an on-policy row: the baseline's queue and steps
            scale = 1.0 if once else (1 + c["mu"]) / (1 + c["w"] / c["t"])  # same compute as the baseline's `steps`
            n, _ = capacity_for(c["n"], probe, c["w"], c["t"], c["mu"])
            n = int(math.ceil(n / probe.cluster.learners)) * probe.cluster.learners
            # probed at a capacity any retention accepts: the base's N may be below this config's floor
            n = max(n, fresh_capacity_floor(RunConfig.load(config, [*base, *c["overrides"], "replay.capacity=65536"])))
            queue = ONCE if once else []
            add(name, min(seeds, c["seeds"] or seeds), [*queue, *c["overrides"], f"replay.capacity={n}",
                              f"cluster.emulate={{mu: {c['mu']}, generators: {c['w']}, learners: {c['t']}}}"],
                int(round(steps * scale * c["steps_scale"])) * times, max(1, int(round(every * scale))),
                c["lrs"] or preset["lrs"])
    return specs


def task_presets(preset: dict, tasks: list[str] | None) -> dict[str, dict]:
    """The preset as each task runs it: its "tasks" entry's keys replace the preset's (no entry: arithmetic only).
    `tasks` picks some of them; a task the preset does not name is an error (its grids were set for another)."""
    named = preset.get("tasks", {"arithmetic": {}})
    unknown = set(tasks or ()) - set(named)
    if unknown:
        raise ValueError(f"--task {sorted(unknown)}: this preset runs {sorted(named)}")
    return {task: preset | named[task] for task in (tasks or named)}


def absolute(cfg: RunConfig) -> RunConfig:
    """cfg with its run folder and model folder as absolute paths: a study's trials run in other processes, perhaps
    in another working directory (Ray Tune's trial folders). A hub id stays one (made absolute, it was a local
    folder of that name, where the tiny model was built)."""
    from replay_rl.models.hub import is_hub_id

    field = cfg.model.start_field
    model = cfg.model.start_from  # a build_dir is a folder, whatever its shape
    model = model if field == "path" and is_hub_id(model) else str(Path(model).absolute())
    return cfg.model_copy(update={
        "run": cfg.run.model_copy(update={"output_dir": str(Path(cfg.run.output_dir).absolute())}),
        "model": cfg.model.model_copy(update={field: model})})
