"""Each study run as a Ray Tune trial: it reserves exactly its run's shape (cluster.bundles(), as one placement
group), its roles go into that reservation (driver/placement.py), and as many trials run side by side as the
cluster's resources allow (max_concurrent caps it). Each sitting of a phase is a fresh Tune experiment under
--out/_tune/PHASE/sitting_K over the phase's runs not yet finished: a study whose driver died resumes from its run
folders (runs.prepare), never by unpickling Tune's experiment state (tuner.pkl), which no manifest covers and which
the docs put on a shared filesystem. The only module that imports ray.tune.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ray import tune

from replay_rl.config import ConfigError, RunConfig
from replay_rl.study.runs import load_run, prepare

SPECS_FILE = "specs.json"  # beside a phase's experiment: the run folders it was created with


def spec_of(config: dict) -> RunConfig:
    return RunConfig.model_validate_json(config["run"]["cfg"])


def trial_resources(config: dict) -> tune.PlacementGroupFactory:
    """The trial's reservation: its run's bundles (driver, evaluator with a GPU, generators, learner ranks)."""
    return tune.PlacementGroupFactory(spec_of(config).cluster.bundles(), strategy="PACK")


def trial_name(trial) -> str:
    return trial.config["run"]["name"]


def run_trial(config: dict) -> None:
    """One run, in the trial's actor (bundle 0 of its reservation): as its folder says (runs.prepare), then its
    final numbers to Tune. A failed run raises its one line (the traceback is in the run's error.log)."""
    from replay_rl.driver.session import describe_failure
    from replay_rl.driver.trainer import train

    spec = spec_of(config)
    cfg = prepare(spec)
    if cfg is not None:
        try:
            train(cfg)
        except Exception as e:  # noqa: BLE001 - one line for the study's driver; the whole error goes to error.log
            raise RuntimeError(describe_failure(e, Path(cfg.run.output_dir) / "error.log")) from None
    run = load_run(spec)
    tune.report({"step": run["steps"][-1], "pass@1": run["pass@1"][-1], "compute": run["compute"][-1]})


def run_phase(phase: str, runs: list[tuple[str, RunConfig]], tune_dir: Path,
              max_concurrent: int | None) -> dict[str, str]:
    """Run `runs` ((trial name, spec) each) as the trials of a new sitting of tune_dir/phase, refusing runs the
    phase was not started with when a driver before this one started it. Returns {trial name: its one line} for
    the trials that failed."""
    path = tune_dir / phase
    if (path / SPECS_FILE).is_file():  # a driver before this one started the phase
        started = set(json.loads((path / SPECS_FILE).read_text()))
        if other := sorted({cfg.run.output_dir for _, cfg in runs} - started):
            raise ConfigError(f"{tune_dir.parent} was started with other runs (e.g. {other[0]} is new to its {phase} "
                              "phase); rerun with the arguments it was started with, or use a new --out")
        print(f"resumed the {phase} phase of {tune_dir.parent}: {len(started) - len(runs)} runs kept, {len(runs)} to "
              "run again", file=sys.stderr, flush=True)
    else:
        path.mkdir(parents=True, exist_ok=True)
        (path / SPECS_FILE).write_text(json.dumps([cfg.run.output_dir for _, cfg in runs], indent=1))
    grid = [{"name": name, "cfg": cfg.model_dump_json()} for name, cfg in runs]
    tuner = tune.Tuner(
        tune.with_resources(run_trial, trial_resources), param_space={"run": tune.grid_search(grid)},
        tune_config=tune.TuneConfig(max_concurrent_trials=max_concurrent, reuse_actors=False,
                                    trial_name_creator=trial_name, trial_dirname_creator=trial_name),
        # no fail_fast: it would stop the other trials as finished, and a rerun would then skip their runs. No
        # retry within a sitting: it would also train a run that fails for good twice, and the study's rerun
        # resumes a lost trial's run from its folder anyway
        run_config=tune.RunConfig(name=f"sitting_{sittings(path)}", storage_path=str(path), verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=0, fail_fast=False)))
    results = tuner.fit()
    return {r.config["run"]["name"]: error_line(r.error) for r in results if r.error is not None}


def sittings(phase: Path) -> int:
    """The next sitting's number: one past the highest so far."""
    return 1 + max((int(p.name.removeprefix("sitting_")) for p in phase.glob("sitting_*")), default=-1)


def error_line(error: BaseException) -> str:
    """The trial's own line (run_trial's RuntimeError), not Ray's wrapping of it with the remote traceback."""
    cause = getattr(error, "cause", None) or error
    return (str(cause).strip().splitlines() or [type(cause).__name__])[0]


def quiet_trials() -> None:
    """Settings every trial inherits: runs find their folders by absolute paths, so a trial's working directory
    stays the driver's; Tune stages a few reservations ahead, not up to 200."""
    os.environ["RAY_CHDIR_TO_TRIAL_DIR"] = "0"
    os.environ.setdefault("TUNE_MAX_PENDING_TRIALS_PG", "4")
