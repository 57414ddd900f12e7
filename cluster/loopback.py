"""A Ray cluster of several nodes on one box, on loopback: a head offering generator_node and two worker nodes
offering one learner_node each (token auth on, as Ray 2.60 defaults), each node in its own process group on ports of
its own. Used by tests/test_cluster_submit.py and benchmarks/fault_soak.py --cluster."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil  # Ray's own dependency

ROOT = Path(__file__).parents[1]
# the `ray` command of this interpreter's environment, also when that environment is not activated
PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BRING_UP_S = 300  # per node: idle, a node is up in about 10 s; a loaded box is many times slower
RAY_CLI_S = 30    # one `ray status` / `ray job list`: against a node that died, it blocks for minutes
POLL_S = 3        # between two such calls while a node comes up: each is a Python start and Ray import (~1 s of CPU)
# the GCS checks each node every second rather than Ray's 3 s: a killed node is declared dead after 5 failed checks,
# ~5 s instead of ~15 s, and each node loss a test or the soak makes waits that out. A live node that does not answer
# is still declared dead only after 5 checks in a row time out (10 s each, Ray's default): ≥ 54 s, so a node the
# fault soak pauses (fault_trials.HOLD_S, 45 s) is continued, not lost, as with Ray's defaults (≥ 62 s)
HEALTH_CHECK = '--system-config={"health_check_period_ms": 1000, "health_check_failure_threshold": 5}'


# Each joining node's Ray temp dir. Sharing the head's /tmp/ray, every node's runtime-env agent deleted and unpacked
# a job's working_dir again on its own first use (Ray's overwrite=True), under the workers another node had just
# started in it: a worker whose cwd is gone dies at its first torch op with "Intel oneMKL FATAL ERROR: Cannot load
# libtorch_cpu.so" (reproduced by running torch in a deleted cwd). Real hosts have a /tmp/ray each. Kept after the
# node stops, as /tmp/ray is, for its logs; short, since Ray's socket paths must stay under 107 characters.
NODE_DIRS = Path(tempfile.gettempdir()) / "ray-loopback"


def node_dir() -> str:
    NODE_DIRS.mkdir(exist_ok=True)
    return tempfile.mkdtemp(prefix="node-", dir=NODE_DIRS)


class NodeDown(RuntimeError):
    """A node of the test cluster exited or did not come up (seen under load: a raylet that waited too long for its
    dashboard agent aborted at start-up, and the fixture then waited on `ray status` against a dead head)."""


def start_node(log: Path, *args: str) -> subprocess.Popen:
    """One `ray start --block` on loopback, every port its own (several nodes share this box), in its own process
    group: stopping it stops only that node. Its output goes to `log`, read back when it fails. A node that joins
    gets a Ray temp dir of its own (NODE_DIRS)."""
    agent, agent_grpc, runtime_env, metrics = (free_port() for _ in range(4))
    if "--head" not in args:
        args = (*args, f"--temp-dir={node_dir()}")
    with open(log, "w") as out:
        return subprocess.Popen(["ray", "start", "--block", f"--dashboard-agent-listen-port={agent}",
                                 f"--dashboard-agent-grpc-port={agent_grpc}", f"--runtime-env-agent-port={runtime_env}",
                                 f"--metrics-export-port={metrics}", "--node-ip-address=127.0.0.1",
                                 "--disable-usage-stats", *args],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PATH": PATH, "RAY_AUTH_MODE": "token"})  # workers need the token


def stop_nodes(nodes: list[subprocess.Popen], grace_s: float = 5) -> None:
    """SIGTERM, then SIGKILL to each node's process group after grace_s: `ray start --block` took 33 s to stop a
    head gracefully here, and every process a node starts (GCS, raylet, dashboard, agents) is in its group. The
    workers share one grace period, as they were sent SIGTERM together."""
    for group in (nodes[1:], nodes[:1]):  # the workers together, then the head
        for node in group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for node in group:
            try:
                node.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait(timeout=60)
            forget_packages(node)


def forget_packages(node: subprocess.Popen) -> None:
    """A stopped joining node's unpacked job packages (tens of MB a job) go; its logs stay, as /tmp/ray's do."""
    for arg in node.args:
        if arg.startswith("--temp-dir="):
            for unpacked in Path(arg.split("=", 1)[1]).glob("session_*/runtime_resources"):
                shutil.rmtree(unpacked, ignore_errors=True)


def kill_node(node: subprocess.Popen) -> None:
    """A host lost at once: the node's `ray start` and every process under it, SIGKILLed together. Killing the
    process group is not enough: the raylet's workers (a learner rank among them) run in sessions of their own and
    kept training for several steps, until the node's missed heartbeats were noticed."""
    tree = [psutil.Process(node.pid), *psutil.Process(node.pid).children(recursive=True)]
    for proc in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    node.wait(timeout=60)
    forget_packages(node)


def ray_cli(*args: str) -> subprocess.CompletedProcess | None:
    env = {**os.environ, "RAY_AUTH_MODE": "token", "PATH": PATH}
    try:
        return subprocess.run(["ray", *args], capture_output=True, text=True, env=env, timeout=RAY_CLI_S)
    except subprocess.TimeoutExpired:
        return None


def wait_for(ready, nodes: list[subprocess.Popen], logs: list[Path], what: str) -> None:
    """Poll ready() until it holds, failing at once when a node process has exited (with its last output line)."""
    end = time.monotonic() + BRING_UP_S
    while time.monotonic() < end:
        for node, log in zip(nodes, logs):
            if node.poll() is not None:
                last = (log.read_text().strip().splitlines() or ["no output"])[-1]
                raise NodeDown(f"{what}: node {log.stem} exited with code {node.returncode}: {last[-300:]}")
        if ready():
            return
        time.sleep(POLL_S)
    raise NodeDown(f"{what}: not within {BRING_UP_S}s")


@dataclass
class Cluster:
    address: str                  # the head's job server
    gcs: int                      # the head's port, which a node joins at
    nodes: list[subprocess.Popen]  # head first; a test that starts a node adds it, so that teardown stops it
    logs: Path


def bring_up(logs_dir: Path) -> Cluster:
    """A head offering generator_node and two workers offering one learner_node each, started one at a time (two
    nodes registering at once timed out here); every port is chosen here, so the nodes never collide with each
    other or with the test session's own cluster. The head's GCS runs the faster node health check (HEALTH_CHECK)."""
    gcs, dash, client = (free_port() for _ in range(3))
    address = f"http://127.0.0.1:{dash}"
    nodes, logs = [], []
    try:
        logs.append(logs_dir / "head.log")
        nodes.append(start_node(logs[-1], "--head", f"--port={gcs}", f"--dashboard-port={dash}",
                                f"--ray-client-server-port={client}", "--dashboard-host=127.0.0.1", "--num-cpus=2",
                                "--include-dashboard=true", '--resources={"generator_node": 2}', HEALTH_CHECK))
        wait_for(lambda: (r := ray_cli("job", "list", "--address", address)) is not None and r.returncode == 0,
                 nodes, logs, "the head's job server")
        for joined in (2, 3):
            logs.append(logs_dir / f"worker{joined - 1}.log")
            nodes.append(start_learner_node(gcs, logs[-1]))
            wait_for(lambda: (r := ray_cli("status", f"--address=127.0.0.1:{gcs}")) is not None
                     and r.stdout.count(" node_") >= joined, nodes, logs, f"worker node {joined - 1} joining")
    except NodeDown:
        stop_nodes(nodes)
        raise
    return Cluster(address, gcs, nodes, logs_dir)


def start_learner_node(gcs: int, log: Path) -> subprocess.Popen:
    """A worker node offering one learner rank's place (learner_node: 1), joined to the head at port `gcs`."""
    return start_node(log, f"--address=127.0.0.1:{gcs}", "--num-cpus=1", '--resources={"learner_node": 1}')


def offered(cluster: Cluster, resource: str) -> float:
    """How much of a custom resource the live nodes offer, as `ray status` totals it (0 when it cannot tell)."""
    r = ray_cli("status", f"--address=127.0.0.1:{cluster.gcs}")
    found = re.search(rf"/([\d.]+) {resource}\b", r.stdout) if r is not None and r.returncode == 0 else None
    return float(found.group(1)) if found else 0.0


def replace_node(cluster: Cluster, name: str, learner_nodes: int = 2) -> None:
    """Start a learner node and wait until the cluster offers `learner_nodes` of them: a run submitted before the
    node registers is refused by preflight, rightly (the first CI run under load did so). While a lost node is not
    yet declared dead it still counts, so the wait then returns at once and the run's own node wait takes over."""
    cluster.nodes.append(start_learner_node(cluster.gcs, cluster.logs / f"{name}.log"))
    wait_for(lambda: offered(cluster, "learner_node") >= learner_nodes, cluster.nodes[-1:],
             [cluster.logs / f"{name}.log"], f"{name} joining")


def submit_command(address, *args) -> list[str]:
    return [sys.executable, str(ROOT / "cluster" / "submit.py"), "--address", address, *args]


# a run placed by these has its learner ranks on the two worker nodes and its generators on the head
PLACED = ["-s", "cluster.generator_resources={generator_node: 1}", "-s", "cluster.learner_resources={learner_node: 1}"]

