"""Tier 1: the trackers a run mirrors its metrics to (tracking.loggers), on the real MLflow and W&B clients:
MLflow's local file store and W&B's offline mode, read back from disk."""

import json
from pathlib import Path

import pytest

from replay_rl.config import ConfigError, RunConfig
from replay_rl.driver import preflight as preflight_module
from replay_rl.driver.preflight import check_trackers
from replay_rl.driver.trackers import flat_config, make_trackers, mlflow_client, tracked
from replay_rl.metrics import MetricsSink

TRAIN = {"batch/reward_mean": 0.25, "ledger/compute": 12.0, "buffer/age_mean": None, "sync/kind": "object_store"}
EVAL = {"eval/pass@1": 0.5, "ledger/compute": 10.0}


def cfg_with(tmp_path, *loggers: str) -> RunConfig:
    return RunConfig.load(None, [f"run.output_dir={tmp_path}", f"tracking.loggers=[{','.join(loggers)}]",
                                 "tracking.experiment=tracker-test"])


def write_rows(cfg: RunConfig, run_id: str, resume: bool = False, steps=(1, 2), failed: bool = False) -> list:
    out = Path(cfg.run.output_dir)
    trackers = make_trackers(cfg, out, run_id, resume)
    sink = MetricsSink(out, trackers=trackers)
    for step in steps:
        sink.log(step, "train", TRAIN | {"batch/reward_mean": 0.25 * step})
    sink.log(steps[0], "eval", EVAL)  # an eval arrives after a later train step, as evals run beside training
    sink.close(failed)
    sink.close()  # train() closes twice: the second is a no-op
    return trackers


def test_keys_are_metrics_jsonl_keys_and_an_eval_rows_ledger_is_marked():
    assert tracked("train", TRAIN) == {"batch/reward_mean": 0.25, "ledger/compute": 12.0}
    assert tracked("eval", EVAL) == {"eval/pass@1": 0.5, "eval/ledger/compute": 10.0}
    flat = flat_config(RunConfig())
    assert flat["learner.lr"] == json.dumps(RunConfig().learner.lr) and flat["replay.type"] == '"fifo"'


def test_mlflow_file_store_holds_the_metrics_config_and_status(tmp_path):
    cfg = cfg_with(tmp_path, "mlflow")
    (tracker,) = write_rows(cfg, "run-a")
    client = mlflow_client(tracker.uri)
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == tmp_path.name
    assert run.data.params["learner.lr"] == json.dumps(cfg.learner.lr)
    assert run.data.params["tracking.loggers"] == '["mlflow"]'
    history = client.get_metric_history(tracker.run_id, "batch/reward_mean")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.25), (2, 0.5)]
    assert [m.step for m in client.get_metric_history(tracker.run_id, "eval/pass_at_1")] == [1]
    assert [m.value for m in client.get_metric_history(tracker.run_id, "eval/ledger/compute")] == [10.0]
    assert client.get_metric_history(tracker.run_id, "buffer/age_mean") == []  # None (non-finite) is not a number


def test_a_resumed_run_continues_its_tracked_run_and_another_run_starts_a_new_one(tmp_path):
    cfg = cfg_with(tmp_path, "mlflow")
    (first,) = write_rows(cfg, "run-a", failed=True)
    client = mlflow_client(first.uri)
    assert client.get_run(first.run_id).info.status == "FAILED"
    (resumed,) = write_rows(cfg, "run-a", resume=True, steps=(3,))
    assert resumed.run_id == first.run_id and client.get_run(first.run_id).info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(first.run_id, "batch/reward_mean")]
    assert sorted(steps) == [1, 2, 3]
    (other,) = write_rows(cfg, "run-b", resume=True)  # the folder's next run (overwrite): its own tracked run
    (fresh,) = write_rows(cfg, "run-b")  # not a resume: a new tracked run even for the same run id
    assert len({first.run_id, other.run_id, fresh.run_id}) == 3
    assert json.loads((tmp_path / "trackers.json").read_text()) == {"run_id": "run-b", "ids": {"mlflow": fresh.run_id}}


def test_wandb_offline_writes_the_rows_and_resumes_the_same_run(tmp_path):
    cfg = cfg_with(tmp_path, "wandb", "tensorboard")
    wandb_tracker, _ = write_rows(cfg, "run-a")
    (run_dir,) = (tmp_path / "wandb").glob(f"offline-run-*-{wandb_tracker.run_id}")
    data = (run_dir / f"run-{wandb_tracker.run_id}.wandb").read_bytes()
    assert b"batch/reward_mean" in data and b"eval/pass@1" in data and b"learner.lr" in data
    assert any((tmp_path / "tb").iterdir())
    again, _ = write_rows(cfg, "run-a", resume=True, steps=(3,))
    assert again.run_id == wandb_tracker.run_id


def test_a_missing_tracker_package_fails_in_one_line_before_ray_starts(tmp_path, monkeypatch):
    check_trackers(cfg_with(tmp_path, "mlflow", "wandb", "tensorboard"))  # both installed with the dev extra
    real = preflight_module.importlib.util.find_spec
    monkeypatch.setattr(preflight_module.importlib.util, "find_spec", lambda n: None if n == "wandb" else real(n))
    with pytest.raises(ConfigError, match=r"^tracking.loggers names wandb, which is not installed: pip install"):
        check_trackers(cfg_with(tmp_path, "wandb"))
