"""Generator: a Ray actor that loops prompts → G completions → rewards → group advantages → rollouts → insert,
and picks up newly published weights between backend calls. It knows only the backend protocol, the task, the
replay client and the weight subscriber."""

from __future__ import annotations

import time

import numpy as np
import ray
import torch

from replay_rl.config import RunConfig
from replay_rl.config.replay_specs import pace_for
from replay_rl.generation.backend import sampling_params
from replay_rl.generation.factory import make_backend
from replay_rl.generation.reports import GeneratorStats
from replay_rl.models.hf_folder import load_tokenizer
from replay_rl.replay.client import ReplayClient
from replay_rl.replay.limits import call_number, route
from replay_rl.replay.prompt_pool import prompt_source
from replay_rl.rollout import FINISH_LENGTH, RolloutBatch
from replay_rl.sync.base import load_if_newer
from replay_rl.sync.factory import make_weight_sync
from replay_rl.sync.weight_check import WeightCheck, probe_gap
from replay_rl.tasks import make_task
from replay_rl.tasks.scoring import encode_prompts, score_groups, zero_variance_groups
from replay_rl.tasks.weight_probe import weight_probe


def calls_dealt(generator_id: int, all_calls: int, generators: int) -> int:
    """How many of the first `all_calls` calls fall to this generator: calls are dealt round-robin, call n to
    generator n mod W (wait_for_budget's numbering)."""
    return max(0, -(-(all_calls - generator_id) // generators))


class GeneratorImpl:
    def __init__(self, cfg: RunConfig, generator_id: int, model_path: str, shards: list, board,
                 first_call: int = 0, reports=None) -> None:
        """first_call: calls already made at this position (a replacement for a generator that died keeps its
        turn in the pace instead of starting from 0 and overshooting it). reports: a GeneratorReports to push
        this generator's stats to, before each call and after each weight load."""
        torch.set_num_threads(1)  # several roles share few cores; one thread each avoids oversubscription
        torch.manual_seed(seed := cfg.run.seed * 7919 + generator_id)
        self.cfg, self.id, self.reports = cfg, generator_id, reports
        self.backend = make_backend(cfg.generation, cfg.model, model_path, bucket_mb=cfg.sync.bucket_mb, seed=seed)
        self.tokenizer = load_tokenizer(model_path)
        self.task = make_task(cfg.task, cfg.task.split_seed)
        self.prompts = prompt_source(self.task, cfg.generation.prompt_replay)  # fresh, or some replayed
        self.client = ReplayClient(shards)
        self.weights = make_weight_sync(cfg.sync, "subscriber", board)
        self.params = sampling_params(cfg.generation)
        self.pace = pace_for(cfg)  # None: generate as fast as the hardware allows
        self.probe = weight_probe(self.task, cfg.model.chat_template, self.tokenizer) if cfg.sync.weight_check else None
        self._unchecked = self._checked = None  # the loaded handle not yet checked; the newest WeightCheck
        self._zero_variance = 0
        self._stop = False
        self._groups = self._rollouts = self._loads = 0
        self.start_at(first_call)
        self._busy = self._load_s = 0.0
        self._t0 = self._last_poll = time.perf_counter()

    def start_at(self, calls: int) -> None:
        """Take this generator's turn in the pace after `calls` calls (a replacement, or a resumed run), instead
        of starting from 0 and generating again what the schedule already had. Another start draws other prompts."""
        self._calls = calls
        self.rng = np.random.default_rng([self.cfg.run.seed, self.id, *([calls] if calls else [])])

    def join_weight_group(self, host: str, port: int, rank: int, world_size: int) -> None:
        """Form the broadcast group with learner rank 0 and the other generators (sync.type=nccl)."""
        self.weights.connect(host, port, rank, world_size)

    def refresh_weights(self, ask: bool = False, in_flight: bool = False) -> int:
        """Load the latest published weights if they are newer than ours; returns the version loaded. The poll
        reads the board's answer to a call left waiting there (no round trip); ask: ask the board now instead.
        in_flight: a generate call is running, so the weight check waits for its end (check_weights)."""
        t0 = time.perf_counter()
        if (handle := load_if_newer(self.weights, self.backend, self.weights.latest() if ask else None,
                                    self.cfg.sync.timeout_s)) is not None:
            self._loads += 1
            self._load_s += time.perf_counter() - t0
            self._unchecked = handle
            if not in_flight:
                self.check_weights()
            self.report()  # the driver's generator_version_min follows loads, not only calls
        return self.backend.version

    def check_weights(self) -> WeightCheck | None:
        """The weight-path check of the version loaded last (sync/weight_check.py): score the probe set with the
        backend and compare with the learner's log-probs published with it. Skipped for a version already replaced
        (the newer one is checked instead) or published without a probe."""
        handle, self._unchecked = self._unchecked, None
        if handle is None or handle.probe is None or self.probe is None or handle.version != self.backend.version:
            return None
        t0 = time.perf_counter()
        gap = probe_gap(handle.probe, self.backend.score(self.probe))
        self._checked = WeightCheck(self.id, handle.version, *gap, time.perf_counter() - t0)
        return self._checked

    def await_version(self, version: int) -> int:
        """Load weights until this generator holds at least `version`: a resumed run's first publish, which under
        sync.type=nccl every member must receive together. Bounded by sync.timeout_s."""
        deadline = time.monotonic() + self.cfg.sync.timeout_s
        while self.refresh_weights() < version:
            if time.monotonic() > deadline:
                raise TimeoutError(f"generator {self.id}: weights of version {version} did not arrive in "
                                   f"sync.timeout_s={self.cfg.sync.timeout_s:g}s")
            time.sleep(0.01)
        return self.backend.version

    def _refresh_in_flight(self) -> None:
        # polled between decoding steps; the board is asked at most every 50 ms
        if time.perf_counter() - self._last_poll >= 0.05:
            self._last_poll = time.perf_counter()
            self.refresh_weights(in_flight=True)

    def wait_for_budget(self) -> bool:
        """Emulated cluster: wait (picking up new weights) until the pace budget reaches this generator's next call,
        so rollouts are generated just before they are owed, from the newest weights. False once stopped."""
        call = call_number(self.id, self._calls, self.cfg.cluster.generators)
        per_call = self.cfg.generation.rollouts_per_call
        while self.pace is not None and not self._stop and not self.pace.may_start(call, per_call,
                                                                                      self.backend.version):
            time.sleep(0.005)
            self.refresh_weights()
        return not self._stop

    def generate_once(self) -> int:
        """One backend call: prompts_per_call groups of G rollouts, scored and inserted. Returns rollouts made."""
        if not self.wait_for_budget():
            return 0
        # this call's deal over shards: the one the pace owes each shard by (limits.route)
        owner = route(self.id, self._calls, self.cfg.cluster.generators, self.cfg.generation.rollouts_per_call,
                      self.cfg.cluster.learners)
        call = call_number(self.id, self._calls, self.cfg.cluster.generators)
        self._calls += 1
        self.refresh_weights()
        problems = self.prompts.draw(self.cfg.generation.prompts_per_call, self.rng)
        prompts = encode_prompts(self.tokenizer, problems, self.cfg.model.chat_template)
        t0, loading_before = time.perf_counter(), self._load_s
        version_before = self.backend.version
        groups = self.backend.generate(prompts, self.params, on_step=self._refresh_in_flight)
        self._busy += time.perf_counter() - t0 - (self._load_s - loading_before)  # in-flight loads are sync time
        self.check_weights()  # of a version loaded in flight, now that no request runs
        # versions: the call started on version_before's weights; a completion may finish on newer ones (in flight)
        first = self.id * 10**9 + self._groups  # group ids unique across generators
        rollouts = score_groups(self.task, self.tokenizer, problems, prompts, groups, range(first, first + len(groups)),
                                lambda c: (min(version_before, c.version), c.version, version_before), self.id,
                                self.cfg.generation.advantage_ddof)
        self._groups += len(groups)
        g = self.cfg.generation.group_size
        self.prompts.observe(problems, [[r.reward for r in rollouts[i:i + g]] for i in range(0, len(rollouts), g)])
        self._zero_variance += zero_variance_groups(rollouts, self.cfg.generation.group_size)
        if self.reports is not None and self.cfg.run.log_samples_every:
            self.reports.put_samples.remote(self.id, self.as_text(rollouts[:self.cfg.generation.group_size]))
        self.client.insert(RolloutBatch.from_rollouts(rollouts), owner, call)
        self._rollouts += len(rollouts)
        return len(rollouts)

    def as_text(self, group) -> tuple[dict, ...]:
        """A group's completions as a person reads them (run.log_samples_every), special tokens shown; a text past
        4000 characters keeps its first 2000 and last 2000."""
        def text(ids) -> str:
            s = self.tokenizer.decode(ids)
            return s if len(s) <= 4000 else f"{s[:2000]} … {s[-2000:]}"

        prompt = text(group[0].prompt_ids) if group else ""
        return tuple({"generator": self.id, "version": r.policy_version, "prompt": prompt,
                      "completion": text(r.completion_ids), "reward": r.reward,
                      "advantage": r.advantage, "finish": "length" if r.finish == FINISH_LENGTH else "stop"}
                     for r in group)

    def backend_generate(self, prompts, params):
        """Direct access to the backend (tests and debugging); the loop does not use it."""
        return self.backend.generate(prompts, params)

    def run(self) -> GeneratorStats:
        """Generate until stop(); the driver holds this call's ref and re-raises if it fails."""
        self.refresh_weights(ask=True)  # a replacement for a generator that died starts from the newest weights
        while not self._stop:
            self.report()
            self.generate_once()
        self.client.flush()
        return self.stats()

    def report(self) -> None:
        if self.reports is not None:
            self.reports.put.remote(self.stats())  # not waited on: the driver reads whatever arrived

    def stop(self) -> None:
        self._stop = True

    def stats(self) -> GeneratorStats:
        return GeneratorStats(self.id, self._rollouts, self.backend.tokens_generated(), self._busy,
                              time.perf_counter() - self._t0, self.backend.version, self._loads, self._load_s,
                              self._calls, self._checked, self._zero_variance, self.prompts.replayed)


    def pid(self) -> int:
        """The worker process id (fault-injection tests signal it)."""
        import os

        return os.getpid()


# max_concurrency=2: stats() and stop() are served while run() loops in the other thread
Generator = ray.remote(max_concurrency=2, max_restarts=0)(GeneratorImpl)
