"""Tier 3: the whole system, through the CLI and the trainer API, on the warm-started tiny model."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from replay_rl.config import ConfigError, RunConfig
from replay_rl.config.replay_specs import pace_for
from replay_rl.metrics import read_metrics
from replay_rl.replay.served_log import trained_twice
from replay_rl.analysis.report import PLOTS
from replay_rl.driver.checkpointer import Checkpointer
from replay_rl.driver.trackers import mlflow_client
from replay_rl.driver.trainer import build, train
from tests.runs import copy_run, run_cfg

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.deepspeed]


def test_cli_train_replay_mode_writes_metrics(warm_model, tmp_path):
    path, _ = warm_model
    out = tmp_path / "cli"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "replay_rl.cli", "train", "-s", f"model.path={path}",
                           "-s", f"run.output_dir={out}", "-s", "run.steps=4", "-s", "run.eval_every=2",
                           "-s", "run.eval_prompts=40", "-s", "learner.batch_size=32",
                           "-s", "tracking.loggers=[tensorboard,mlflow,wandb]", "-s", "run.log_samples_every=2"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = proc.stdout.strip().splitlines()
    assert summary[0].startswith("pass@1 (greedy, 40 held-out problems): ") and "at step 0 →" in summary[0]
    assert summary[1].startswith("compute: ") and f"{out}/final_model/" in summary[2]
    assert (out / "final_model" / "config.json").is_file() and (out / "checkpoints" / "step_4").is_dir()
    assert summary[3] == (f"look: {out}/plots/*.png, or tensorboard --logdir {out}/tb, or MLFLOW_ALLOW_FILE_STORE=true "
                          f"mlflow ui --backend-store-uri {(out / 'mlruns').as_uri()}, or wandb sync "
                          f"{out}/wandb/offline-run-*")
    assert sorted(p.name for p in (out / "plots").iterdir()) == sorted(PLOTS)
    assert any((out / "tb").iterdir())
    assert_tracked(out)
    rows = read_metrics(out / "metrics.jsonl", "train")
    assert rows[-1]["ledger/k_train"] == 4 * 32 and rows[-1]["ledger/k_inf"] >= 64
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["ledger/mu"] > 0 and r["ledger/gamma"] > 0 for r in rows)
    assert all("batch/age_mean" in r and "buffer/age_mean" in r and "batch/clip_fraction" in r for r in rows)
    # zero-variance groups: the batch's share, and the fresh groups' share so far, both measured
    assert all(0 <= r["batch/zero_variance_share"] <= 1 for r in rows)
    fresh = [r["ledger/zero_variance_share_fresh"] for r in rows if "ledger/zero_variance_share_fresh" in r]
    assert fresh and all(0 <= v <= 1 for v in fresh)
    # an eval at step 0 (where RL starts) and every run.eval_every steps; compute on the paper's axis
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl", "eval")] == [0, 2, 4]
    last = rows[-1]
    assert last["ledger/compute"] == pytest.approx((last["ledger/k_train"] + 5.28 * last["ledger/k_inf"]) / 32)
    assert json.loads((out / "config.json").read_text())["replay"]["type"] == "fifo"
    # the weight-path check: each generator proved each version it scored equal to the learner's (fp32, one kernel)
    checks = [json.loads(line) for line in (out / "weight_checks.jsonl").read_text().splitlines()]
    assert {c["generator_id"] for c in checks} == {0, 1} and all(c["abs_max"] < 1e-5 for c in checks)
    assert min(c["version"] for c in checks) >= 1 and "weight_check/abs_max" in rows[-1]
    # samples as text every run.log_samples_every steps: each generator's newest group, with its age
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert {s["step"] for s in samples} == {2, 4} and {s["generator"] for s in samples} == {0, 1}
    assert all("+" in s["prompt"] and s["completion"] and 0 <= s["age"] == s["step"] - s["version"] for s in samples)
    assert all(s["finish"] in ("stop", "length") and isinstance(s["advantage"], float) for s in samples)


def assert_tracked(out: Path) -> None:
    """The run's MLflow file store holds its metrics and config, and W&B's offline run its rows (tracking.loggers)."""
    client = mlflow_client((out / "mlruns").as_uri())
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "FINISHED" and run.data.params["learner.batch_size"] == "32"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "ledger/k_train")] == [1, 2, 3, 4]
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "eval/pass_at_1")) == [0, 2, 4]
    (wandb_run,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    assert b"batch/reward_mean" in wandb_run.read_bytes()
    # the samples in each tracker: an MLflow artifact a step, a W&B table, a TensorBoard text
    assert [a.path for a in client.list_artifacts(run.info.run_id, "samples")] == \
        ["samples/step_0000002.jsonl", "samples/step_0000004.jsonl"]
    assert list((out / "wandb").glob("offline-run-*/files/media/table/samples_*.table.json"))
    assert any(b"samples/text_summary" in f.read_bytes() for f in (out / "tb").rglob("events.out.tfevents.*"))


def test_on_policy_mode_uses_each_rollout_once_also_across_a_resume(ray_cluster, warm_model, tmp_path):
    """The consume-once baseline, resumed from its step-2 checkpoint: the call its snapshot caught in part is made
    again (Checkpointer.resume rounds down), since a shard short of a credited share would wait for it for ever; K_inf
    stays within the pace's budget but for that call, and each rollout is trained on once. With MLflow on, the
    resume opens a second tracked run of the same run id that holds the whole history, as metrics.jsonl does."""
    path, _ = warm_model
    out, args = tmp_path / "op", ("replay.type=lifo_once", "replay.capacity=256", "run.checkpoint_every=2",
                                  "tracking.loggers=[mlflow]")
    train(run_cfg(path, out, "run.steps=2", *args))
    final = train(run_cfg(path, out, "run.steps=4", "run.resume_from=auto", *args))
    assert final["step"] == 4 and final["buffer/evicted_consumed"] == 4 * 32 and final["ledger/k_train"] == 4 * 32
    rows = read_metrics(out / "metrics.jsonl", "train")
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and all(r["batch/reuse_mean"] == 1.0 for r in rows)
    client = mlflow_client((out / "mlruns").as_uri())
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], order_by=["start_time ASC"])
    assert len(runs) == 2 and len({r.data.tags["replay_rl.run_id"] for r in runs}) == 1
    k_train = [sorted((m.step, m.value) for m in client.get_metric_history(r.info.run_id, "ledger/k_train"))
               for r in runs]
    assert k_train[0] == [(1, 32), (2, 64)] and k_train[1] == [(s, 32 * s) for s in (1, 2, 3, 4)]
    cfg = run_cfg(path, out, *args)
    assert final["ledger/k_inf"] < pace_for(cfg).budget(4) + 2 * cfg.generation.rollouts_per_call
    # the shards' audit, across the resume: the batches of steps 1-4 hold 4 × 32 keys, none trained twice
    logs = sorted((out / "replay_served").glob("shard_*.keys"))
    assert len(logs) == cfg.cluster.learners and trained_twice(logs, range(4)) == (4 * 32, [])


def test_a_run_owns_its_folder_and_a_finished_run_extends_to_more_steps(ray_cluster, warm_model, checkpointed_run,
                                                                       tmp_path):
    """Issue 28's reproduction: a second run (another seed and LR) in a used folder handed out the first run's
    step-4 checkpoint as its final model. Now it is refused in one line; started over (run.overwrite) it saves its
    own. That run, finished, is then extended from 4 to 8 steps with resume_from=auto, as the study extends runs:
    its metrics up to step 4 stay byte for byte, steps, evals and the ledger go on, replay_stats.json is rewritten.
    The first run is a copy of the session's checkpointed run (4 steps, seed 0)."""
    path, _ = warm_model
    out, second = tmp_path / "used", ("run.seed=1", "learner.lr=1e-3", "run.eval_every=4", "run.eval_prompts=20")
    model = out / "final_model" / "model.safetensors"
    copy_run(checkpointed_run, out)
    assert os.readlink(out / "final_model") == "checkpoints/step_4/hf_model"
    first = hashlib.sha256(model.read_bytes()).hexdigest()
    with pytest.raises(ConfigError, match=r"holds another run's checkpoints and metrics.jsonl: continue that run "
                                          r"with run.resume_from=auto, start over there with run.overwrite=true"):
        train(run_cfg(path, out, "run.steps=4", *second))
    train(run_cfg(path, out, "run.steps=4", *second, "run.overwrite=true"))
    assert hashlib.sha256(model.read_bytes()).hexdigest() != first
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    assert json.loads((out / "checkpoints" / "step_4" / "run.json").read_text())["run_id"] == run_id
    metrics, stats = (out / "metrics.jsonl").read_text(), (out / "replay_stats.json").read_text()
    inode = (out / "metrics.jsonl").stat().st_ino

    # a checkpoint every 2 steps, 2 kept: the one resumed from goes once two newer ones exist
    cfg = run_cfg(path, out, "run.steps=8", *second, "run.resume_from=auto", "run.checkpoint_every=2",
                  "run.keep_checkpoints=2")
    final = train(cfg)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_6", "step_8"]
    assert (out / "metrics.jsonl").read_text().startswith(metrics)  # the part already run is kept as it was,
    assert (out / "metrics.jsonl").stat().st_ino == inode               # and not even rewritten
    rows = read_metrics(out / "metrics.jsonl")
    train_rows = [r for r in rows if r["kind"] == "train"]
    assert [r["step"] for r in train_rows] == list(range(1, 9)) and final["step"] == 8
    assert [r["step"] for r in rows if r["kind"] == "eval"] == [0, 4, 8]
    assert [r["ledger/k_train"] for r in train_rows] == [32 * s for s in range(1, 9)]
    for key in ("ledger/k_inf", "ledger/compute", "ledger/wall_s"):  # the ledger goes on from step 4's
        assert all(a[key] <= b[key] for a, b in zip(train_rows, train_rows[1:])), key
    rpc = cfg.generation.rollouts_per_call  # Checkpointer.resume may make again the call its snapshot caught in part
    assert final["ledger/k_inf"] <= pace_for(cfg).budget(8) + rpc
    assert json.loads((out / "replay_stats.json").read_text())["inserts"] > json.loads(stats)["inserts"]
    assert json.loads((out / "run.json").read_text())["run_id"] == run_id
    assert json.loads((out / "checkpoints" / "step_8" / "run.json").read_text())["run_id"] == run_id
    assert os.readlink(out / "final_model") == "checkpoints/step_8/hf_model"


def test_the_papers_split_with_n_equal_to_b_runs_past_the_old_stall(ray_cluster, warm_model, tmp_path):
    """W=5, T=3, N=B=129 (issue 21's command, to its 60 steps) stopped at step 15: each generator dealt its calls
    from shard 0, so shard 2 stayed one rollout short of ⌊required/3⌋ for ever. 30 steps pass step 15 twice over
    and two and a half whole periods of the deal (W·T·rpc / R = 480 / 40.7 ≈ 12 steps); pace_check covers every
    other setting."""
    path, _ = warm_model
    out = tmp_path / "w5t3"
    steps = 30
    final = train(run_cfg(path, out, "cluster.generators=5", "cluster.learners=3", "cluster.cpus_per_actor=0.2",
                          "learner.batch_size=129", "replay.capacity=129", f"run.steps={steps}",
                          f"run.eval_every={steps}", "run.eval_prompts=20"))
    rows = read_metrics(out / "metrics.jsonl", "train")
    assert final["step"] == steps and [r["step"] for r in rows] == list(range(1, steps + 1))
    # R = 129 / (5.28·3/5) fresh rollouts a step, exactly: the last step waited for required(steps−1) =
    # B + (steps−1)·R, and generators holding the last version may have started calls (32 rollouts each) up to
    # budget(steps) = B + steps·R
    r = 129 / (5.28 * 3 / 5)
    assert 129 + (steps - 1) * r <= final["ledger/k_inf"] <= 129 + steps * r + 32


def test_ladder_rung_one_fifo_at_replay_ratio_one_is_the_baseline(ray_cluster, warm_model, tmp_path):
    """The sanity ladder's first rung, mechanically: a FIFO of N=B paced at replay ratio 1 (μ·T/W = 1) refills with
    one fresh batch per step, so every rollout is used once and the batch is at most lead_steps−1 versions old."""
    path, _ = warm_model
    out = tmp_path / "rung1"
    final = train(run_cfg(path, out, "replay.capacity=32", "run.steps=6",
                          "cluster.emulate={mu: 1.0, generators: 3, learners: 3}"))
    rows = read_metrics(out / "metrics.jsonl", "train")
    assert final["step"] == 6 and all(r["batch/reuse_mean"] == 1.0 and r["batch/age_mean"] <= 1.0 for r in rows)
    assert final["buffer/replay_ratio"] <= 1.0
    # compute = (K_train + μ·K_inf)/B: with μ=1 and each rollout used once, two trainer-step equivalents a step
    assert final["ledger/compute"] == pytest.approx((final["ledger/k_train"] + final["ledger/k_inf"]) / 32)


def test_checkpoint_resumes_same_step_weights_and_buffer(ray_cluster, warm_model, checkpointed_run, tmp_path):
    path, _ = warm_model
    ckpt = checkpointed_run / "checkpoints" / "step_4"  # its final checkpoint, only read: the refusals edit copies
    saved = load_file(str(ckpt / "hf_model" / "model.safetensors"))
    manifests = [json.loads((ckpt / "replay" / f"shard_{i}" / "manifest.json").read_text()) for i in range(2)]
    assert_real_checkpoint_is_verified(ckpt, tmp_path / "copies")
    resumed_cfg = run_cfg(path, tmp_path / "ck2", "run.steps=4", f"run.resume_from={ckpt}")
    roles = build(resumed_cfg, str(Path(path).resolve()))
    try:
        from replay_rl.driver.trainer import ledger_for
        ledger = ledger_for(resumed_cfg)
        assert Checkpointer(roles.handles, resumed_cfg.run.output_dir, None).resume(ckpt, ledger) == 4
        assert ledger.k_train == 4 * 32
        state = roles.handles.learners.full_state()[0]
        assert all(torch.equal(state[k], saved[k]) for k in saved)
        stats = roles.handles.replay.shard_stats()
        assert [s.size for s in stats] == [m["counters"]["stats"]["size"] for m in manifests]
        assert [s.inserts for s in stats] == [m["counters"]["stats"]["inserts"] for m in manifests]
    finally:
        roles.shutdown()


def assert_real_checkpoint_is_verified(ckpt: Path, copies: Path) -> None:
    """The DeepSpeed files of a real save are in its manifest; a changed one, or a pickle planted beside them, is
    refused by the start that would resume it (before Ray, before any load), in one line naming the file."""
    from replay_rl.driver.checkpoints import MANIFEST, verify
    from replay_rl.driver.run_folder import start_run

    listed = json.loads((ckpt / MANIFEST).read_text())["sha256"]
    assert {"latest", "step_4/mp_rank_00_model_states.pt", "step_4/zero_pp_rank_1_mp_rank_00_optim_states.pt",
            "zero_to_fp32.py"} <= set(listed)
    verify(ckpt)
    for name, change in (("step_4/mp_rank_00_model_states.pt", lambda f: f.write_bytes(f.read_bytes()[:-1] + b"x")),
                         ("step_4/zero_pp_rank_2_mp_rank_00_optim_states.pt", lambda f: torch.save({}, f))):
        copy = copies / name.replace("/", "_") / "step_4"
        shutil.copytree(ckpt, copy)
        change(copy / name)
        cfg = RunConfig.load(None, [f"run.output_dir={copies / 'out'}", f"run.resume_from={copy}"])
        with pytest.raises(ConfigError, match=rf"^checkpoint {copy} refused: {name} (does not match|is not listed)"):
            start_run(cfg, copies / "out")


@pytest.mark.parametrize("correction", ["tis", "icepop", "mis"])
def test_each_off_policy_correction_trains_the_testbed_for_20_steps(ray_cluster, warm_model, tmp_path, correction):
    # 20 steps: stale, replayed rollouts from step 2 on (50 once; cut for the suite's 25 minutes)
    # mis also vetoes negatives older than one version (learner.loss.stale_negatives): the batch ages reach the
    # learner and the rule's share is logged, at no extra run
    path, _ = warm_model
    out = tmp_path / correction
    stale = ["learner.loss.stale_negatives={max_age: 1, weight: 0}"] if correction == "mis" else []
    # tis also trains on the smaller batch (learner.drop_zero_advantage): the ledger charges the rollouts trained
    drop = ["learner.drop_zero_advantage=true"] if correction == "tis" else []
    # one generator and one rank: the staleness comes from the emulated pace, not from the actors' count
    final = train(run_cfg(path, out, "run.steps=20", "run.eval_every=20", "run.eval_prompts=20",
                          "cluster.generators=1", "cluster.learners=1",
                          f"learner.loss.correction={correction}", "learner.loss.correction_cap=1.5", *stale, *drop))
    rows = read_metrics(out / "metrics.jsonl", "train")
    assert final["step"] == 20 and [r["step"] for r in rows] == list(range(1, 21))
    assert all(0 < r["correction/ess"] <= 1 + 1e-9 and 0 <= r["correction/changed_fraction"] <= 1 for r in rows)
    assert all(np.isfinite(r["batch/loss"]) for r in rows)
    assert max(r["correction/changed_fraction"] for r in rows) > 0  # replayed, stale rollouts get corrected
    if stale:  # none at step 1 (every rollout fresh), some once the buffer holds older ones
        assert rows[0]["stale/negative_fraction"] == 0 and max(r["stale/negative_fraction"] for r in rows) > 0
    if drop:  # a batch's zero-advantage rollouts are left out, and K_train counts only the rest
        b = run_cfg(path, out).learner.batch_size
        shares = [r["batch/trained_share"] for r in rows]
        assert shares == pytest.approx([1 - r["batch/zero_variance_share"] for r in rows]) and min(shares) < 1
        assert [r["ledger/k_train"] for r in rows] == np.cumsum([round(s * b) for s in shares]).tolist()
