"""What a study trial does with the run folder it finds (runs.prepare): a trial run again after its driver died
keeps a finished run, extends or resumes one that can, and starts over in an emptied folder otherwise; and the
package's countdown testbed is the repository's."""

import json
from pathlib import Path

from replay_rl.config import RunConfig
from replay_rl.driver.checkpoints import STATE_FILE
from replay_rl.driver.run_folder import RUN_FILE
from replay_rl.study.runs import prepare
from replay_rl.study.specs import TASKS

ROOT = Path(__file__).parents[2]


def folder(out: Path, steps: int, *, ended: bool, checkpoint: int | None = None) -> None:
    out.mkdir(parents=True)
    rows = [{"step": s, "kind": "train", "time": 0.0} for s in range(1, steps + 1)]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if ended:
        (out / "replay_stats.json").write_text("{}")
    if checkpoint is not None:
        (out / "checkpoints" / f"step_{checkpoint}").mkdir(parents=True)
        (out / "checkpoints" / f"step_{checkpoint}" / STATE_FILE).write_text("{}")


def spec(out: Path, steps: int = 4) -> RunConfig:
    return RunConfig.load(None, [f"run.output_dir={out}", f"run.steps={steps}"])


def test_prepare_keeps_a_finished_run_resumes_what_it_can_and_empties_a_partial_one(tmp_path):
    folder(tmp_path / "done", 4, ended=True)
    assert prepare(spec(tmp_path / "done")) is None
    folder(tmp_path / "short", 4, ended=True)  # finished at 4 of a longer budget: extended from its final checkpoint
    assert prepare(spec(tmp_path / "short", 8)).run.resume_from == "auto"
    folder(tmp_path / "saved", 3, ended=False, checkpoint=2)  # stopped at 3, its own checkpoint at 2
    cfg = prepare(spec(tmp_path / "saved"))
    assert cfg.run.resume_from == "auto" and (tmp_path / "saved" / "metrics.jsonl").is_file()
    folder(tmp_path / "partial", 3, ended=False)  # stopped with nothing to resume from: a fresh start
    cfg = prepare(spec(tmp_path / "partial"))
    assert cfg.run.resume_from is None and not (tmp_path / "partial").exists()
    assert prepare(spec(tmp_path / "never")).run.output_dir == str(tmp_path / "never")


def test_a_finish_mark_of_another_run_does_not_finish_the_run_the_folder_holds(tmp_path):
    """replay_stats.json is the mark of a finished run; one naming another run id than the folder's (left by an
    earlier run) does not count: before, any mark did, and the folder's run was kept as finished."""
    folder(tmp_path / "run", 4, ended=True, checkpoint=2)
    (tmp_path / "run" / RUN_FILE).write_text(json.dumps({"run_id": "now"}))
    (tmp_path / "run" / "replay_stats.json").write_text(json.dumps({"run_id": "earlier", "step": 4}))
    assert prepare(spec(tmp_path / "run")).run.resume_from == "auto"  # resumed from its checkpoint, not kept
    (tmp_path / "run" / "replay_stats.json").write_text(json.dumps({"run_id": "now", "step": 4}))
    assert prepare(spec(tmp_path / "run")) is None


def test_the_packaged_testbeds_are_the_repositorys():
    assert Path(TASKS["countdown"]).read_text() == (ROOT / "configs" / "tiny_cpu_countdown.yaml").read_text()
    assert Path(TASKS["smollm2"]).read_text() == (ROOT / "configs" / "smollm2_135m_cpu.yaml").read_text()
