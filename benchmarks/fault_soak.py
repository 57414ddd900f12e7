"""Random fault soak (issue 28, item 6): N trials of a short run of the default config (configs/tiny_cpu.yaml), each
with one fault of one role at a random step, on the local runtime or (--cluster) on a 3-node loopback cluster
through `ray job submit` (cluster/loopback.py: a head for the generators, two learner nodes).

Roles: generator, replay shard, learner rank, weight board (the generators' or the evaluator's), generator reports,
evaluator, and with --cluster a learner node (a lost node: a replacement is started at once, the run waits
run.node_wait_s for it). Faults: SIGKILL; SIGSTOP held past every bound (fault_trials.HOLD_S), then SIGCONT;
the same SIGSTOP as a checkpoint is staged (checkpoints/.step_N.partial exists) or as learner rank 0 publishes
(its title reads ray::LearnerRankImpl.publish). A third of the trials run replay.type=lifo_once.

A trial passes when the run finishes, or stops in one line and run.resume_from=auto finishes it, and then shows
every step once, K_inf within the pace's budget, no consume-once rollout trained twice and final_model its own
(fault_trials.check_run). Writes results.json and summary.md (date, commit, command, the table) to --out.

    python benchmarks/fault_soak.py --trials 30 [--seed 0] [--cluster] [--resume /tmp/fault_soak-XXXX]
    python benchmarks/fault_soak.py --plan stratified --per-cell 2   # v2: 68 trials, every cell twice
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from fault_plan import plan_v2
from fault_trials import BOUNDS, FAULTS, ROLES, Outcome, Trial, run_trial, titled, tree

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "cluster"))
from loopback import PLACED, bring_up, replace_node, stop_nodes, submit_command  # noqa: E402

STEPS = 24
CHECKPOINT_EVERY = 4


def run_settings(steps: int = STEPS, checkpoint_every: int = CHECKPOINT_EVERY) -> list[str]:
    """The default config, shortened: a live snapshot every 2 steps, two restarts, evals beside training (so the
    evaluator is busy when faulted), every phase bounded in seconds (fault_trials.BOUNDS)."""
    return [f"run.steps={steps}", f"run.checkpoint_every={checkpoint_every}", "replay.snapshot_every_steps=2",
            "run.max_restarts=2", f"run.eval_every={2 * checkpoint_every}", "run.eval_prompts=20",
            *(f"{k}={v}" for k, v in BOUNDS.items())]


def plan(seed: int, trials: int, cluster: bool, steps: int = STEPS) -> list[Trial]:
    """The trials' random choices, all drawn from one seed: the same seed plans the same soak."""
    rng = random.Random(seed)
    roles = [*ROLES, "node"] if cluster else list(ROLES)
    return [Trial(i, rng.choice(roles), rng.choice(FAULTS), rng.randint(2, steps - 6),
                  rng.choice(("fifo", "fifo", "lifo_once")), rng.randrange(2)) for i in range(trials)]


def with_settings(settings: list[str]) -> list[str]:
    return [arg for s in settings for arg in ("-s", s)]


class Local:
    """Each run is `replay-rl train` in a process of its own, which starts its own Ray: the roles are its tree."""

    failed_prefix = "run failed: "

    def __init__(self, model: str) -> None:
        self.model, self.driver = model, None

    def launch(self, settings: list[str], log: Path):
        cmd = [str(Path(sys.executable).parent / "replay-rl"), "train",
               *with_settings([*settings, f"model.path={self.model}"])]
        with open(log, "w") as f:
            self.driver = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
        return self.driver, log

    def targets(self, trial: Trial):
        procs = tree([self.driver.pid])
        return titled(procs, ROLES.get(trial.role, "")), titled(procs, "LearnerRankImpl")

    def roots(self) -> list[int]:
        return [self.driver.pid]

    def after_fault(self, trial: Trial) -> None:
        pass


class Loopback:
    """Runs go through cluster/submit.py to the loopback cluster; the roles are the tree of its nodes."""

    failed_prefix = "submit: job failed: "

    def __init__(self, model: str, logs: Path) -> None:
        self.model, self.cluster, self.joined = model, bring_up(logs), 0

    def launch(self, settings: list[str], log: Path):
        self.keep_two_learner_nodes()
        args = with_settings([*settings, f"model.path={self.model}", "run.node_wait_s=180"])
        with open(log, "w") as f:
            proc = subprocess.Popen(submit_command(self.cluster.address, "-c", "configs/tiny_cpu.yaml", *args, *PLACED),
                                    stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
        return proc, log

    def roots(self) -> list[int]:
        return []  # the nodes outlive each run: what is left of one is not told apart from the cluster's own

    def workers(self) -> list:
        return [n for n in self.cluster.nodes[1:] if n.poll() is None]

    def targets(self, trial: Trial):
        procs = tree([n.pid for n in self.cluster.nodes])
        ranks = titled(procs, "LearnerRankImpl")
        if trial.role == "node":  # a learner node: its `ray start` and everything below it
            return [tree([n.pid]) for n in self.workers()], ranks
        return titled(procs, ROLES[trial.role]), ranks

    def after_fault(self, trial: Trial) -> None:
        if trial.role == "node":  # a replacement host, which the run waits run.node_wait_s for
            self.joined += 1
            replace_node(self.cluster, f"replacement{self.joined}", learner_nodes=2)

    def keep_two_learner_nodes(self) -> None:
        self.cluster.nodes[1:] = self.workers()  # a node lost in an earlier trial is gone for good
        while len(self.workers()) < 2:
            self.joined += 1
            replace_node(self.cluster, f"replacement{self.joined}", learner_nodes=2)

    def close(self) -> None:
        stop_nodes(self.cluster.nodes)


def soak(trials: list[Trial], runtime, workdir: Path, overrides: list[str], echo=print) -> list:
    """Each trial once: a trial whose outcome.json is in its folder (a soak resumed with --resume) is read back, not
    run again, so a soak longer than one sitting on a small box adds up across sittings."""
    outcomes = []
    for trial in trials:
        folder = workdir / f"trial_{trial.index:02d}"
        kept = kept_outcome(folder / "outcome.json", trial)
        if not kept and folder.exists():  # cut off by the end of an earlier sitting: it starts over
            shutil.rmtree(folder)
        outcome = kept or run_trial(trial, folder, overrides, runtime)
        if not kept:
            folder.mkdir(parents=True, exist_ok=True)  # a run refused before it made its folder has none
            (folder / "outcome.json").write_text(json.dumps(asdict(outcome)))
        echo(f"trial {trial.index}: {trial.role} {trial.fault} at step {trial.step} ({trial.replay}): "
             f"{'pass' if outcome.passed else 'FAIL'} ({outcome.path}, {outcome.wall_s:.0f}s"
             f"{', from an earlier sitting' if kept else ''}) {outcome.problems}")
        outcomes.append(outcome)
    return outcomes


def kept_outcome(path: Path, trial: Trial) -> Outcome | None:
    if not path.is_file():
        return None
    got = json.loads(path.read_text())
    if Trial(**got.pop("trial")) != trial:  # another plan's folder: --resume checks plan.json first
        raise SystemExit(f"fault_soak: {path} holds another trial than the plan's {trial}")
    return Outcome(trial, **got)


def table(outcomes: list) -> list[dict]:
    """Faults tried and survived, per role and fault, and how the passing trials got through."""
    tried = Counter((o.trial.role, o.trial.fault) for o in outcomes)
    passed = Counter((o.trial.role, o.trial.fault) for o in outcomes if o.passed)
    by = {cell: Counter(recovered_by(o) for o in outcomes if o.passed and (o.trial.role, o.trial.fault) == cell)
          for cell in tried}
    return [{"role": r, "fault": f, "tried": n, "survived": passed[r, f],
             "by": ", ".join(f"{how} {k}" for how, k in sorted(by[r, f].items()))}
            for (r, f), n in sorted(tried.items())]


def recovered_by(o: Outcome) -> str:
    """resume: stopped in one line (or its driver killed) and finished by run.resume_from=auto; restart: every role
    restarted from the newest checkpoint inside the run; in place: the faulted role alone replaced or restored; no
    line: the run absorbed the fault without a word (a paused reports actor, a fault landing as the run ended)."""
    if o.path == "resumed":
        return "resume"
    if any(line.startswith("restart ") for line in o.lines):
        return "restart"
    return "in place" if o.lines else "no line"


def markdown(outcomes: list, head: dict) -> str:
    rows = table(outcomes)
    lines = [f"# Fault soak ({'3-node loopback cluster' if head['cluster'] else 'local runtime'})", "",
             f"- date: {head['date']}", f"- commit: {head['commit']}", f"- command: `{head['command']}`",
             f"- {sum(o.passed for o in outcomes)} of {len(outcomes)} trials passed, "
             f"{sum(o.wall_s for o in outcomes) / 60:.1f} min of trials ({head['wall_s'] / 60:.1f} min this sitting)",
             "", "| role | fault | tried | survived | survived by |", "|---|---|---|---|---|"]
    lines += [f"| {r['role']} | {r['fault']} | {r['tried']} | {r['survived']} | {r['by']} |" for r in rows]
    lines += ["", "| trial | role | fault | step | replay | landed | window | outcome | time | problems / last line |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        t, note = o.trial, "; ".join(o.problems) or (o.lines[-1] if o.lines else "")
        lines.append(f"| {t.index} | {t.role} | {t.fault} | {t.step} | {t.replay} | {o.landed_at} | {o.window} | "
                     f"{'pass' if o.passed else 'FAIL'}: {o.path} | {o.wall_s:.0f}s | {note.replace('|', '/')[:300]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", choices=("random", "stratified"), default="random",
                    help="random: --trials faults drawn from --seed (v1); stratified: every role x fault cell "
                         "--per-cell times and the special faults (fault_plan.py, v2); --trials is then ignored")
    ap.add_argument("--per-cell", type=int, default=2)
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cluster", action="store_true", help="on the 3-node loopback cluster, through ray job submit")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()), help="where the trials' runs go")
    ap.add_argument("--resume", type=Path, help="a soak folder (fault_soak-*) of an earlier sitting with the same "
                    "--trials, --seed and --cluster: its finished trials are kept, the rest run")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "fault_soak")
    args = ap.parse_args(argv)
    from replay_rl.config import RunConfig
    from replay_rl.evaluation.warmstart import ensure_model

    asked = {"trials": args.trials, "seed": args.seed, "cluster": args.cluster} | (
        {"plan": "stratified", "per_cell": args.per_cell} if args.plan == "stratified" else {})
    planned = args.resume / "plan.json" if args.resume else None
    if planned and (not planned.is_file() or json.loads(planned.read_text()) != asked):
        ap.error(f"--resume {args.resume}: not a soak folder planned with {asked} (its plan.json); pass the same "
                 "--trials, --seed and --cluster, or start a new soak without --resume")
    os.chdir(ROOT)  # the default config's model.build_dir is relative to the checkout
    model = str(ensure_model(RunConfig.load(None, [])).resolve())  # built once here rather than in trial 0
    workdir = args.resume or Path(tempfile.mkdtemp(prefix="fault_soak-", dir=args.workdir))
    (workdir / "plan.json").write_text(json.dumps(asked))
    t0, trials = time.monotonic(), (plan(args.seed, args.trials, args.cluster) if args.plan == "random" else
                                    plan_v2(args.seed, args.per_cell, STEPS, CHECKPOINT_EVERY))
    runtime = Loopback(model, workdir) if args.cluster else Local(model)
    try:
        outcomes = soak(trials, runtime, workdir, run_settings())
    finally:
        if args.cluster:
            runtime.close()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    head = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit.strip(),
            "command": "python benchmarks/fault_soak.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "cluster": args.cluster, "seed": args.seed, "wall_s": round(time.monotonic() - t0), "runs": str(workdir)}
    args.out.mkdir(parents=True, exist_ok=True)
    results = head | {"table": table(outcomes), "trials": [asdict(o) for o in outcomes]}
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "summary.md").write_text(markdown(outcomes, head))
    print(json.dumps(results["table"], indent=1))
    print(markdown(outcomes, head))
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
