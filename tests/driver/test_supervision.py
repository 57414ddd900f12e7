"""Tier 1: the right role named, and the cause kept. A role's death is named by the role it plays, never by Ray's
text, also when it reaches the driver through the call that saw it (a generator's insert into a dead shard is a
shard's death, not the generator's); error.log keeps every restart's cause and the final failure, remote tracebacks
included."""

import time

import pytest
import ray

from replay_rl.driver import session, trainer
from replay_rl.config import RunConfig
from replay_rl.driver.failures import RunFailed
from replay_rl.driver.supervision import death_of
from tests.stand_ins import StandIn, stand_in_roles, stand_ins  # noqa: F401 - fixtures

pytestmark = pytest.mark.ray


@pytest.fixture
def roles_with(stand_in_roles):
    """Roles of stand-ins, `role` played by an actor of its own, which the test kills."""
    started: list = []

    def make(role: str, mode: str = "fine"):
        roles = stand_in_roles()
        actor = StandIn.remote(mode)
        ray.get(actor.__ray_ready__.remote())
        started.append(actor)
        if role == "replay shard 0":
            roles.handles.replay.shards[0] = actor
        elif role == "generator 0":
            roles.handles.slots[0].actor = actor
        else:
            name = {"weight board": "board", "generator reports": "reports", "evaluator": "evaluator"}[role]
            setattr(roles.handles, name, actor)
        return roles, actor

    yield make
    for actor in started:
        ray.kill(actor)


@pytest.mark.parametrize("role", ["replay shard 0", "weight board"])
def test_a_role_dead_under_a_generators_call_is_named_not_the_generator(roles_with, role):
    """A generator's call into a shard (or the board) that dies fails with RayTaskError(ActorDiedError): that was
    caught as the generator's own death, so with W >= 4 a shard's death ended the run on "max_generator_restarts
    used up". It is the shard's (the board's) death, named, for run.max_restarts."""
    roles, victim = roles_with(role, "hang")
    generator = StandIn.remote()
    roles.handles.slots = roles.handles.slots[:1]  # one generator, whose call is in the dying role
    roles.handles.slots[0].actor, roles.handles.slots[0].run = generator, generator.watch.remote(victim)
    ray.kill(victim)
    ray.wait([roles.handles.slots[0].run], timeout=30)
    try:
        with pytest.raises(RunFailed) as failed:
            roles.supervisor.check_generators()
    finally:
        ray.kill(generator)
    assert failed.value.death == f"{role} died" and roles.handles.restarts == 0
    assert str(failed.value).startswith(f"{role} died; resume with run.resume_from=auto")


@pytest.mark.parametrize("call,line", [("lose_weights", "lost its weights"), ("half_load", "half-loaded its weights")])
def test_a_generator_whose_weights_are_gone_is_replaced_like_a_dead_one(stand_in_roles, capsys, call, line):
    """WeightsGone (a lost version and no newer one within sync.timeout_s) ended the run as "generator 0 failed";
    it is the generator's death: replaced, its replacement loads the board's newest. So is a vLLM stream that broke
    off part way (HalfLoaded), which used to end the run the same way."""
    roles = stand_in_roles("run.max_generator_restarts=2")
    roles.handles.slots = roles.handles.slots[:1]
    lost = StandIn.remote()
    roles.handles.slots[0].actor, roles.handles.slots[0].run = lost, getattr(lost, call).remote()
    replacement = StandIn.remote()
    roles.supervisor.spawn = lambda i, calls: replacement
    ray.wait([roles.handles.slots[0].run], timeout=30)
    try:
        roles.supervisor.check_generators()
        assert roles.handles.restarts == 1 and roles.handles.slots[0].actor is replacement
        assert f"generator 0 {line}: replaced (restart 1 of 2)" in capsys.readouterr().err
    finally:
        ray.kill(replacement)
        ray.kill(lost)


def death_seen_by_a_call(actor, within_s: float = 30) -> ray.exceptions.RayActorError:
    """ray.kill is asynchronous: a call sent just after it can still be served (CI saw one), so call until the
    death shows."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.stats.remote(), timeout=within_s)
        except ray.exceptions.RayActorError as e:
            return e
        time.sleep(0.1)
    pytest.fail(f"a killed actor still answered after {within_s} s")


@pytest.mark.parametrize("role", ["generator reports", "weight board", "evaluator"])
def test_a_role_with_no_restart_of_its_own_is_named_by_its_role(roles_with, role):
    """Ray's text ("The actor is dead because ...") stays in error.log; the line names the role, as a death
    (run.max_restarts restarts every role)."""
    roles, victim = roles_with(role)
    ray.kill(victim)
    failure = death_of(roles.handles, death_seen_by_a_call(victim))
    assert failure.death == f"{role} died" and "The actor" not in str(failure)


def test_an_evaluator_dead_in_its_eval_is_named_with_the_phase(roles_with):
    roles, evaluator = roles_with("evaluator", "hang")
    roles.evals.start(4, {})
    ray.kill(evaluator)
    with pytest.raises(RunFailed) as failed:
        roles.evals.finished(wait=True)
    assert failed.value.death == "evaluator died during the eval of step 4"


@ray.remote(num_cpus=0)
def closed_connection():
    raise ConnectionError("gloo: connection closed by peer (rank 1)")


def test_error_log_keeps_every_restarts_cause_with_its_remote_traceback(ray_cluster, tmp_path, monkeypatch, capsys):
    """train() restarts on a death and logs its cause in full; a failure past run.max_restarts is appended after
    it, so error.log reads as the run's history of faults."""
    cfg = RunConfig.load(None, [f"run.output_dir={tmp_path}", "run.max_restarts=1", "model.path=unused"])
    attempts: list[int] = []

    def run_roles(cfg, model_path, resume, restarts, progress, place_by, run_id, first_start):
        attempts.append(restarts)
        try:
            ray.get(closed_connection.remote())
        except ray.exceptions.RayTaskError as e:
            raise RunFailed(f"learner rank 1 died in attempt {restarts}", f"learner rank 1 died ({restarts})") from e

    monkeypatch.setattr(trainer, "preflight", lambda cfg: None)
    monkeypatch.setattr(trainer, "ensure_model", lambda cfg: tmp_path)
    monkeypatch.setattr(trainer, "run_roles", run_roles)
    with pytest.raises(RunFailed) as failed:
        trainer.train(cfg)
    line = session.describe_failure(failed.value, tmp_path / "error.log")
    assert attempts == [0, 1] and "restarts are used up" in line
    assert "restart 1 of 1: learner rank 1 died (0); every role restarts from step 0" in capsys.readouterr().err
    log = (tmp_path / "error.log").read_text()
    restart, final = log.index("=== restart 1 of 1: learner rank 1 died (0)"), log.index("=== run failed: learner")
    assert restart < final and log.count("gloo: connection closed by peer (rank 1)") >= 2
    assert log.count("ray::closed_connection") >= 2  # the remote traceback, not one line of it
    assert "The above exception was the direct cause" in log[final:]
