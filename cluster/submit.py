"""Submit a replay-rl run to a Ray cluster with `ray job submit`.

    python cluster/submit.py --address http://HEAD:8265 --config configs/qwen2p5_7b_w5_t3.yaml [-s key=value ...]
    python cluster/submit.py --address http://HEAD:8265 --study quick --out /shared/study [-s key=value ...]

--study submits `replay-rl study` (each run a Ray Tune trial; every node needs `pip install 'replay-rl[study]'`)
instead of one run; the same command resumes a study whose job was stopped.

The config is validated here first (a bad one fails in one line before anything is sent). The repository is
uploaded as the job's working_dir, so every actor imports this checkout's replay_rl. Ray 2.60 has token auth on:
the token comes from RAY_AUTH_TOKEN or ~/.ray/auth_token (`ray get-auth-token` prints it on the head), and the CLI
only sends it with RAY_AUTH_MODE=token, which this script sets unless you set it yourself.
Secrets for the job: `--env NAME` (no value) takes NAME's value from this environment, so it never appears on a
command line (`ps`); the runtime env reaches `ray job submit` in a file readable by you only.
Metrics and checkpoints go to run.output_dir *on the node that runs the driver* (the head): give an absolute path
on a shared filesystem for multi-node runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from replay_rl.config import ConfigError, RunConfig  # noqa: E402
from replay_rl.models.hub import is_hub_id  # noqa: E402

AGENT_RETRIES = 60
# the `ray` command installed beside this interpreter (a venv's, even when not activated), else the one on PATH
RAY = str(Path(sys.executable).with_name("ray")) if Path(sys.executable).with_name("ray").exists() else "ray"
# benchmarks/results (about 30 MB of committed plots and tables) is nothing a job reads: it went to every node
# with each job
EXCLUDES = [".git", ".venv", "venv", "runs", "build", ".pytest_cache", "**/__pycache__", "*.egg-info",
            "benchmarks/results"]
ENV_MARKERS = ("pyvenv.cfg", "conda-meta")  # what makes a folder a virtual or conda environment


def package(submission_id: str, into: Path) -> Path:
    """This checkout, copied for one submission with a file naming it, so that every job gets a working_dir package
    of its own: Ray 2.60 reclaims a package when the jobs using it end, and a job submitted with the same package
    seconds later imported from the folder being deleted (ModuleNotFoundError: replay_rl.replay.shard, seen when
    a failed run's resume was submitted at once)."""
    copy = into / "checkout"
    shutil.copytree(ROOT, copy, symlinks=True, ignore=skipped)
    (copy / ".submission").write_text(submission_id + "\n")
    return copy


def skipped(folder: str, names: list[str]) -> set[str]:
    """What package() leaves out of `folder`: EXCLUDES, and a virtual environment under any name (.venv-gpu, env)."""
    patterns = [e.removeprefix("**/") for e in EXCLUDES]
    by_name = shutil.ignore_patterns(*(p for p in patterns if "/" not in p))(folder, names)
    by_path = {n for n in names if os.path.relpath(Path(folder, n), ROOT) in patterns}  # benchmarks/results
    return by_name | by_path | {n for n in names if any((Path(folder, n) / m).exists() for m in ENV_MARKERS)}


def runtime_env(pip: list[str], env: dict[str, str], working_dir: Path = ROOT) -> dict:
    out = {"working_dir": str(working_dir), "excludes": EXCLUDES,
           # the hub as the cluster's environment says; a hub id in model.path is fetched on the driver's node, and
           # every node reads that snapshot: HF_HOME on a filesystem all nodes share. Air-gapped: HF_HUB_OFFLINE=1
           "env_vars": {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TOKENIZERS_PARALLELISM": "false", **env}}
    if pip:
        out["pip"] = pip
    return out


def config_in_checkout(config: str) -> Path:
    """The config's path inside this checkout, which is uploaded with the job; one outside it is refused."""
    try:
        return Path(config).resolve().relative_to(ROOT)
    except ValueError:
        raise SystemExit(f"submit: --config {config} must live inside the repository (it is uploaded with it)")


def preset_for_job(study: str) -> str:
    """A packaged preset's name as is; a preset file of your own as its path in the uploaded checkout (one outside
    it, or in a folder the upload leaves out, is refused here rather than by the job once queued)."""
    from replay_rl.study.presets import PRESETS

    if study in PRESETS:
        return study
    try:
        inside = Path(study).resolve().relative_to(ROOT)
    except ValueError:
        raise SystemExit(f"submit: --study {study} must be a packaged preset or a file inside the repository "
                         "(it is uploaded with it)") from None
    if inside.parts[0] in {".git", ".venv", "runs"} or inside.as_posix().startswith("benchmarks/results"):
        raise SystemExit(f"submit: --study {study} lies in {inside.parts[0]}/, which the upload leaves out: move it")
    return inside.as_posix()


def job_env(items: list[str], environ: dict[str, str]) -> dict[str, str]:
    """--env items: NAME=VALUE, or NAME alone for NAME's value in this environment (kept off command lines)."""
    env = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not name.isidentifier():
            raise SystemExit(f"submit: --env {item!r}: expected NAME=VALUE, or NAME to pass this environment's value")
        if not sep and name not in environ:
            raise SystemExit(f"submit: --env {name}: {name} is not set here; export it first, or give "
                             f"--env {name}=VALUE")
        env[name] = value if sep else environ[name]
    return env


def build_command(args: argparse.Namespace, working_dir: Path, env: dict[str, str]) -> list[str]:
    """The `ray job submit` command. Its runtime env (with the job's env values) goes in a file beside the package,
    readable by its owner only: on the command line `ps` would show every value to every user of the host."""
    if args.study:
        entry = ["python", "-m", "replay_rl.cli", "study", "--preset", preset_for_job(args.study), "--out", args.out]
        entry += ["--max-concurrent", str(args.max_concurrent)] if args.max_concurrent else []
    else:
        entry = ["python", "-m", "replay_rl.cli", "train", "-c", str(config_in_checkout(args.config))]
    entry += [a for s in args.set for a in ("-s", s)]
    spec = working_dir.parent / "runtime_env.yaml"
    spec.touch(mode=0o600)
    spec.write_text(json.dumps(runtime_env(args.pip, env, working_dir)))  # JSON is YAML
    cmd = [RAY, "job", "submit", "--address", args.address, "--runtime-env", str(spec)]
    if args.submission_id:
        cmd += ["--submission-id", args.submission_id]
    if args.no_wait:
        cmd.append("--no-wait")
    return cmd + ["--"] + entry


RAY_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d[ T][\d:,.]+\s+(INFO|WARNING|DEBUG)\b")


def failure_reason(args: argparse.Namespace, proc: subprocess.CompletedProcess, env: dict) -> str:
    """The job's own last line (its driver prints one line on failure), from the job's full logs: the streamed
    output can end before the job's last lines arrive on a loaded head. Ray's INFO/WARNING lines are skipped."""
    logs = subprocess.run([RAY, "job", "logs", "--address", args.address, args.submission_id],
                          capture_output=True, text=True, env=env)
    for text in (logs.stdout if logs.returncode == 0 else "", proc.stdout + proc.stderr):
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not RAY_LOG_LINE.match(ln.strip())]
        if lines:
            return lines[-1]
    return f"exit code {proc.returncode}, no output"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--address", required=True, help="Ray dashboard address, e.g. http://127.0.0.1:8265")
    ap.add_argument("--config", "-c", help="YAML config inside this repository (a single run)")
    ap.add_argument("--study", metavar="PRESET", help="submit `replay-rl study --preset PRESET` instead of a run")
    ap.add_argument("--out", help="--study's folder: absolute, on a filesystem every node shares")
    ap.add_argument("--max-concurrent", type=int, help="--study: at most this many runs at once")
    ap.add_argument("--set", "-s", action="append", default=[], help="dotted override (repeatable)")
    ap.add_argument("--pip", action="append", default=[], help="extra pip requirement for the job (repeatable)")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the job, or NAME to pass this "
                    "environment's value without it showing on a command line (repeatable)")
    ap.add_argument("--submission-id", default=None)
    ap.add_argument("--no-wait", action="store_true", help="return once submitted")
    args = ap.parse_args(argv)
    env_vars = job_env(args.env, dict(os.environ))  # before anything else: a bad --env is one line
    args.submission_id = args.submission_id or f"replay-rl-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    if bool(args.config) == bool(args.study):
        ap.error("give --config (a run) or --study PRESET (a study)")
    try:
        cfg = study_specs(args) if args.study else RunConfig.load(args.config, args.set)
    except ConfigError as e:
        print(f"submit: {e}", file=sys.stderr)
        return 2
    model = (f"model.{cfg.model.start_field}", cfg.model.start_from)
    for field, value in (("run.output_dir", cfg.run.output_dir), model):
        if not Path(value).is_absolute() and not (field == "model.path" and is_hub_id(value)):
            # the job's cwd is Ray's unpacked copy, a new folder per upload
            print(f"submit: warning: {field}={value} is relative, so it lands in Ray's unpacked copy of this "
                  f"checkout on the head; pass -s {field}=/absolute/path to keep it", file=sys.stderr)
    # the CLI sends the token only in token mode; it reads RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token
    env = {"RAY_AUTH_MODE": "token", **os.environ}
    if args.config:
        config_in_checkout(args.config)  # checked before anything is copied
    with tempfile.TemporaryDirectory(prefix="replay-rl-submit-") as tmp:
        command = build_command(args, package(args.submission_id, Path(tmp)), env_vars)
        for attempt in range(AGENT_RETRIES):
            proc = subprocess.run(command, capture_output=True, text=True, env=env)
            # a freshly started head answers before its job agent is up; Ray says to try again later
            if "No available agent to submit job" not in proc.stdout + proc.stderr:
                break
            time.sleep(2)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        # surface the one line that says why (the job's own error, or the CLI's), not a wall of log
        print(f"submit: job failed: {failure_reason(args, proc, env)}", file=sys.stderr)
        return 1
    return 0


def study_specs(args: argparse.Namespace) -> RunConfig:
    """--study's runs, built here as the study builds them (a bad preset or override fails now, in one line); the
    first run's config, whose folders the warnings check. --out is the study's folder."""
    from replay_rl.study.main import plans_of, study_args

    args.out = args.out or "runs/bench/compute_saved"
    study = study_args(preset=args.study, out=args.out, set_=args.set)
    first = next(iter(plans_of(study, Path(args.out)).values()))[2][0][2]
    return first.model_copy(update={"run": first.run.model_copy(update={"output_dir": args.out})})


if __name__ == "__main__":
    sys.exit(main())
