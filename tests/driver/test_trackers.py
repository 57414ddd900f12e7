"""Tier 1: the trackers a run mirrors its metrics to (tracking.loggers), on the real MLflow, W&B and TensorBoard
clients: MLflow's local file store, W&B's offline mode and TensorBoard's event files, read back from disk."""

import json
import shutil
import socket
import time
from pathlib import Path

import pytest

from replay_rl.config import ConfigError, RunConfig
from replay_rl.driver import preflight as preflight_module
from replay_rl.driver.preflight import check_trackers
from replay_rl.driver.trackers import flat_config, make_trackers, mlflow_client, tracked
from replay_rl.metrics import MetricsSink

TRAIN = {"batch/reward_mean": 0.25, "ledger/compute": 12.0, "buffer/age_mean": None, "sync/kind": "object_store"}
EVAL = {"eval/pass@1": 0.5, "ledger/compute": 10.0}


def cfg_with(tmp_path, *loggers: str, extra=()) -> RunConfig:
    return RunConfig.load(None, [f"run.output_dir={tmp_path}", f"tracking.loggers=[{','.join(loggers)}]",
                                 "tracking.experiment=tracker-test", *extra])


def start(cfg: RunConfig, run_id: str, resumed_at: int | None = None) -> tuple[MetricsSink, list]:
    """One start of a run, as run_roles makes it: the sink (keeping metrics.jsonl through a resume's step), then
    the trackers, given those kept rows."""
    out = Path(cfg.run.output_dir)
    sink = MetricsSink(out, keep_through_step=-1 if resumed_at is None else resumed_at)
    trackers = make_trackers(cfg, out, run_id, resumed_at, sink.kept)
    sink.mirror_to(trackers)
    return sink, trackers


def write(sink: MetricsSink, steps, scale: float = 1.0, failed: bool = False) -> None:
    for step in steps:
        sink.log(step, "train", TRAIN | {"batch/reward_mean": scale * step})
    sink.log(steps[0], "eval", EVAL)  # an eval arrives after a later train step, as evals run beside training
    sink.close(failed)
    sink.close()  # train() closes twice: the second is a no-op


def history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_keys_are_metrics_jsonl_keys_and_an_eval_rows_ledger_is_marked():
    assert tracked("train", TRAIN) == {"batch/reward_mean": 0.25, "ledger/compute": 12.0}
    assert tracked("eval", EVAL) == {"eval/pass@1": 0.5, "eval/ledger/compute": 10.0}
    flat = flat_config(RunConfig())
    assert flat["learner.lr"] == json.dumps(RunConfig().learner.lr) and flat["replay.type"] == '"fifo"'


def test_mlflow_file_store_holds_the_metrics_config_and_status(tmp_path):
    cfg = cfg_with(tmp_path, "mlflow")
    sink, (tracker,) = start(cfg, "run-a")
    write(sink, (1, 2))
    client = mlflow_client(tracker.inner.uri)
    run = client.get_run(tracker.inner.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == tmp_path.name
    assert run.data.tags["replay_rl.run_id"] == "run-a" and run.data.params["learner.lr"] == json.dumps(cfg.learner.lr)
    assert run.data.params["tracking.loggers"] == '["mlflow"]'
    assert history(client, tracker.inner.run_id, "batch/reward_mean") == [(1, 1.0), (2, 2.0)]
    assert history(client, tracker.inner.run_id, "eval/pass_at_1") == [(1, 0.5)]  # MLflow forbids @ in a name
    assert history(client, tracker.inner.run_id, "eval/ledger/compute") == [(1, 10.0)]
    assert client.get_metric_history(tracker.inner.run_id, "buffer/age_mean") == []  # None (non-finite) is not a number


def test_a_resume_opens_a_new_tracked_run_holding_one_history_like_metrics_jsonl(tmp_path):
    """Steps after the checkpoint are trained again: the new MLflow run gets the kept rows first, then the new
    ones, with no step twice; TensorBoard's shared folder drops its events past the checkpoint."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = cfg_with(tmp_path, "mlflow", "tensorboard")
    sink, (first, _) = start(cfg, "run-a")
    write(sink, (1, 2, 3), failed=True)  # the run dies after step 3; its checkpoint is step 1's
    sink, (resumed, _) = start(cfg, "run-a", resumed_at=1)
    write(sink, (2, 3, 4), scale=10.0)
    client = mlflow_client(first.inner.uri)
    assert client.get_run(first.inner.run_id).info.status == "FAILED"
    assert client.get_run(resumed.inner.run_id).info.status == "FINISHED" and resumed.inner.run_id != first.inner.run_id
    assert client.get_run(resumed.inner.run_id).data.tags["replay_rl.run_id"] == "run-a"
    assert history(client, resumed.inner.run_id, "batch/reward_mean") == [(1, 1.0), (2, 20.0), (3, 30.0), (4, 40.0)]
    assert history(client, resumed.inner.run_id, "eval/pass_at_1") == [(1, 0.5), (2, 0.5)]
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/batch/reward_mean")] == [
        (1, 1.0), (2, 20.0), (3, 30.0), (4, 40.0)]


def test_wandb_offline_writes_each_start_as_a_run_of_the_run_ids_group(tmp_path):
    cfg = cfg_with(tmp_path, "wandb")
    sink, (first,) = start(cfg, "run-a")
    write(sink, (1, 2))
    sink, (again,) = start(cfg, "run-a", resumed_at=2)
    write(sink, (3,))
    assert again.inner.run_id != first.inner.run_id
    for tracker in (first, again):
        (run_dir,) = (tmp_path / "wandb").glob(f"offline-run-*-{tracker.inner.run_id}")
        markers = (b"batch/reward_mean", b"eval/pass@1", b"learner.lr", b"run-a")
        data = written(run_dir / f"run-{tracker.inner.run_id}.wandb", markers, timeout_s=60)
        assert all(m in data for m in markers), data[:200]


def written(path: Path, markers: tuple[bytes, ...], timeout_s: float) -> bytes:
    """The file once it holds every marker, or as it is after timeout_s. W&B's run.finish() tells its service
    process the run is done without waiting (wandb 0.31 `inform_finish`); the service flushes the file's last block
    when it closes the run's stream, so a read right after finish() found only the header about once in 45 suites."""
    deadline = time.monotonic() + timeout_s
    while not all(m in (data := path.read_bytes()) for m in markers) and time.monotonic() < deadline:
        time.sleep(0.1)
    return data


def test_a_tracker_that_fails_mid_run_is_dropped_in_one_line_and_the_run_goes_on(tmp_path, capsys):
    cfg = cfg_with(tmp_path, "mlflow", "tensorboard")
    sink, (tracker, _) = start(cfg, "run-a")
    sink.log(1, "train", TRAIN)
    while not tracker.idle():  # it logs from a thread of its own: step 1 has gone before the store loses the run
        time.sleep(0.01)
    experiment_dir = next(p for p in (tmp_path / "mlruns").iterdir() if (p / tracker.inner.run_id).is_dir())
    # the store loses the run under it (a wiped disk, a reset server)
    shutil.rmtree(experiment_dir / tracker.inner.run_id)
    sink.log(2, "train", TRAIN)
    sink.log(3, "train", TRAIN)
    sink.close()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("tracking:")]
    assert len(lines) == 1 and lines[0].startswith("tracking: Mlflow stopped at step 2 ("), lines
    assert lines[0].endswith("; metrics.jsonl keeps every row")
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_an_mlflow_server_that_never_answers_costs_one_line_within_tracking_timeout_s(tmp_path, capsys, monkeypatch):
    """MLflow retried a call for up to ~20 min and the driver waited: a restart during an outage ended a run that was
    recovering, and a slow server held every step. Now: a resume drops it in one line, a fresh run stops in one
    line, each within tracking.timeout_s, and nothing waits on it after."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # so that its own thread ends soon after the test
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    silent = socket.socket()  # accepts connections (the kernel's backlog) and never answers a request
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    cfg = cfg_with(tmp_path, "mlflow", extra=[f"tracking.mlflow_uri=http://127.0.0.1:{silent.getsockname()[1]}",
                                              "tracking.timeout_s=1"])
    try:
        t0 = time.monotonic()
        sink, (tracker,) = start(cfg, "run-a", resumed_at=0)
        write(sink, [1, 2, 3])
        assert time.monotonic() - t0 < 4
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("tracking:")]
        assert lines == ["tracking: Mlflow did not start on this resume (no answer in tracking.timeout_s=1s): "
                         "dropped; metrics.jsonl keeps every row"]
        assert [json.loads(r)["step"] for r in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 1]
        t0 = time.monotonic()
        with pytest.raises(ConfigError, match=r"^tracking: Mlflow did not start \(no answer in tracking.timeout_s="
                                              r"1s\); check tracking.mlflow_uri / wandb_mode, or drop mlflow from"):
            start(cfg, "run-b")
        assert time.monotonic() - t0 < 4
    finally:
        silent.close()


def test_a_tracker_that_cannot_start_fails_in_one_line_before_ray_starts(tmp_path, monkeypatch):
    check_trackers(cfg_with(tmp_path, "mlflow", "wandb", "tensorboard"))  # both installed with the dev extra
    real = preflight_module.importlib.util.find_spec
    monkeypatch.setattr(preflight_module.importlib.util, "find_spec", lambda n: None if n == "wandb" else real(n))
    with pytest.raises(ConfigError, match=r"^tracking.loggers names wandb, which is not installed: pip install"):
        check_trackers(cfg_with(tmp_path, "wandb"))
    monkeypatch.undo()
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc: never logged in
    online = cfg_with(tmp_path, "wandb", extra=["tracking.wandb_mode=online"])
    with pytest.raises(ConfigError, match=r"^tracking.wandb_mode=online needs a W&B login"):
        check_trackers(online)
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
    check_trackers(online)
    sqlite = cfg_with(tmp_path, "mlflow", extra=[f"tracking.mlflow_uri=sqlite:///{tmp_path}/m.db"])
    if real("sqlalchemy") is None:  # mlflow-skinny, as the trackers extra installs
        with pytest.raises(ConfigError, match=r"^tracking.mlflow_uri 'sqlite:.*' is a database, which mlflow-skinny"):
            check_trackers(sqlite)
    else:
        check_trackers(sqlite)
