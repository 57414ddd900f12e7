"""Compute ledger: what a run spent, in the paper's terms.

K_inf = unique rollouts generated, K_train = rollouts the learner trained on (with repeats; a batch's rows, less
any that learner.drop_zero_advantage leaves out of the loss). K_forward: the rows the learners ran, those too.
μ: cost of generating a batch over the cost of training on it. Under cluster.emulate it is the cost model's μ;
otherwise the paper's estimate (K_forward / T) / (K_inf / W), valid when both roles are busy (buffer runs).
γ = (1 + W/T) / (1 + μ): compute per update with replay relative to the on-policy baseline.
compute = (K_train + μ·K_inf) / B, in trainer-step equivalents (the x-axis of the paper's Fig. 1): it charges every
rollout generated, used or not, and equals steps·(1+W/T) with a buffer and steps·(1+μ) without at steady state.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


@dataclass
class ComputeLedger:
    generators: int      # W (the emulated one under cluster.emulate)
    learners: int        # T
    batch_size: int = 1  # B
    mu_model: float | None = None  # the cost model's μ under cluster.emulate; None: estimate μ from the counts
    k_inf: int = 0
    k_train: int = 0
    k_forward: int = 0  # this build runs a left-out row's forward: the learners' throughput counts it (μ estimate)
    tokens: int = 0
    generator_busy_s: float = 0.0
    learner_busy_s: float = 0.0
    wall_s: float = 0.0
    sync_s: float = 0.0
    sync_bytes: int = 0
    extra: dict[str, float] = field(default_factory=dict)
    # the actors that really run, for busy and idle time; under cluster.emulate W and T above are the emulated ones
    generator_actors: int = 0  # 0: W
    learner_ranks: int = 0     # 0: T

    @property
    def mu(self) -> float:
        if self.mu_model is not None:
            return self.mu_model
        if not self.k_inf or not self.k_train:
            return float("nan")
        return ((self.k_forward or self.k_train) / self.learners) / (self.k_inf / self.generators)

    @property
    def gamma(self) -> float:
        return (1 + self.generators / self.learners) / (1 + self.mu)

    @property
    def compute(self) -> float:
        """Trainer-step equivalents spent: (K_train + μ·K_inf) / B."""
        if math.isnan(self.mu):  # before both roles have counted anything
            return float(self.k_train) / self.batch_size
        return (self.k_train + self.mu * self.k_inf) / self.batch_size

    @property
    def active_s(self) -> float:
        """Compute consumed: busy seconds of all generators and learners (the paper's active GPU-seconds)."""
        return self.generator_busy_s + self.learner_busy_s

    def observe(self, *, inserts: int, lost: int, consumed: int, tokens: int, generator_busy_s: float,
                learner_busy_s: float, wall_s: float, publish_s: float = 0.0, publish_bytes: int = 0,
                forward: int | None = None, **extra: float) -> None:
        """One learner step's counters. inserts: the shards' (K_inf, plus `lost`: rollouts a restored shard lost,
        generated all the same); consumed: rollouts this step trained on; forward: rows it ran (None: consumed);
        tokens and generator_busy_s: the generators' totals, which restart when a generator is replaced, so the
        ledger keeps the larger."""
        self.k_inf = inserts + lost
        self.k_train += consumed
        self.k_forward += consumed if forward is None else forward
        self.tokens = max(self.tokens, tokens)
        self.generator_busy_s = max(self.generator_busy_s, generator_busy_s)
        self.learner_busy_s, self.wall_s = learner_busy_s, wall_s
        self.sync_s += publish_s
        self.sync_bytes += publish_bytes
        self.extra.update(extra)

    def state(self) -> dict:
        """What a checkpoint keeps (JSON-able)."""
        return asdict(self)

    def load_state(self, state: dict) -> None:
        """Continue from a checkpoint's ledger; it must describe the same cluster, or compute would mix units."""
        shape = ("generators", "learners", "batch_size", "mu_model")
        if (theirs := tuple(state[k] for k in shape)) != (mine := tuple(getattr(self, k) for k in shape)):
            raise ValueError(f"run.resume_from: the checkpoint's ledger has (W, T, B, μ) = {theirs}, this run "
                             f"{mine}; resume with the cluster, batch size and cluster.emulate it was taken with")
        for k, v in state.items():
            setattr(self, k, v)
        if "k_forward" not in state:  # a checkpoint from before K_forward: every row it ran, it trained on
            self.k_forward = self.k_train

    @property
    def learner_busy_frac(self) -> float:
        """Share of the learner ranks' wall time spent in sample → loss → step (the rest waits on the driver,
        on data, on publishing, on eval)."""
        ranks = self.learner_ranks or self.learners
        return self.learner_busy_s / (ranks * self.wall_s) if self.wall_s else 0.0

    def summary(self) -> dict[str, float]:
        w, t = self.generator_actors or self.generators, self.learner_ranks or self.learners
        idle = lambda busy, n: max(0.0, n * self.wall_s - busy)  # noqa: E731
        return {"k_inf": self.k_inf, "k_train": self.k_train, "k_forward": self.k_forward, "tokens": self.tokens,
                "mu": self.mu, "gamma": self.gamma, "compute": self.compute, "active_s": self.active_s,
                "generator_busy_s": self.generator_busy_s, "learner_busy_frac": self.learner_busy_frac,
                "generator_idle_s": idle(self.generator_busy_s, w), "learner_busy_s": self.learner_busy_s,
                "learner_idle_s": idle(self.learner_busy_s, t), "wall_s": self.wall_s, "sync_s": self.sync_s,
                "sync_bytes": self.sync_bytes, **self.extra}
