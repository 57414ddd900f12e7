"""The probe's run: a short synchronous replay loop in one process (no Ray, no DeepSpeed), gradients at probe points.

The paper's synchronous model (§9), on the user's config: each learner step generates R = B·(W/T)/μ rollouts (whole
groups of G, paced so that their running total tracks t·R) with the current weights into a FIFO holding the last H
learner versions (N ≈ H·R), samples B uniformly without repeats, and takes one AdamW step at learner.lr with the
config's loss. B, lr, G, the loss, the task and the model are the config's; (W, T) and μ are cluster.emulate's when
emulated, else cluster.generators/learners and μ measured here. Generation runs in-process on the config's own
generation.backend (generation/factory.py), so a measured μ is that engine's. At each probe point (step t) every buffer rollout (ages 1..H) and a fresh set generated
by θ_t (age 0) get a sketched gradient at θ_t (gradients.py), the loss's clip and ratio stats and a use count;
estimators.py gives σ²(τ), ρ, κ, effective.py σ²_eff(τ), s(τ) and 𝒱(N), status.py whether they can recommend.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from replay_rl.config import ConfigError, RunConfig
from replay_rl.generation.backend import sampling_params
from replay_rl.generation.factory import make_backend
from replay_rl.models.hf_folder import load_model, load_tokenizer
from replay_rl.probe.estimators import Sketches
from replay_rl.probe.gradients import CountSketch, ProbeLearner
from replay_rl.probe.settings import ProbeSettings
from replay_rl.rollout import Rollout, RolloutBatch
from replay_rl.tasks import make_task
from replay_rl.tasks.scoring import encode_prompts, score_groups

RESERVE_S = 45.0  # kept back from the time limit for the bootstrap, the plan draws and the files


class ProbeTimeout(RuntimeError):
    """Not even one probe point fits in the time limit."""


@dataclass
class Timing:
    """Seconds per learner step: generation (inside backend.generate) and training (forward, backward, step)."""

    gen_s: list[float] = field(default_factory=list)
    gen_n: list[int] = field(default_factory=list)
    train_s: list[float] = field(default_factory=list)
    train_n: list[int] = field(default_factory=list)

    def mu(self, idx: np.ndarray | None = None) -> float:
        """(generation seconds per rollout) / (training seconds per rollout): the cost of generating a batch over
        the cost of training on it, as benchmarks/mu_regimes.py measures it."""
        g = np.array([self.gen_s, self.gen_n], float)[:, : len(self.train_s)]
        t = np.array([self.train_s, self.train_n], float)
        if idx is not None:
            g, t = g[:, idx], t[:, idx]
        return float((g[0].sum() / max(g[1].sum(), 1)) / (t[0].sum() / max(t[1].sum(), 1)))

    def mu_interval(self, draws: int, rng: np.random.Generator) -> tuple[float, float]:
        n = len(self.train_s)
        xs = [self.mu(rng.integers(0, n, n)) for _ in range(draws)]
        lo, hi = np.percentile(xs, [2.5, 97.5])
        return float(lo), float(hi)


@dataclass
class ProbeData:
    sketches: Sketches
    mu: dict                 # value, lo, hi, source
    split: tuple[int, int]   # (W, T) the loop was paced at
    emulated: bool
    rollouts_per_step: float
    horizon: int
    steps: int
    points_done: list[int]   # learner steps at which the probe measured
    stopped: str | None      # why the loop ended before its last probe point
    seconds: dict


class _Loop:
    """State of the probe run: model, generator, learner, buffer by version, sketch."""

    def __init__(self, cfg: RunConfig, settings: ProbeSettings, path: str, clock) -> None:
        self.cfg, self.s, self.clock = cfg, settings, clock
        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.backend = make_backend(cfg.generation, cfg.model, path, device, bucket_mb=cfg.sync.bucket_mb,
                                    seed=settings.seed)
        self.tok = load_tokenizer(path)
        self.task = make_task(cfg.task, cfg.task.split_seed)
        self.learner = ProbeLearner(cfg, load_model(path, "float32").to(device), self.tok.pad_token_id)
        self.sketch = CountSketch(self.learner.params, settings.sketch_dim, settings.seed)
        self.rng = np.random.default_rng([settings.seed, cfg.run.seed])
        self.params = sampling_params(cfg.generation)
        self.buffer: dict[int, list[Rollout]] = {}
        self.weights: dict[int, np.ndarray] = {0: self.learner.weights_sketch(self.sketch)}
        self.groups = 0
        self.uses: dict[int, int] = {}  # id(rollout) → times the learner sampled it (issue 30: age vs use)
        self.timing = Timing()

    def generate(self, n_groups: int, version: int) -> tuple[list[Rollout], float]:
        """n_groups prompts × G rollouts from the current weights, in calls of generation.prompts_per_call."""
        out, busy = [], 0.0
        ppc = self.cfg.generation.prompts_per_call
        for start in range(0, n_groups, ppc):
            problems = self.task.sample_train(min(ppc, n_groups - start), self.rng)
            prompts = encode_prompts(self.tok, problems, self.cfg.model.chat_template)
            t0 = time.perf_counter()
            groups = self.backend.generate(prompts, self.params)
            busy += time.perf_counter() - t0
            out += score_groups(self.task, self.tok, problems, prompts, groups,
                                range(self.groups, self.groups + len(groups)), lambda c: (version, version, version), 0)
            self.groups += len(groups)
        return out, busy

    def train(self, version: int) -> float:
        """Sample B without repeats from the buffer, step, publish θ_{version+1} to the generator."""
        pool = [r for v in sorted(self.buffer) for r in self.buffer[v]]
        b = self.cfg.learner.batch_size
        picked = [pool[i] for i in self.rng.choice(len(pool), b, replace=False)]
        for r in picked:
            self.uses[id(r)] = self.uses.get(id(r), 0) + 1
        batch = RolloutBatch.from_rollouts(picked)
        t0 = time.perf_counter()
        self.learner.step(batch)
        busy = time.perf_counter() - t0
        named = ((n, p.data) for n, p in self.learner.model.named_parameters())
        self.backend.load_weights(named, version + 1)
        self.weights[version + 1] = self.learner.weights_sketch(self.sketch)
        return busy

    def measure(self, t: int, point: int, token_count: float, deadline: float) -> dict | None:
        """Sketches of every buffer rollout and of a fresh set at θ_t; None if the deadline passes first."""
        fresh, _ = self.generate(self.s.fresh_groups, t)
        rollouts = [r for v in sorted(self.buffer) for r in self.buffer[v]] + fresh
        got = self.learner.sketches(RolloutBatch.from_rollouts(rollouts), self.sketch, token_count, deadline,
                                    self.clock)
        if got is None:
            return None
        g, cols = got
        h = self.s.horizon
        drift = [np.linalg.norm(self.weights[t] - self.weights[t - a]) if t - a in self.weights else np.nan
                 for a in range(h + 1)]
        return {"g": g, "age": np.array([t - r.policy_version for r in rollouts]),
                "cluster": np.array([r.group_id for r in rollouts]), "probe": np.full(len(rollouts), point),
                "capacity": len(rollouts) - len(fresh), "drift": drift, "columns": cols,
                "uses": np.array([self.uses.get(id(r), 0) for r in rollouts]),
                "rollout": np.array([id(r) for r in rollouts])}  # pairs a rollout's measurements (paired.py)


def _split_and_mu(cfg: RunConfig) -> tuple[tuple[int, int], float | None]:
    e = cfg.cluster.emulate
    if e is not None:
        return (e.generators, e.learners), e.mu
    return (cfg.cluster.generators, cfg.cluster.learners), None


def run_probe(cfg: RunConfig, settings: ProbeSettings, model_path: str, log=print, started: float | None = None
              ) -> ProbeData:
    """The probe loop (module doc), bounded by settings.time_limit_s counted from `started`."""
    clock = time.monotonic
    t_start = started if started is not None else clock()
    deadline = t_start + settings.time_limit_s - RESERVE_S
    torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 2) // 2)))
    torch.manual_seed(cfg.run.seed)
    loop = _Loop(cfg, settings, model_path, clock)
    b, g = cfg.learner.batch_size, cfg.generation.group_size
    (w, t_), mu_cfg = _split_and_mu(cfg)
    # prefill one batch at version 0; its timing gives μ before the loop when it is not emulated
    pre, gen_s = loop.generate(math.ceil(b / g), 0)
    loop.buffer[0] = pre
    token_count = float(np.mean([len(r.completion_ids) for r in pre]))
    mu = mu_cfg
    if mu is None:  # R needs μ before the loop: one forward and backward on the prefill, no step
        mu = (gen_s / len(pre)) / (loop.learner.backward_seconds(RolloutBatch.from_rollouts(pre[:b])) / b)
    r = b * (w / t_) / mu
    h = settings.horizon
    if h * r < b:
        h = math.ceil(b / r) + 1
        log(f"probe: {settings.horizon} versions hold {settings.horizon * r:.0f} rollouts < B = {b}; horizon raised "
            f"to {h}")
        settings = settings.model_copy(update={"horizon": h})
        loop.s = settings
    probe_steps = [h + 1 + k * settings.every for k in range(settings.points)]
    log(f"probe: B={b}, R={r:.1f} rollouts/step at W/T={w}/{t_}, μ={mu:.2f}, horizon H={h} (N≈{h * r:.0f}), "
        f"probe points at steps {probe_steps}")
    parts, done, stopped = [], [], None
    step_s, point_s = [], None
    for t in range(1, probe_steps[-1] + 1):
        nxt = next(p for p in probe_steps if p >= t)
        per_step = np.mean(step_s) if step_s else 1.0
        est_point = point_s if point_s is not None else (h * r + settings.fresh_groups * g) * 3 * per_step / b
        if clock() + (nxt - t + 1) * per_step + est_point > deadline:
            stopped = f"time limit: stopped before step {t} of {probe_steps[-1]}"
            break
        t0 = clock()
        target = round(t * r / g) - round((t - 1) * r / g)
        new, busy = loop.generate(target, t - 1)
        loop.buffer.setdefault(t - 1, []).extend(new)
        for v in [v for v in loop.buffer if v < t - h]:
            for old in loop.buffer.pop(v):  # ids of dropped rollouts may be reused by new objects
                loop.uses.pop(id(old), None)
        loop.timing.gen_s.append(busy)
        loop.timing.gen_n.append(len(new))
        loop.timing.train_s.append(loop.train(t - 1))
        loop.timing.train_n.append(b)
        step_s.append(clock() - t0)
        if t in probe_steps:
            t0 = clock()
            part = loop.measure(t, len(done), token_count, deadline)
            if part is None:
                stopped = f"time limit: probe point at step {t} not finished"
                break
            parts.append(part)
            done.append(t)
            point_s = clock() - t0
            log(f"probe: point {len(done)}/{len(probe_steps)} at step {t} ({len(part['age'])} rollouts, "
                f"{point_s:.0f} s; {clock() - t_start:.0f} s so far)")
        for v in [v for v in loop.weights if v < t - h]:
            del loop.weights[v]
    if not parts:
        raise ProbeTimeout(f"probe: no probe point finished within --time-limit {settings.time_limit_s:g} s (the first "
                           f"is at step {probe_steps[0]}); raise --time-limit or lower --horizon")
    cat = lambda key: np.concatenate([p[key] for p in parts])  # noqa: E731
    sk = Sketches(cat("g"), cat("age"), cat("cluster"), cat("probe"), float(np.mean([p["capacity"] for p in parts])),
                  np.array([p["drift"] for p in parts]), cat("uses"),
                  {k: np.concatenate([p["columns"][k] for p in parts]) for k in parts[0]["columns"]}, cat("rollout"))
    measured = loop.timing.mu()
    lo, hi = loop.timing.mu_interval(settings.bootstrap, loop.rng)
    mu_info = ({"value": mu, "lo": mu, "hi": mu, "source": "emulated, from config (cluster.emulate.mu)"}
               if mu_cfg is not None else {"value": measured, "lo": lo, "hi": hi,
                                           "source": f"measured on this machine ({cfg.generation.backend.type} "
                                                     "generation)"})
    mu_info["measured_here"] = {"value": measured, "lo": lo, "hi": hi}
    return ProbeData(sk, mu_info, (w, t_), mu_cfg is not None, r, h, len(loop.timing.train_s), done, stopped,
                     {"steps": float(np.sum(step_s)), "total_so_far": clock() - t_start})


def config_replay_ratio(cfg: RunConfig, mu: float) -> float:
    """Samples per insert the config runs at: 1 consuming once, else the rate limit's, else μ·T/W."""
    if cfg.consumes_once:
        return 1.0
    if cfg.replay.rate_limit is not None:
        return cfg.replay.rate_limit.samples_per_insert
    (w, t), _ = _split_and_mu(cfg)
    return mu * t / w


def probe(cfg: RunConfig, settings: ProbeSettings, out, config_path=None, overrides=(), log=print):
    """Measure, estimate, recommend, write probe.json and sigma2.png into `out`: (result, paths)."""
    from pathlib import Path

    from replay_rl.probe import report
    from replay_rl.probe.effective import by_use, effective
    from replay_rl.probe.estimators import estimate
    from replay_rl.probe.recommend import recommend
    from replay_rl.probe.status import Status, status
    from replay_rl.evaluation.warmstart import ensure_model

    started = time.monotonic()
    path = ensure_model(cfg, log)
    data = run_probe(cfg, settings, str(path), log, started)
    est = estimate(data.sketches, settings.bootstrap, settings.seed)
    b = cfg.learner.batch_size
    try:
        eff = effective(data.sketches, b, settings.bootstrap, settings.seed)
        strata, st = by_use(data.sketches, b, settings.bootstrap, settings.seed), status(eff, settings.fresh_groups)
    except ValueError as e:  # too few fresh groups or ages: nothing to plan with
        eff, strata, st = None, {}, Status("not_resolved", str(e))
    # the plan's α: σ̄²_eff's local summary (the committed σ²(τ) α reads shrinkage as α < 0), ρ as before
    alpha, alpha_draws = (eff.alpha.value, eff.alpha_draws) if eff else (float("nan"), ())
    mu = data.mu["value"]
    plan = lambda rho, rho_draws: recommend(  # noqa: E731
        mu, alpha, rho, b, data.split, cfg.learner.lr, config_replay_ratio(cfg, mu), data.horizon, alpha_draws,
        rho_draws, multiple=cfg.cluster.learners, real_cluster=not data.emulated)
    rec, alt = plan(est.rho.value, est.rho_draws), plan(est.rho_variance.value, est.rho_variance_draws)
    rec["with_rho_variance"] = {k: alt[k] for k in ("rho", "rho_clipped", "theorem", "at_config_split",
                                                    "best_split")}
    for key, name in (("best_split", "paste"), ("at_config_split", "paste_at_config_split")):
        # a paste line only with status ok (status.py): otherwise the setting is a tool setting, not an optimum
        rec[name] = report.paste_line(rec[key], mu if data.emulated else None) if st.status == "ok" else None
    rec["paste_valid"] = None
    if rec["paste"] is not None:
        try:  # the line must load: capacity and lr pass the config's own checks
            RunConfig.load(config_path, [*overrides, *rec["paste"].replace("-s ", "").split()])
            rec["paste_valid"] = True
        except ConfigError as e:
            rec["paste_valid"] = f"does not load: {e}"
    header = {"config": None if config_path is None else str(config_path), "overrides": list(overrides),
              "settings": settings.model_dump(), "wall_s": time.monotonic() - started,
              "run": {"task": cfg.task.type, "model": str(path), "batch_size": cfg.learner.batch_size,
                      "lr": cfg.learner.lr, "capacity": cfg.replay.capacity, "out": str(out),
                      "split": list(data.split), "emulated": data.emulated,
                      "rollouts_per_step": data.rollouts_per_step, "horizon": data.horizon, "steps": data.steps,
                      "probe_points": data.points_done, "stopped": data.stopped, "seconds": data.seconds}}
    result = report.assemble(est, data, rec, header, eff, strata, st)
    return result, report.write(result, est, Path(out), eff)
