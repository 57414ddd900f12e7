"""Tier 1: the Checkpointer's save-and-commit protocol with stand-in roles (their hangs are in
test_bounded_phases.py): the run id is staged into the checkpoint and committed with it, a run with no id writes
none, and the final checkpoint is the one this attempt saved only when it is provably this run's."""

import json

import pytest

from replay_rl.driver.checkpointer import Checkpointer
from replay_rl.driver.checkpoints import STATE_FILE, verify
from replay_rl.driver.run_folder import RUN_FILE, read_run_id
from replay_rl.driver.trainer import ledger_for
from tests.stand_ins import stand_in_roles, stand_ins  # noqa: F401 - fixtures

pytestmark = pytest.mark.ray


def test_a_save_stages_the_run_id_and_the_final_checkpoint_is_the_one_saved(stand_in_roles, tmp_path):
    roles = stand_in_roles("run.keep_checkpoints=1")
    checkpointer, ledger = Checkpointer(roles.handles, tmp_path, "abcd"), ledger_for(roles.handles.cfg)
    first = checkpointer.save(2, ledger)
    saved = checkpointer.save(4, ledger)
    verify(saved)  # committed whole, with its manifest
    assert read_run_id(saved) == "abcd" and json.loads((saved / STATE_FILE).read_text())["step"] == 4
    assert not first.exists()  # run.keep_checkpoints=1: the older one went
    before = saved.stat().st_ino
    assert checkpointer.final(4, ledger, saved) == saved and saved.stat().st_ino == before  # not saved again


def test_a_run_without_an_id_writes_none_and_adopts_nothing(stand_in_roles, tmp_path):
    roles = stand_in_roles()
    checkpointer, ledger = Checkpointer(roles.handles, tmp_path, None), ledger_for(roles.handles.cfg)
    saved = checkpointer.save(2, ledger)
    assert not (saved / RUN_FILE).exists()  # was {"run_id": null}
    before = saved.stat().st_ino
    # None == None is no proof that the checkpoint on disk is this attempt's: it saves anew
    assert checkpointer.final(2, ledger, saved) == saved and saved.stat().st_ino != before
