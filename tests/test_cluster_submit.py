"""`ray job submit` for real: a head and two worker nodes on loopback (token auth on, as Ray 2.60 defaults), the
tiny config, placement by the nodes' custom resources, and nodes lost mid-run (the generators' node, a learner node)."""

import contextlib
import json
import os
import pickle
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from replay_rl.config import RunConfig
from replay_rl.config.model import ModelConfig
from replay_rl.metrics import read_metrics
from replay_rl.replay.budget_check import k_inf_past_budget
from tests.runs import Planted

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "cluster"))
from loopback import (PATH, PLACED, Cluster, NodeDown, bring_up, kill_node, offered, replace_node,  # noqa: E402
                      start_node, stop_nodes, submit_command, wait_for)

# one worker runs the whole module (-n 2 --dist loadfile): its module-scoped 3-node cluster is brought up once,
# and never beside another (two loopback clusters at once crossed jobs between them: a node of one asked its own
# GCS for the other's working_dir package)
pytestmark = [pytest.mark.slow, pytest.mark.ray]
# a role's death names what it was doing when the node went, when it was inside a supervised call
DIED_ON = r"died (during [^\n]+? )?on node"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A simulated 3-node cluster: a run placed by the nodes' resources has its learner ranks on two nodes and its
    generators on a third. A bring-up that fails (Ray's own start-up, not our code) is tried once more."""
    for attempt in (1, 2):
        try:
            up = bring_up(tmp_path_factory.mktemp(f"nodes{attempt}"))
            break
        except NodeDown as e:
            if attempt == 2:
                pytest.fail(f"the test cluster did not come up, twice; the second time: {e}")
            print(f"the test cluster did not come up ({e}); trying once more", file=sys.stderr)
    yield up
    stop_nodes(up.nodes)


@pytest.fixture(scope="module")
def head(cluster):
    return cluster.address


def submit(address, *args):
    return subprocess.run(submit_command(address, *args), capture_output=True, text=True, timeout=900)


def test_bad_submissions_fail_with_one_clear_line(head, warm_model, tmp_path):
    missing = submit(head, "-c", "configs/does_not_exist.yaml")
    assert missing.returncode == 2 and missing.stderr.strip().startswith("submit: config file") \
        and len(missing.stderr.strip().splitlines()) == 1
    too_big = submit(head, "-c", "configs/tiny_cpu.yaml", "-s", f"model.path={warm_model[0]}", "-s",
                     f"run.output_dir={tmp_path / 'big'}", "-s", "cluster.generators=10", "-s", "cluster.cpus_per_actor=0.5")
    assert too_big.returncode == 1
    assert too_big.stderr.strip() == ("submit: job failed: cluster too small for W=10, T=2: needs 0 GPUs "
                                      "and 6.5 CPUs, the Ray cluster has 0 GPUs and 4 CPUs; lower cluster.generators / "
                                      "cluster.learners or add nodes")
    # a study whose trials cannot all be placed is refused before any trial starts
    study = submit(head, "--study", "mini", "--out", str(tmp_path / "study"), "-s", f"model.path={warm_model[0]}",
                   *PLACED, "-s", "cluster.learners=4")
    assert study.returncode == 1
    assert study.stderr.strip() == ("submit: job failed: cluster.learner_resources: 4 × learner_node=1 but the Ray "
                                    "cluster offers 2 learner_node; start nodes with `ray start --resources="
                                    "'{\"learner_node\": N}'` or change cluster.learner_resources")


def readme_stock_submit_line() -> str:
    """The README's stock `ray job submit` command, as written (continuation lines joined)."""
    text = (ROOT / "README.md").read_text()
    block = text.split("**Stock `ray job submit`**", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    lines = block.replace("\\\n", " ").splitlines()
    (line,) = [ln for ln in lines if "ray job submit" in ln]
    return line


def test_the_readme_stock_ray_job_submit_line_works_as_written(head, warm_model, tmp_path):
    # the README's line verbatim, but for the head's address (ours runs on free ports, beside the test session's
    # own cluster), $PWD (a scratch checkout holding the warm model) and a run cut to 5 steps
    line = readme_stock_submit_line().replace("http://127.0.0.1:8265", head)
    assert line.startswith("RAY_AUTH_MODE=token RAY_AUTH_TOKEN=$(ray get-auth-token) ray job submit")
    workdir = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(workdir)], check=True)
    (workdir / "runs" / "models").mkdir(parents=True)
    # the README's line names the default model folder: the session's warm model (same settings) stands in for it
    (workdir / ModelConfig().build_dir).symlink_to(Path(warm_model[0]).resolve())
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS")}
    env["PATH"] = PATH
    # placed as a GPU cluster keeps inference and training apart: by the nodes' custom resources
    placed = "".join(f" -s '{value}'" for value in PLACED[1::2])
    proc = subprocess.run(["bash", "-c", line + " -s run.steps=5 -s run.eval_every=5 -s run.eval_prompts=20" + placed],
                          cwd=workdir, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0 and "succeeded" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = workdir / "runs" / "stock"
    rows = read_metrics(out / "metrics.jsonl", "train")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert read_metrics(out / "metrics.jsonl", "eval")[0]["ledger/mu"] > 0
    assert (out / "final_model" / "config.json").is_file()
    where = json.loads((out / "placement.json").read_text())
    generators = [v for k, v in where.items() if k.startswith("generator")]
    ranks = [v for k, v in where.items() if k.startswith("learner rank")]
    assert len(generators) == 2 and all("generator_node" in g["node_resources"] for g in generators), where
    assert len(ranks) == 2 and all("learner_node" in r["node_resources"] for r in ranks), where
    # the learner group's rendezvous spans two nodes, and weights crossed from them to the generators' node
    assert len({r["node_id"] for r in ranks}) == 2 and not {r["node_id"] for r in ranks} & {g["node_id"] for g in generators}
    # (5 steps: on a loaded box a 3-step run once ended with every generator still on version 0)
    assert rows[-1]["ledger/generator_version_min"] >= 1, rows[-1]
    # the job API refuses a caller without the token, or with another (the templates' auth was only read before)
    with pytest.raises(urllib.error.HTTPError) as bare:
        urllib.request.urlopen(f"{head}/api/jobs/", timeout=60)
    assert bare.value.code in (401, 403)
    wrong = subprocess.run(["ray", "job", "list", "--address", head], capture_output=True, text=True, timeout=120,
                           env=env | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64})
    assert wrong.returncode != 0, wrong.stdout[-1000:]


def study_folders(out: Path) -> dict[str, Path]:
    """The mini study's run folders that have started, by row/lr."""
    return {f"{f.parent.parent.name}/{f.parent.name}": f for f in sorted(out.glob("arithmetic/*/lr*/seed0"))
            if (f / "metrics.jsonl").is_file()}


def test_a_mini_study_runs_two_trials_at_once_and_resumes_after_its_driver_is_killed(head, warm_model, tmp_path):
    # two trials fit at once on this cluster: each reserves a learner_node, and the cluster offers two
    out, model = tmp_path / "study", warm_model[0]
    line = submit_command(head, "--study", "mini", "--out", str(out), "-s", f"model.path={model}", *PLACED,
                          "-s", "run.stall_timeout_s=300")  # the box is loaded: two runs share its 2 cores
    t0 = time.monotonic()
    job = subprocess.Popen(line, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ended = lambda: [n for n, f in study_folders(out).items() if (f / "replay_stats.json").is_file()]  # noqa: E731
    # the driver is killed as the second run finishes (a mini run trains its steps in about a second): the resumed
    # sitting then runs the other two side by side, one round instead of two
    try:
        while len(ended()) < 2 and job.poll() is None and time.monotonic() - t0 < 600:
            time.sleep(0.1)
        assert len(ended()) >= 2, job.communicate(timeout=60)[0][-3000:]
        os.kill(json.loads((out / "_tune" / "driver.json").read_text())["pid"], 9)
        first = job.communicate(timeout=120)[0]
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 1, first[-3000:]
    kept = {n: ((f / "run.json").read_text(), (f / "metrics.jsonl").read_text())
            for n, f in study_folders(out).items() if n in ended()}
    assert len(kept) < 4, kept  # killed mid-phase
    # Tune's pickled experiment state in --out is never loaded (a planted one would run code): the resume reads the
    # run folders; the old resume unpickled _tune/base/tuner.pkl
    marker = tmp_path / "unpickled"
    for pkl in [out / "_tune" / "base" / "tuner.pkl", *(out / "_tune").rglob("tuner.pkl")]:
        pkl.write_bytes(pickle.dumps(Planted(marker)))
    again = subprocess.run(line, capture_output=True, text=True, timeout=900)
    assert not marker.exists()
    print(f"mini study on loopback, killed with {len(kept)} runs finished and resumed: "
          f"{(time.monotonic() - t0) / 60:.1f} min", file=sys.stderr)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
    assert f"resumed the base phase of {out}: {len(kept)} runs kept, {4 - len(kept)} to run again" in again.stdout
    assert "extended from step 12)" in again.stdout and "extended from step 28)" in again.stdout
    folders = study_folders(out)
    for name, (run_id, rows) in kept.items():  # the finished runs were kept as they were, or extended past their end
        assert (folders[name] / "run.json").read_text() == run_id
        assert (folders[name] / "metrics.jsonl").read_text().startswith(rows)
    for name, f in folders.items():
        rows = read_metrics(f / "metrics.jsonl", "train")
        assert [r["step"] for r in rows] == list(range(1, rows[-1]["step"] + 1)), name  # each step once
        # every role in its trial's reservation: the generator on the head, the learner rank on a worker
        where = json.loads((f / "placement.json").read_text())
        assert len({p["placement_group"] for p in where.values()} - {None}) == 1, where
        assert "generator_node" in where["generator 0"]["node_resources"], where
        assert "learner_node" in where["learner rank 0"]["node_resources"], where
    # two trials ran at the same time (each reports once, as its run ends), in reservations of their own
    for phase in ("base", "extend"):
        # one Tune experiment per sitting; a trial the killed sitting was running left its result.json empty
        results = (out / "_tune" / phase).glob("sitting_*/*/result.json")
        ends = [json.loads(lines[-1]) for r in results if (lines := r.read_text().splitlines())]
        spans = [(r["timestamp"] - r["time_total_s"], r["timestamp"]) for r in ends]
        assert any(a[0] + 1 < b[1] and b[0] + 1 < a[1] for i, a in enumerate(spans) for b in spans[i + 1:]), spans
    ids = [json.loads((f / "placement.json").read_text())["generator 0"]["placement_group"] for f in folders.values()]
    assert len(set(ids)) == len(ids)
    from tests.study.mini import check_mini_study, check_report_only

    check_report_only(out, check_mini_study(out), tmp_path, model)


def loss_settings(out: Path, steps: int, every: int, node_wait_s: int, model: str, placed: list[str]) -> list[str]:
    """A run placed by node resources (`placed`), checkpointing every `every` steps and allowed one restart."""
    return [f"model.path={model}", f"run.output_dir={out}", f"run.steps={steps}", f"run.eval_every={steps}",
            "run.eval_prompts=20", f"run.checkpoint_every={every}", "run.max_restarts=1",
            f"run.node_wait_s={node_wait_s}", *placed]


@contextlib.contextmanager
def node_loss_job(cluster: Cluster, out: Path, settings: list[str]):
    """The run of `settings`, submitted, writing to `out`; yields it and a reader of its train rows, and stops it if
    the test ends first."""
    job = subprocess.Popen(submit_command(cluster.address, "-c", "configs/tiny_cpu.yaml",
                                          *[a for kv in settings for a in ("-s", kv)]),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = out / "metrics.jsonl"
    try:
        yield job, lambda: read_metrics(metrics, "train") if metrics.is_file() else []
    finally:
        if job.poll() is None:
            job.kill()


def wait_for_rows(job: subprocess.Popen, trained, done, what: str) -> list[dict]:
    """The train rows once done(rows) holds; fails with the job's output if it ends or 600 s pass first."""
    end = time.monotonic() + 600
    while not done(trained()) and job.poll() is None and time.monotonic() < end:
        time.sleep(0.2)
    rows = trained()
    assert done(rows), f"{what}: " + job.communicate(timeout=60)[0][-3000:]
    return rows


def wait_for_step(job: subprocess.Popen, trained, step: int) -> list[dict]:
    return wait_for_rows(job, trained, lambda rows: len(rows) >= step, f"step {step}")


def spot_node(cluster: Cluster, name: str):
    """A spot host offering spot_generator (the generators' place, below), joined to the head."""
    return start_node(cluster.logs / f"{name}.log", f"--address=127.0.0.1:{cluster.gcs}", "--num-cpus=1",
                      '--resources={"spot_generator": 2}')


def test_losing_a_learner_node_stops_or_resumes_and_losing_the_generators_node_replaces_them(cluster, warm_model,
                                                                                             tmp_path):
    # last in this module: it takes worker nodes away (a preempted host: its `ray start` and everything under it,
    # killed at once) and leaves the replacements it starts in the cluster
    steps, every, model = 14, 4, warm_model[0]
    # 1. no replacement comes within run.node_wait_s: one line naming the lost node and the resume command. The
    # wait must outlast the loopback cluster's node-death detection (~5 s, loopback.HEALTH_CHECK), or the restart
    # line cannot say the node left
    out = tmp_path / "no_replacement"
    with node_loss_job(cluster, out, loss_settings(out, steps, every, 10, model, PLACED[1::2])) as (job, trained):
        wait_for_step(job, trained, 2)
        kill_node(cluster.nodes[2])
        log, _ = job.communicate(timeout=600)
    assert job.returncode == 1 and "Traceback" not in log, log[-3000:]
    assert re.search(rf"restart 1 of 1: learner rank \d {DIED_ON} [\d.]+ \(id \w+, offering learner_node=1\), "
                     r"which left the cluster; every role restarts from step 0", log), log[-3000:]
    (last,) = [ln for ln in log.splitlines() if ln.startswith("submit: job failed: ")]
    assert "left the cluster" in last and "learner_node=1" in last and "run.node_wait_s" in last, last
    assert f"resume with run.resume_from=auto (newest checkpoint in {out})" in last, last
    # 2. the generators on a spot host of their own (spot_generator), the learner ranks on the two worker nodes.
    # The spot host is lost at once after step 2: each generator's death names that node, the driver waits
    # (run.node_wait_s) for a node to run the replacements and goes on without restarting the other roles. Then a
    # learner node is lost, and a replacement joins: the run resumes from the newest checkpoint before that kill
    replace_node(cluster, "replacement1")
    out, spots = tmp_path / "replaced", [spot_node(cluster, "spot1")]
    settings = loss_settings(out, steps, every, 300, model, ["cluster.generator_resources={spot_generator: 1}",
                                                             "cluster.learner_resources={learner_node: 1}"])
    try:
        wait_for(lambda: offered(cluster, "spot_generator") >= 2, spots, [cluster.logs / "spot1.log"], "spot1 joining")
        started = time.monotonic()
        with node_loss_job(cluster, out, settings) as (job, trained):
            wait_for_step(job, trained, 2)
            kill_node(spots[0])
            spots.append(spot_node(cluster, "spot2"))  # a replacement host, joining while the driver waits
            # the learner node is lost once both generators' replacements show in the ledger
            at_kill = wait_for_rows(job, trained, lambda rows: len(rows) >= every + 2 and
                                    rows[-1]["ledger/generator_restarts"] >= 2, "both generators replaced")
            kill_node(cluster.nodes[1])  # worker 1: it holds the other learner rank
            killed_at = time.time()
            replace_node(cluster, "replacement2")
            log, _ = job.communicate(timeout=900)
    finally:
        stop_nodes(spots)
    assert job.returncode == 0 and "Traceback" not in log.split("restart 1 of 1")[0], log[-3000:]
    for i in (0, 1):
        assert re.search(rf"generator {i} {DIED_ON} [\d.]+ \(id \w+, offering spot_generator=2\), which left the "
                         rf"cluster: replaced on node [\d.]+ \(id \w+, offering spot_generator=2\) after \d+s "
                         rf"\(restart [12] of 3\)", log), log[-3000:]
    assert re.search(rf"restart 1 of 1: learner rank \d {DIED_ON} .*learner_node=1.*left the cluster", log), log
    assert log.count("every role restarts from") == 1, log[-3000:]  # the generators' loss restarted no other role
    rows = read_metrics(out / "metrics.jsonl", "train")
    assert [r["step"] for r in rows] == list(range(1, steps + 1))  # continuous: each step once
    # the generators' two restarts, read as the learner node was lost: the restart of every role starts that count
    # anew, and the resumed run's metrics keep only the rows up to its checkpoint
    assert at_kill[-1]["ledger/generator_restarts"] == 2 and rows[-1]["ledger/k_train"] == steps * 128, at_kill[-1]
    before = [r for r in rows if r["time"] <= killed_at]
    waits = [ln for ln in log.splitlines() if "replaced on node" in ln]
    print(f"generator node loss: {waits}", file=sys.stderr)
    resumed = [r for r in rows if r["time"] > killed_at]
    checkpoint = resumed[0]["step"] - 1
    last_done = max(r["step"] for r in before)
    # the newest complete checkpoint at the kill (one being written at that moment does not count)
    assert checkpoint in {last_done // every * every, (last_done - 1) // every * every}, (checkpoint, last_done)
    print(f"node loss: {resumed[0]['time'] - killed_at:.1f} s from the kill to step {resumed[0]['step']}, "
          f"the first after resuming from step {checkpoint}; {time.monotonic() - started:.0f}s for the run",
          file=sys.stderr)
    # K_inf within the pace's budget (Pace.budget), across the generators' replacement and the resume
    cfg = RunConfig.load(str(ROOT / "configs/tiny_cpu.yaml"), settings)
    assert not k_inf_past_budget(cfg.pace_setting, rows), [(r["step"], r["ledger/k_inf"]) for r in rows]
    # K_inf after a resume: no generator can make more than the pace's budget, B + s·R rollouts by version s (plus
    # the call it is in), so the count's offset from s·R stays ≤ B + one call (32) unless something is counted twice.
    # Resumed generators once counted on from the ledger's K_inf, read before the checkpoint was written, and made
    # again what had been inserted meanwhile: 164..219 after the resume in 3 of 4 runs (Checkpointer.resume)
    r, per_call = 128 * (5 / 3) / 5.28, 32
    offset = {row["step"]: row["ledger/k_inf"] - row["step"] * r for row in rows}
    assert all(offset[s] <= 128 + per_call for s in range(1, steps + 1)), offset
    after = [offset[s] for s in range(checkpoint + 1, steps + 1)]
    print(f"node loss: K_inf − s·R after the resume {min(after):.0f}..{max(after):.0f} (budget {128 + per_call})",
          file=sys.stderr)
