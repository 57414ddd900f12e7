"""`ray job submit` for real: a head and two worker nodes on loopback (token auth on, as Ray 2.60 defaults), the
tiny config, and placement by the nodes' custom resources."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replay_rl.metrics import read_metrics

ROOT = Path(__file__).parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.ray]
# the `ray` command of this interpreter's environment, also when that environment is not activated
PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_node(*args: str) -> subprocess.Popen:
    """One `ray start --block` on loopback, every port its own (several nodes share this box), in its own process
    group: stopping it stops only that node."""
    agent, agent_grpc, runtime_env, metrics = (free_port() for _ in range(4))
    return subprocess.Popen(["ray", "start", "--block", f"--dashboard-agent-listen-port={agent}",
                             f"--dashboard-agent-grpc-port={agent_grpc}", f"--runtime-env-agent-port={runtime_env}",
                             f"--metrics-export-port={metrics}", "--node-ip-address=127.0.0.1",
                             "--disable-usage-stats", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "PATH": PATH, "RAY_AUTH_MODE": "token"})  # workers need the token


def stop_nodes(nodes: list[subprocess.Popen], grace_s: float = 5) -> None:
    """SIGTERM, then SIGKILL to each node's process group after grace_s: `ray start --block` took 33 s to stop a
    head gracefully here, and every process a node starts (GCS, raylet, dashboard, agents) is in its group."""
    for group in (nodes[1:], nodes[:1]):  # the workers together, then the head
        for node in group:
            os.killpg(node.pid, signal.SIGTERM)
        for node in group:
            try:
                node.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait(timeout=60)


@pytest.fixture(scope="module")
def head():
    """A simulated 3-node cluster: the head offers generator_node, two workers offer one learner_node each, so a
    run placed by those resources has its learner ranks on two nodes and its generators on a third."""
    gcs, dash, client = (free_port() for _ in range(3))
    # every port is chosen here so the nodes never collide with each other or with the test session's own cluster
    nodes = [start_node("--head", f"--port={gcs}", f"--dashboard-port={dash}", f"--ray-client-server-port={client}",
                        "--dashboard-host=127.0.0.1", "--num-cpus=2", "--include-dashboard=true",
                        '--resources={"generator_node": 2}')]
    address = f"http://127.0.0.1:{dash}"
    env = {**os.environ, "RAY_AUTH_MODE": "token", "PATH": PATH}
    for _ in range(60):
        if subprocess.run(["ray", "job", "list", "--address", address], capture_output=True, env=env).returncode == 0:
            break
        time.sleep(1)
    else:
        stop_nodes(nodes)
        pytest.fail("local Ray head did not come up")
    for joined in (2, 3):  # one at a time: two nodes registering at once timed out here
        nodes.append(start_node(f"--address=127.0.0.1:{gcs}", "--num-cpus=1", '--resources={"learner_node": 1}'))
        for _ in range(90):
            status = subprocess.run(["ray", "status", f"--address=127.0.0.1:{gcs}"], capture_output=True, text=True,
                                    env=env).stdout
            if status.count(" node_") >= joined:
                break
            time.sleep(1)
        else:
            stop_nodes(nodes)
            pytest.fail(f"worker node {joined - 1} did not join the head: {status[-500:]}")
    yield address
    stop_nodes(nodes)


def submit(address, *args):
    return subprocess.run([sys.executable, str(ROOT / "cluster" / "submit.py"), "--address", address, *args],
                          capture_output=True, text=True, timeout=900)


def test_tiny_job_runs_to_completion_and_writes_metrics(head, warm_model, tmp_path):
    out = tmp_path / "job"
    proc = submit(head, "-c", "configs/tiny_cpu.yaml", "-s", f"model.path={warm_model[0]}", "-s",
                  f"run.output_dir={out}", "-s", "run.steps=3", "-s", "run.eval_every=3", "-s", "run.eval_prompts=20")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "succeeded" in proc.stdout
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl", "train")] == [1, 2, 3]
    assert read_metrics(out / "metrics.jsonl", "eval")[0]["ledger/mu"] > 0


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


def readme_stock_submit_line() -> str:
    """The README's stock `ray job submit` command, as written (continuation lines joined)."""
    text = (ROOT / "README.md").read_text()
    block = text.split("**Stock `ray job submit`**", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    lines = block.replace("\\\n", " ").splitlines()
    (line,) = [ln for ln in lines if "ray job submit" in ln]
    return line


def test_the_readme_stock_ray_job_submit_line_works_as_written(head, warm_model, tmp_path):
    # the README's line verbatim, but for the head's address (ours runs on free ports, beside the test session's
    # own cluster), $PWD (a scratch checkout holding the warm model) and a run cut to 3 steps
    line = readme_stock_submit_line().replace("http://127.0.0.1:8265", head)
    assert line.startswith("RAY_AUTH_MODE=token RAY_AUTH_TOKEN=$(ray get-auth-token) ray job submit")
    workdir = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(workdir)], check=True)
    (workdir / "runs" / "models").mkdir(parents=True)
    (workdir / "runs" / "models" / "arith2-warm").symlink_to(Path(warm_model[0]).resolve())
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS")}
    env["PATH"] = PATH
    # placed as a GPU cluster keeps inference and training apart: by the nodes' custom resources
    placed = " -s 'cluster.generator_resources={generator_node: 1}' -s 'cluster.learner_resources={learner_node: 1}'"
    proc = subprocess.run(["bash", "-c", line + " -s run.steps=3 -s run.eval_every=3 -s run.eval_prompts=20" + placed],
                          cwd=workdir, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = workdir / "runs" / "stock"
    rows = read_metrics(out / "metrics.jsonl", "train")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert (out / "final_model" / "config.json").is_file()
    where = json.loads((out / "placement.json").read_text())
    generators = [v for k, v in where.items() if k.startswith("generator")]
    ranks = [v for k, v in where.items() if k.startswith("learner rank")]
    assert len(generators) == 2 and all("generator_node" in g["node_resources"] for g in generators), where
    assert len(ranks) == 2 and all("learner_node" in r["node_resources"] for r in ranks), where
    # the learner group's rendezvous spans two nodes, and weights crossed from them to the generators' node
    assert len({r["node_id"] for r in ranks}) == 2 and not {r["node_id"] for r in ranks} & {g["node_id"] for g in generators}
    assert rows[-1]["ledger/generator_version_min"] >= 1, rows[-1]
