"""Security by default in the cluster tooling: the templates start Ray with token auth on and a token made or
required, the job API is not bound openly, and cluster/submit.py keeps --env secrets off command lines, says what
is wrong with an --env in one line, and leaves virtual environments out of the uploaded package."""

import json
import os
import re
import stat
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "cluster"))
import submit  # noqa: E402


def test_slurm_template_turns_token_auth_on_with_a_token_and_binds_the_job_api_to_loopback():
    text = (ROOT / "cluster" / "slurm.sbatch").read_text()
    script = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    first_start = script.index("ray start")
    auth = script.index("export RAY_AUTH_MODE=token")
    token = re.search(r"export RAY_AUTH_TOKEN=\$\{RAY_AUTH_TOKEN:-\$\((.+)\)\}\n", script)
    assert auth < first_start and token and token.start() < first_start  # before any node starts, inherited by srun
    assert "0.0.0.0" not in script and script.count("--dashboard-host=127.0.0.1") == 1
    assert "ray start --head" in script and '--address "http://127.0.0.1:8265"' in script
    # the line that makes a token, run: 64 hex characters, and a new one each time
    made = [subprocess.run(["bash", "-c", token.group(1)], capture_output=True, text=True, check=True,
                           env={"PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
                           ).stdout.strip() for _ in range(2)]
    assert all(re.fullmatch(r"[0-9a-f]{64}", t) for t in made) and made[0] != made[1]
    assert subprocess.run(["bash", "-n", str(ROOT / "cluster" / "slurm.sbatch")]).returncode == 0
    # a requeued job resumes its run (what that does: test_trainer_signals' kill-and-rerun)
    assert "#SBATCH --requeue" in text and \
        '[ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && sets+=(--set run.resume_from=auto)' in script


def test_kuberay_template_requires_the_token_on_every_ray_container_and_the_submitter():
    job = yaml.safe_load((ROOT / "cluster" / "kuberay-rayjob.yaml").read_text())["spec"]
    cluster = job["rayClusterSpec"]
    pods = [job["submitterPodTemplate"], cluster["headGroupSpec"]["template"],
            *(g["template"] for g in cluster["workerGroupSpecs"])]
    for pod in pods:
        for container in pod["spec"]["containers"]:
            env = {e["name"]: e for e in container["env"]}
            assert env["RAY_AUTH_MODE"]["value"] == "token", container["name"]
            ref = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
            assert ref["name"] == "replay-rl-ray-token" and not ref.get("optional", False)  # no Secret: no start
    # the dashboard listens on the pod network (the operator and the submitter reach it through the ClusterIP
    # Service), never on a Service exposed outside the cluster
    assert cluster["headGroupSpec"].get("serviceType", "ClusterIP") == "ClusterIP"
    assert "RAY_AUTH_MODE=disabled" not in json.dumps(job)
    assert job["backoffLimit"] >= 1 and "--set run.resume_from=auto" in job["entrypoint"]  # a retry resumes


def test_an_env_without_a_value_takes_it_from_the_environment_and_never_reaches_a_command_line(tmp_path):
    env = submit.job_env(["HF_TOKEN", "MODE=fast"], {"HF_TOKEN": "s3cret"})
    assert env == {"HF_TOKEN": "s3cret", "MODE": "fast"}
    (tmp_path / "checkout").mkdir()
    args = Namespace(config=str(ROOT / "configs" / "tiny_cpu.yaml"), study=None, set=[], pip=[],
                     address="http://127.0.0.1:1", submission_id="s1", no_wait=True)
    command = submit.build_command(args, tmp_path / "checkout", env)
    assert not any("s3cret" in part for part in command)
    spec = Path(command[command.index("--runtime-env") + 1])
    assert stat.S_IMODE(spec.stat().st_mode) == 0o600
    assert yaml.safe_load(spec.read_text())["env_vars"]["HF_TOKEN"] == "s3cret"


@pytest.mark.parametrize("item, says", [("NOT_SET_HERE", "submit: --env NOT_SET_HERE: NOT_SET_HERE is not set here; "
                                                        "export it first, or give --env NOT_SET_HERE=VALUE"),
                                        ("=x", "submit: --env '=x': expected NAME=VALUE, or NAME")])
def test_a_bad_env_is_one_line(item, says):
    with pytest.raises(SystemExit) as e:
        submit.job_env([item], {})
    assert str(e.value).startswith(says) and "\n" not in str(e.value)


def test_submit_with_an_unset_env_exits_in_one_line_without_a_traceback():
    env = {k: v for k, v in os.environ.items() if k != "NOT_SET_HERE"}
    proc = subprocess.run([sys.executable, str(ROOT / "cluster" / "submit.py"), "--address", "http://127.0.0.1:1",
                           "-c", "configs/tiny_cpu.yaml", "--env", "NOT_SET_HERE"], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)
    assert proc.returncode != 0 and proc.stderr.strip().splitlines() == [
        "submit: --env NOT_SET_HERE: NOT_SET_HERE is not set here; export it first, or give --env NOT_SET_HERE=VALUE"]


def test_the_package_leaves_out_virtual_environments_under_any_name_and_the_committed_results(tmp_path):
    for name in (".venv-gpu", "env"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "pyvenv.cfg").write_text("home = /usr\n")
    (tmp_path / "conda").mkdir()
    (tmp_path / "conda" / "conda-meta").mkdir()
    (tmp_path / "replay_rl").mkdir()
    names = [".venv-gpu", "env", "conda", "replay_rl", ".git", "runs"]
    assert submit.skipped(str(tmp_path), names) == {".venv-gpu", "env", "conda", ".git", "runs"}
    # the committed results stay home; a folder named results elsewhere travels
    assert submit.skipped(str(submit.ROOT / "benchmarks"), ["results", "compute_saved.py"]) == {"results"}
    assert submit.skipped(str(tmp_path), ["results"]) == set()
