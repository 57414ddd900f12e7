"""`ray job submit` for real: a local head on loopback (token auth on, as Ray 2.60 defaults), the tiny config."""

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


@pytest.fixture(scope="module")
def head():
    gcs, dash, agent, agent_grpc, runtime_env, client = (free_port() for _ in range(6))
    # --block keeps the head's processes children of this one, so stopping it stops only this cluster; every port
    # is chosen here so the head never collides with the test session's own local cluster (default agent ports)
    proc = subprocess.Popen(["ray", "start", "--head", "--block", f"--port={gcs}", f"--dashboard-port={dash}",
                             f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
                             f"--runtime-env-agent-port={runtime_env}", f"--ray-client-server-port={client}",
                             "--dashboard-host=127.0.0.1", "--node-ip-address=127.0.0.1", "--num-cpus=2",
                             "--include-dashboard=true", "--disable-usage-stats"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "PATH": PATH})
    address = f"http://127.0.0.1:{dash}"
    env = {**os.environ, "RAY_AUTH_MODE": "token", "PATH": PATH}
    for _ in range(60):
        if subprocess.run(["ray", "job", "list", "--address", address], capture_output=True, env=env).returncode == 0:
            break
        time.sleep(1)
    else:
        proc.kill()
        pytest.fail("local Ray head did not come up")
    yield address
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=60)


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
    assert read_metrics(out / "metrics.jsonl", "eval")[0]["mu"] > 0


def test_bad_submissions_fail_with_one_clear_line(head, warm_model, tmp_path):
    missing = submit(head, "-c", "configs/does_not_exist.yaml")
    assert missing.returncode == 2 and missing.stderr.strip().startswith("submit: config file") \
        and len(missing.stderr.strip().splitlines()) == 1
    too_big = submit(head, "-c", "configs/tiny_cpu.yaml", "-s", f"model.path={warm_model[0]}", "-s",
                     f"run.output_dir={tmp_path / 'big'}", "-s", "cluster.generators=10", "-s", "cluster.cpus_per_actor=0.5")
    assert too_big.returncode == 1
    assert too_big.stderr.strip() == ("submit: job failed: cluster too small for W=10, T=2: needs 0 GPUs "
                                      "and 6.5 CPUs, the Ray cluster has 0 GPUs and 2 CPUs; lower cluster.generators / "
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
    proc = subprocess.run(["bash", "-c", line + " -s run.steps=3 -s run.eval_every=3 -s run.eval_prompts=20"],
                          cwd=workdir, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = workdir / "runs" / "stock"
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl", "train")] == [1, 2, 3]
    assert (out / "final_model" / "config.json").is_file()
