"""`replay-rl` command line: init-model | warmstart | eval | train | report | config | plan | probe | study."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional

import typer

from replay_rl.probe.settings import ProbeSettings
from replay_rl.study.main import command as study_command

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="RL post-training of LLMs with experience replay.")
ConfigOpt = typer.Option(None, "--config", "-c", help="YAML config; default: the embedded tiny CPU run")
SetOpt = typer.Option(None, "--set", "-s", help="dotted override, e.g. --set replay.capacity=84 (repeatable)")
PROBE = ProbeSettings()  # the probe options' defaults, stated once (probe/settings.py)


@contextmanager
def _config_errors_exit_2():
    from replay_rl.config import ConfigError

    try:
        yield
    except ConfigError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from None


def _load(config: Optional[Path], overrides: Optional[List[str]]):
    from replay_rl.config import RunConfig
    with _config_errors_exit_2():
        return RunConfig.load(config, overrides or [])


@app.command("init-model")
def init_model(out: Path = typer.Argument(..., help="folder to write the HF model into"),
               config: Optional[Path] = ConfigOpt, set_: Optional[List[str]] = SetOpt) -> None:
    """Write a random-init tiny model + offline tokenizer (model.tiny) as an HF folder."""
    from replay_rl.models.hf_folder import init_tiny_model_folder, load_model, parameter_count

    cfg = _load(config, set_)
    init_tiny_model_folder(cfg.model.tiny, out)
    typer.echo(json.dumps({"path": str(out), "parameters": parameter_count(load_model(out))}))


@app.command()
def warmstart(src: Path = typer.Argument(..., help="HF model folder to start from (e.g. from init-model)"),
              out: Path = typer.Argument(..., help="folder to write the warm-started model into"),
              config: Optional[Path] = ConfigOpt, set_: Optional[List[str]] = SetOpt) -> None:
    """Supervised warm start on task demonstrations for warmstart.steps; writes its manifest (warmstart.json)."""
    from replay_rl.evaluation.warmstart import check_reference, warmstart as run
    cfg = _load(config, set_)
    typer.echo(json.dumps(run(cfg, src, out, log=lambda *_: None)))
    check_reference(cfg, out, log=lambda line: typer.echo(line, err=True), where=str(out))


@app.command("eval")
def eval_(model: Optional[Path] = typer.Argument(None, help="HF model folder; default: run.output_dir/final_model, "
                                                       "else model.path (or model.build_dir)"),
          config: Optional[Path] = ConfigOpt, set_: Optional[List[str]] = SetOpt,
          k: Optional[int] = typer.Option(None, help="k of pass@k; default run.eval_k")) -> None:
    """pass@1 (greedy and sampled) and pass@k on the task's eval split."""
    from replay_rl.evaluation.passk import evaluate_for_run
    from replay_rl.generation.factory import make_backend
    from replay_rl.models.hf_folder import load_tokenizer
    from replay_rl.tasks import make_task
    from replay_rl.driver.preflight import check_model_folder
    from replay_rl.models.hub import local_or_hub_model

    cfg = _load(config, set_)
    trained = Path(cfg.run.output_dir) / "final_model"
    field = f"model.{cfg.model.start_field}"
    with _config_errors_exit_2():
        path = model or (trained if (trained / "config.json").is_file() else
                         local_or_hub_model(cfg.model.path) if cfg.model.path else Path(cfg.model.build_dir))
        check_model_folder(path, "MODEL" if model else field)
    typer.echo(f"scoring {path}" + ("" if model else " (the run's final model)" if path == trained else
                                   f" ({field}: no final_model in run.output_dir yet)"), err=True)
    backend = make_backend(cfg.eval_generation, cfg.model, str(path), bucket_mb=cfg.sync.bucket_mb, seed=cfg.run.seed)
    result = evaluate_for_run(backend, load_tokenizer(path), make_task(cfg.task, cfg.task.split_seed), cfg, k)
    typer.echo(json.dumps(result))


@app.command()
def train(config: Optional[Path] = ConfigOpt, set_: Optional[List[str]] = SetOpt) -> None:
    """Run W generators, T DeepSpeed learner ranks and T replay shards on Ray (the embedded tiny CPU run by default)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from replay_rl.driver.preflight import preflight
    from replay_rl.driver.run_folder import AlreadyFinished

    cfg = _load(config, set_)
    with _config_errors_exit_2():
        try:
            preflight(cfg)  # before the bar and before Ray: a bad input is one line and exit 2
        except AlreadyFinished as e:  # rerun as is (a requeued job, resume_from=auto): done, not an error
            typer.echo(str(e), err=True)
            raise typer.Exit(0) from None
    from replay_rl.driver.failures import one_line_thread_errors
    from replay_rl.driver.trainer import train as run  # Ray, torch and DeepSpeed: only once the inputs are known good

    one_line_thread_errors(Path(cfg.run.output_dir))
    shown: dict = {}
    # the bar on stderr: stdout carries only the closing summary
    # fits 80 columns at 100000 steps: 6 + 10 + 13 + 7 + 43
    with Progress(TextColumn("[bold]train"), BarColumn(bar_width=10), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=Console(stderr=True)) as bar:
        job = bar.add_task("", total=cfg.run.steps)

        def progress(step: int, rec: dict) -> None:
            shown.update({k: rec[k] for k in ("eval/pass@1",) if k in rec})
            bar.update(job, completed=step, description=(
                f"reward {rec['batch/reward_mean']:.2f} eval {shown.get('eval/pass@1', float('nan')):.2f} "
                f"compute {rec['ledger/compute']:.0f} age {rec['batch/age_mean']:.1f}"))

        try:
            final = run(cfg, progress)
        except BaseException as e:  # noqa: BLE001 - the bar's last frame first, then the one line, last
            bar.stop()
            _exit_with_one_line(e, cfg.run.output_dir)
    from replay_rl.driver.closing import closing_summary

    typer.echo(closing_summary(cfg, final))


def _exit_with_one_line(e: BaseException, out: Path | str, failed: str = "run failed") -> None:
    from replay_rl.config import ConfigError
    from replay_rl.driver.session import describe_failure

    if isinstance(e, KeyboardInterrupt):  # run() has already stopped every actor and Ray in its finally
        typer.echo(f"stopped: actors and Ray shut down, metrics so far are in {out}", err=True)
        raise typer.Exit(130) from None
    if isinstance(e, ConfigError):
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from None
    if not isinstance(e, Exception):
        raise e
    # one line here, the whole traceback in the run folder
    typer.echo(f"{failed}: {describe_failure(e, Path(out) / 'error.log')}", err=True)
    raise typer.Exit(1) from None


@app.command()
def report(runs: List[Path] = typer.Argument(..., help="run folders (run.output_dir); several share each plot's axes"),
           out: Optional[Path] = typer.Option(None, help="where the PNGs go; default RUN/plots for one run, "
                                                          "runs/report for several")) -> None:
    """PNGs of one or more runs: accuracy, learner batches, buffer age and reuse, compute ledger and weight sync."""
    from replay_rl.analysis.report import write_report

    missing = [str(r) for r in runs if not (r / "metrics.jsonl").is_file()]
    if missing:
        typer.echo(f"report: {', '.join(missing)}: no metrics.jsonl; pass run folders (run.output_dir)", err=True)
        raise typer.Exit(2)
    target = out or (runs[0] / "plots" if len(runs) == 1 else Path("runs/report"))
    for path in write_report(runs, target):
        typer.echo(str(path))


@app.command("config")
def show_config(config: Optional[Path] = ConfigOpt, set_: Optional[List[str]] = SetOpt) -> None:
    """Print the resolved config as YAML, every field with its description; the output loads back with -c."""
    from replay_rl.config.docs import documented_tree

    typer.echo("\n".join(documented_tree(_load(config, set_))))


@app.command()
def plan(mu: float = typer.Option(..., help="measured μ = cost to generate a batch / cost to train on it"),
         alpha: float = typer.Option(0.25, help="variance growth exponent α of σ(x) ∝ x^α"),
         rho: float = typer.Option(0.1, help="sample–iterate correlation ρ in [0, 1]"),
         batch_size: Optional[int] = typer.Option(None, help="B: rollouts per optimizer step"),
         w_t: Optional[str] = typer.Option(None, "--w-t", help="generator/learner split, e.g. 5/3 or 1.67"),
         discrete: bool = typer.Option(False, help="exact mean of σ² over integer ages, not the power law")) -> None:
    """Theorem 4.5: optimal staleness horizon x* = N/R, replay ratio y* = B/R, the best point with N ≥ B, and the
    best N ≥ B at a given W/T."""
    from dataclasses import asdict

    from replay_rl.analysis.theory import NoInteriorOptimum, parse_ratio, plan as solve

    try:
        result = solve(mu, alpha, rho, batch_size, None if w_t is None else parse_ratio(w_t), discrete)
    except NoInteriorOptimum as e:
        typer.echo(f"plan: {e}", err=True)
        raise typer.Exit(1) from None
    except ValueError as e:
        typer.echo(f"plan: {e}", err=True)
        raise typer.Exit(2) from None
    r = result
    if not r.feasible:
        typer.echo(f"plan: Theorem 4.5's point is infeasible: x* = {r.x_star:.2f} < y* = {r.y_star:.2f} means "
                   "N < B, a buffer smaller than one batch", err=True)
        typer.echo(f"plan: best feasible point: x = y = {r.x_feasible:.2f} (N = B) at W/T = "
                   f"{r.w_over_t_feasible:.2f}", err=True)
    if r.capacity is not None and r.capacity != r.capacity_unclamped:
        typer.echo(f"plan: at this W/T the replay ratio is y = {r.replay_ratio_at_split:.2f} and the best horizon "
                   f"{r.x_at_split:.2f} gives N = {r.capacity_unclamped} < B, so N is raised to B = {r.capacity} "
                   f"(horizon {r.x_at_capacity:.2f})", err=True)
    typer.echo(json.dumps(asdict(result)))


@app.command()
def probe(config: Optional[Path] = ConfigOpt, set_: Optional[List[str]] = SetOpt,
          out: Optional[Path] = typer.Option(None, help="folder for probe.json and sigma2.png; default "
                                                        "run.output_dir/probe"),
          time_limit: float = typer.Option(PROBE.time_limit_s, "--time-limit",
                                           help="hard bound in seconds, model loading included"),
          horizon: int = typer.Option(PROBE.horizon, help="H: ages 1..H are measured"),
          points: int = typer.Option(PROBE.points, help="probe points (learner steps where gradients are taken)"),
          every: int = typer.Option(PROBE.every, help="learner steps between probe points"),
          fresh_groups: int = typer.Option(PROBE.fresh_groups, help="groups generated by the current weights at each "
                                           "probe point; their mean gradient is the reference ḡ"),
          seed: int = typer.Option(PROBE.seed, help="seeds prompts, batch sampling and the gradient sketch"),
          pilot: bool = typer.Option(False, help="then the pilot over N (on --out's probe.json if measured on this "
                                     "config): N at the probe's horizon, 10B, --max-capacity × lr, lr/2 × 2 seeds"),
          max_capacity: Optional[int] = typer.Option(None, min=1, help="--pilot's largest N (the most memory holds); "
                                                     "default 20·B"),
          pilot_steps: Optional[int] = typer.Option(None, min=1, help="--pilot's steps a run; default run.steps"),
          plan_only: bool = typer.Option(False, help="--pilot states its plan and cost, trains nothing")) -> None:
    """Measure σ²_eff(τ) (noise per unit of retained signal), s(τ), 𝒱(N), ρ, κ and μ on this config's task and model
    in a short bounded replay run, and recommend N, the W/T split and the LR from Theorem 4.5 when the status is ok;
    writes probe.json and sigma2.png. Exit 3: not_resolved, 4: premise_failed (no paste line with either: the
    terminal names the pilot to run instead). --pilot: the pilot over N (replay_rl/probe/pilot.py), exit 0."""
    from pydantic import ValidationError

    from replay_rl.driver.preflight import check_model, check_task

    cfg = _load(config, set_)
    with _config_errors_exit_2():
        check_model(cfg)
        check_task(cfg)
    try:
        settings = ProbeSettings(time_limit_s=time_limit, horizon=horizon, points=points, every=every,
                                 fresh_groups=fresh_groups, seed=seed)
    except ValidationError as e:
        typer.echo(f"probe: {e.errors()[0]['loc'][0]}: {e.errors()[0]['msg']}", err=True)
        raise typer.Exit(2) from None
    from replay_rl.probe.main import run_probe
    from replay_rl.probe.pilot import ArmFailed

    driver = None
    if pilot:  # Ray and DeepSpeed, only for the pilot's runs
        from replay_rl.driver.session import connect
        from replay_rl.driver.trainer import train
        driver = (connect, train)

    with _config_errors_exit_2():  # an N or lr the config refuses; a failed pilot run: one line, exit 1
        try:
            code = run_probe(cfg, settings, out or Path(cfg.run.output_dir) / "probe", config, set_ or [],
                             pilot=pilot, max_capacity=max_capacity, pilot_steps=pilot_steps, plan_only=plan_only,
                             say=typer.echo, warn=lambda msg: typer.echo(msg, err=True), driver=driver)
        except ArmFailed as e:  # the same command goes on from the finished arms
            _exit_with_one_line(e.cause, e.arm.cfg.run.output_dir, f"probe --pilot: run {e} failed")
    if code:
        raise typer.Exit(code)


app.command("study")(study_command)  # its options live beside the study (replay_rl/study/main.py)


if __name__ == "__main__":
    app()
