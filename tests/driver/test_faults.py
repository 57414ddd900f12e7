"""Tier 3 faults on real Ray actors: a generator killed mid-run is replaced, a replay shard killed mid-run is
restored in place from its live snapshot, and a shard and a generator paused mid-run are found hung and recovered the
same ways (one run); paused generators past their restarts stop the run with the stall's line, a shard without
restarts that dies is named, a run resumed with resume_from=auto continues its metrics file, and a dead learner
rank, or a dead generator of a sync.type=nccl broadcast group (the broadcast's end-to-end test), restarts every role
from the newest checkpoint (run.max_restarts), or is named once those are used up."""

import json
import os
import re
import signal
import time

import pytest

from replay_rl.driver.checkpoints import STATE_FILE, write_manifest
from replay_rl.driver.closing import closing_summary
from replay_rl.metrics import read_metrics
from replay_rl.replay.budget_check import k_inf_past_budget
from replay_rl.driver.roles import RunFailed
from replay_rl.driver.trainer import train
from tests.faults import ONE_GENERATOR, continued_after, run_cfg, worker_pids
from tests.runs import copy_run

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.deepspeed]


def test_killed_or_paused_roles_are_recovered_in_place(ray_cluster, warm_model, tmp_path, capsys):
    """One run, four faults its roles absorb without a restart: a generator SIGKILLed at step 2 is replaced (it
    loads the newest weights), a replay shard SIGKILLed at step 5 is restored from its live snapshot, and a shard and
    a generator SIGSTOPped at step 8 are found hung once step 9 stalls for run.stall_timeout_s, then killed and
    recovered the same ways; the run reaches step 14 with every row once and counters that add up."""
    path, _ = warm_model
    seen: dict = {}
    paused: list[int] = []

    def fault(step, record):
        if step == 2:
            os.kill(worker_pids("GeneratorImpl")[0], signal.SIGKILL)
            seen["generator_killed_at"] = time.monotonic()
        if step == 5:  # shards snapshotted themselves while serving version 4
            seen["k_inf_before_shard_kill"] = record["ledger/k_inf"]
            os.kill(worker_pids("ReplayShard")[-1], signal.SIGKILL)
            seen["shard_killed_at"] = time.monotonic()
        if step == 8:  # hung, not dead: a stuck actor, a wedged device or filesystem
            seen["k_inf_before_pause"] = record["ledger/k_inf"]
            paused.extend([worker_pids("ReplayShard")[0], worker_pids("GeneratorImpl")[0]])
            for pid in paused:
                os.kill(pid, signal.SIGSTOP)
            seen["paused_at"] = time.monotonic()
        if step == 9:
            seen["pause_next_step_s"] = time.monotonic() - seen["paused_at"]
        for role, counter, kill_step in (("generator", "ledger/generator_restarts", 2),
                                         ("shard", "buffer/shard_restarts", 5)):
            if f"{role}_killed_at" in seen and record[counter] >= 1 and f"{role}_recovered_s" not in seen:
                seen[f"{role}_recovered_s"] = time.monotonic() - seen[f"{role}_killed_at"]
            if step == kill_step + 1:  # the run went on: the next learner step is done
                seen[f"{role}_next_step_s"] = time.monotonic() - seen[f"{role}_killed_at"]

    out = tmp_path / "faults"
    with continued_after(paused):
        # a checkpoint at step 8: its ranks draw no batch ahead, so step 9 samples the paused shard and stalls
        # (drawn ahead, step 9 would go on and the shard's stats call be the first to go unanswered)
        final = train(run_cfg(path, out, "run.steps=14", "replay.snapshot_every_steps=2", "run.stall_timeout_s=20",
                              "run.checkpoint_every=8"), fault)
    err = capsys.readouterr().err
    rows = read_metrics(out / "metrics.jsonl", "train")
    assert final["step"] == 14 and [r["step"] for r in rows] == list(range(1, 15))
    assert final["ledger/k_train"] == 14 * 32
    # generators: replaced after the kill and after the pause; a replacement loads the newest weights
    assert final["ledger/generator_restarts"] == 2 and "generator_recovered_s" in seen
    assert final["ledger/generator_version_min"] >= 3
    assert re.search(r"generator [01] died: replaced \(restart 1 of 3\)", err), err
    hung = r"did not answer in 10s after 20s without a learner step"
    assert re.search(rf"generator [01] {hung}: replaced \(restart 2 of 3\)", err), err
    # shards: restored after the kill and after the pause; K_inf charges the rollouts lost too, so it never goes back
    assert final["buffer/shard_restarts"] == 2 and "shard_recovered_s" in seen
    assert re.search(rf"replay shard [01] {hung}: killed, restarts from its live snapshot \(restart [12] of 3\)", err)
    # the SIGKILLed one, which Ray restarted in place: said once, as a replaced generator is (soak v2: it was silent)
    restored = r"replay shard [01] died: restored in place from its live snapshot \(restart 1 of 3;"
    assert len(re.findall(restored, err)) == 1, err
    assert all(a["ledger/k_inf"] <= b["ledger/k_inf"] for a, b in zip(rows, rows[1:]))
    assert 0 <= final["buffer/rollouts_lost"] <= seen["k_inf_before_pause"] <= final["ledger/k_inf"]
    assert final["ledger/k_inf"] >= 8 * 32 / final["buffer/replay_ratio"] - 1e-9
    # each restart is counted beside the shard's snapshot (pids say nothing about shard ids: one shard or both)
    restarted = list((out / "replay_live").glob("shard_*.restarts"))
    assert sum(int(p.read_text()) for p in restarted) == 2
    assert all((p.with_suffix("") / "manifest.json").is_file() for p in restarted)
    print(f"generator kill → replaced after {seen['generator_recovered_s']:.1f}s, next step done after "
          f"{seen['generator_next_step_s']:.1f}s; shard kill → restored in place after {seen['shard_recovered_s']:.1f}s, "
          f"next step done after {seen['shard_next_step_s']:.1f}s; shard + generator pause → next step done after "
          f"{seen['pause_next_step_s']:.1f}s (stall_timeout_s 20 + hung_probe_s 10 + restarts); "
          f"{final['buffer/rollouts_lost']} rollouts lost")
    print(*[line for line in err.splitlines() if ": replaced" in line or ": killed" in line], sep="\n")


def test_paused_generators_past_their_restarts_stop_with_the_stall_line(ray_cluster, warm_model, tmp_path):
    """Hung generators with no restart left end the run with one line: who waits on what, then why no recovery."""
    path, _ = warm_model
    paused: list[int] = []

    def pause_at_step_2(step, record):
        if step == 2:
            paused.extend(worker_pids("GeneratorImpl"))
            for pid in paused:
                os.kill(pid, signal.SIGSTOP)

    t0 = time.monotonic()
    with continued_after(paused), pytest.raises(RunFailed) as failed:
        train(run_cfg(path, tmp_path / "stall", "run.steps=50", "run.stall_timeout_s=10",
                      "run.max_generator_restarts=0", ONE_GENERATOR), pause_at_step_2)
    message = str(failed.value)
    assert "\n" not in message and message.startswith("stalled: no learner step for 10s")
    assert re.search(r"shard 0: .*(owed to this shard|eligible items)", message), message
    assert "generator 0 no answer in 10s (paused or busy)" in message
    assert message.endswith("generator 0 did not answer in 10s after 10s without a learner step and "
                            "run.max_generator_restarts=0 restarts are used up"), message
    assert time.monotonic() - t0 < 180


def test_a_shard_past_its_restarts_is_named(ray_cluster, warm_model, tmp_path):
    """A shard that dies with no restarts left ends the run with one line naming it (a dead learner rank is named
    by the max_restarts test below)."""
    path, _ = warm_model
    killed: list[float] = []

    def kill_at_step_2(step, record):
        if step == 2:
            os.kill(worker_pids("ReplayShard")[-1], signal.SIGKILL)
            killed.append(time.monotonic())

    with pytest.raises(RunFailed, match=r"^replay shard [01] died; resume with run.resume_from=auto"):
        train(run_cfg(path, tmp_path / "dead", "run.steps=50", "run.max_shard_restarts=0", ONE_GENERATOR),
              kill_at_step_2)
    print(f"shard kill → one-line RunFailed in {time.monotonic() - killed[0]:.1f}s")


def test_resume_auto_continues_the_same_metrics_file(ray_cluster, warm_model, checkpointed_run, tmp_path):
    path, _ = warm_model
    # a finished 4-step run, a checkpoint and an eval every 2 steps (the session's, copied: this test edits it)
    out = copy_run(checkpointed_run, tmp_path / "auto")
    first = read_metrics(out / "metrics.jsonl", "train")[-1]
    # as if generators had inserted two calls' rollouts while the step-4 checkpoint was written, after the ledger
    # read K_inf: the buffer's snapshot holds them, so the resumed generators must not make them again
    state_file = out / "checkpoints" / "step_4" / STATE_FILE
    state = json.loads(state_file.read_text())
    state["ledger"]["k_inf"] -= 2 * run_cfg(path, out).generation.rollouts_per_call
    state_file.write_text(json.dumps(state))
    write_manifest(state_file.parent)  # an edit by hand, adopted as `checkpoints trust` would
    # as if the evaluator had died in step 4's eval: the resume makes it again (the soak's trial 8 lost it)
    metrics = out / "metrics.jsonl"
    metrics.write_text("".join(line for line in metrics.read_text().splitlines(keepends=True)
                               if (row := json.loads(line))["kind"] != "eval" or row["step"] != 4))
    # as if the run had died after step 4 but its last checkpoint is step 4: resume and run to 6
    final = train(run_cfg(path, out, "run.steps=6", "run.checkpoint_every=2", "run.eval_every=2",
                          "run.resume_from=auto"))
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows if r["kind"] == "train"] == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in rows if r["kind"] == "eval"] == [0, 2, 4, 6]
    assert final["ledger/k_train"] == 6 * 32 and final["ledger/k_inf"] >= first["ledger/k_inf"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_2", "step_4", "step_6"]
    # its closing lines say where it resumed, where they read as a fresh run's before
    assert final["resumed_from"] == str(out / "checkpoints" / "step_4")
    assert closing_summary(run_cfg(path, out), final).splitlines()[0] == (
        f"resumed from {out / 'checkpoints' / 'step_4'}: this command ran steps 5–6; the lines below cover the "
        "whole run from step 0")
    # and K_inf within the pace's budget: made again, the two calls the edit hid took it past (the defect the edit
    # stands for). An uninterrupted run of its own was compared here before (~80 s); K_inf cannot fall below what
    # the learner needed, as the shards hold the learner until it is inserted, so this bound is the one that can fail
    assert not k_inf_past_budget(run_cfg(path, out).pace_setting, [final])


@pytest.mark.parametrize("role, extra", [("LearnerRank", (ONE_GENERATOR,)),
                                         ("GeneratorImpl", ("sync.type=nccl", "sync.backend=gloo"))],
                         ids=["learner-rank", "generator-in-broadcast-group"])
def test_a_dead_role_restarts_every_role_from_the_newest_checkpoint(ray_cluster, warm_model, tmp_path, role, extra):
    """run.max_restarts: a dead learner rank, or a generator whose death breaks the broadcast group, restarts every
    role from the step-4 checkpoint; the run reaches its last step with one row per step, and counts as one. The
    broadcast case is also the end-to-end test of sync.type=nccl (run on gloo here): the generators follow the
    learner's versions before the fault and after the group re-forms."""
    path, _ = warm_model
    seen: dict = {}

    def kill_at_step_5(step, record):
        if step == 5 and "killed_at" not in seen:
            os.kill(worker_pids(role)[-1], signal.SIGKILL)
            seen["killed_at"] = time.monotonic()
        if record["ledger/run_restarts"] == 1 and "recovered_s" not in seen:
            seen["recovered_s"], seen["first_step_after"] = time.monotonic() - seen["killed_at"], step

    out = tmp_path / "restart"
    cfg = run_cfg(path, out, "run.steps=10", "run.checkpoint_every=2", "run.max_restarts=1", *extra)
    final = train(cfg, kill_at_step_5)
    rows = read_metrics(out / "metrics.jsonl")
    train_rows = [r for r in rows if r["kind"] == "train"]
    # K_inf counts each rollout once: by step s no more than the pace's budget (plus the call that crosses it)
    # exists, and the resumed generators do not make again what the checkpoint's buffer already holds
    assert not k_inf_past_budget(cfg.pace_setting, train_rows), rows
    assert [r["step"] for r in train_rows] == list(range(1, 11))
    assert [r["step"] for r in rows if r["kind"] == "eval"] == [0, 10]
    assert final["step"] == 10 and final["ledger/run_restarts"] == 1 and final["ledger/k_train"] == 10 * 32
    # trained again from the checkpoint: step 5 is the first step of the second attempt, and it published weights
    assert seen["first_step_after"] == 5 and final["ledger/generator_version_min"] >= 6
    assert [r["ledger/run_restarts"] for r in train_rows] == [0] * 4 + [1] * 6
    # every step published the whole model; the ledger's count, restored from step 4, goes on: 10 publishes
    assert final["ledger/sync_bytes"] >= 10 * final["sync/publish_bytes"] > 10 * 400_000
    if extra:  # sync.type=nccl on gloo: before the fault too, every generator received broadcast weights
        assert train_rows[3]["ledger/generator_version_min"] >= 2
    print(f"{role} kill → every role restarted from step 4, step 5 done again {seen['recovered_s']:.1f}s later")


def test_a_dead_role_past_max_restarts_stops_with_one_line(ray_cluster, warm_model, tmp_path):
    path, _ = warm_model

    kills: list[int] = []

    def kill_a_rank_in_each_attempt(step, record):
        if record["ledger/run_restarts"] == len(kills):
            kills.append(step)
            os.kill(worker_pids("LearnerRank")[-1], signal.SIGKILL)

    with pytest.raises(RunFailed) as failed:
        train(run_cfg(path, tmp_path / "used_up", "run.steps=50", "run.max_restarts=1", "run.checkpoint_every=1",
                      ONE_GENERATOR),
              kill_a_rank_in_each_attempt)
    assert kills == [1, 2]
    message = str(failed.value)
    # the dead rank is named, not the survivor's symptom (a closed gloo connection), with how to resume
    assert "\n" not in message and re.match(r"learner rank [01] died; resume with run.resume_from=auto \(newest "
                                            r"checkpoint in .*\); run.max_restarts=1 restarts are used up$", message), message
