"""Where the run goes: the W/T split, the emulated cost model, and the run's length, outputs and fault limits."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from replay_rl.config.base import _Section

MIN_CPU = 0.01  # every bundle's CPU floor: Ray refuses an empty bundle, and Tune drops an empty first one


class EmulatedClusterConfig(_Section):
    """The paper's cost model (§3.2) applied to a run on any hardware, e.g. a 2-core CPU box.

    The run behaves like a cluster of `generators` inference and `learners` training GPUs on which generating a
    batch costs μ times training on it: generation is paced to R = B·(W/T)/μ rollouts per learner step with a
    buffer (replay ratio μ·T/W), and to B per step for the consume-once baseline (replay ratio 1). Compute is
    counted in trainer-step equivalents, (K_train + μ·K_inf)/B. This is a cost model, not a measurement: μ comes
    from the paper (5.28 for Qwen2.5-7B, 6.84 for Qwen3-0.6B) or from `benchmarks/mu_regimes.py` on your GPUs.
    The emulated W and T are a ratio for pacing and accounting; they need not equal cluster.generators/learners.
    Generators see the learner only through published weights, so with sync.every_steps = k each publish lets them
    generate for the k steps up to the next. A setting whose pace could stall is refused at load (pace_check.py).
    """

    mu: float = Field(gt=0, allow_inf_nan=False)
    """μ: cost of generating one batch / cost of training on it, on the emulated GPUs (paper: 4–10)."""
    generators: int = Field(ge=1)
    """Emulated W: inference GPUs per node (the paper's (5,3) is generators=5, learners=3)."""
    learners: int = Field(ge=1)
    """Emulated T: training GPUs per node."""
    lead_steps: int = Field(2, ge=1)
    """How many learner steps of rollouts generators may have produced ahead of the learner. 1: generate, then
    train, strictly in turn (age 0); 2: generation of the next batch overlaps training on this one (age ≈ 1).
    A buffer keeps the lead only beside one batch (N − B rollouts); with N = B generation and training take turns."""


class ClusterConfig(_Section):
    """The generator/learner split (the paper's W and T), as explicit integers."""

    address: str | None = None
    """Ray address; None starts (or joins, under `ray job submit`) a local cluster."""
    generators: int = Field(2, ge=1)
    """W: generator actors this run starts."""
    learners: int = Field(2, ge=1)
    """T: learner ranks (one replay shard each)."""
    gpus_per_generator: float = Field(0, ge=0)
    """GPUs each generator actor reserves (Ray num_gpus); 0 on CPU."""
    gpus_per_learner: float = Field(0, ge=0)
    """GPUs each learner rank reserves; 0 on CPU."""
    gpus_per_evaluator: float = Field(0, ge=0)
    """GPUs the evaluator reserves, in a bundle of its own inside a study trial's reservation. 0: it reserves none
    and uses a GPU only if its node has one, whoever holds it (Ray leaves a 0-GPU actor every GPU of its node), so
    wherever generators or learners hold GPUs it must be above 0 (e.g. 0.1 beside gpus_per_learner 0.9)."""
    cpus_per_actor: float = Field(0.25, ge=0)
    """CPUs each actor reserves in Ray's accounting; small values let a 2-core box host every role."""
    total_gpus: int | None = Field(None, ge=0)
    """GPUs the cluster offers; when set, the W/T split and the evaluator's share must fit in it."""
    generator_resources: dict[str, float] = {}
    """Custom Ray resources each generator asks for, e.g. {generator_node: 1}: with nodes started as
    `ray start --resources='{"generator_node": 8}'`, generators run only there (inference nodes apart from
    training nodes). Empty: anywhere."""
    learner_resources: dict[str, float] = {}
    """Custom Ray resources each learner rank asks for, e.g. {learner_node: 1}; the same idea for training nodes.
    Replay shards and the evaluator are not constrained. Empty: anywhere."""
    emulate: EmulatedClusterConfig | None = EmulatedClusterConfig(mu=5.28, generators=5, learners=3)
    """Pace and account this run as the paper's cost model of a W/T GPU cluster (see EmulatedClusterConfig).
    None: generators run free and compute is whatever the hardware spends."""

    def role_bundles(self) -> list[tuple[str, dict[str, float]]]:
        """The run's shape as placement-group bundles, each with the role it holds: the one definition of what a run
        reserves and where each role goes in it. "driver": the run's driver (with the replay shards, weight boards,
        reports, and the evaluator when it has no GPU); "evaluator" when gpus_per_evaluator > 0; one "generator"
        each; one "learner" a rank. Zero amounts are left out (as Ray Tune drops them); every bundle keeps MIN_CPU."""
        cpu = max(self.cpus_per_actor, MIN_CPU)
        evaluator = [("evaluator", bundle(MIN_CPU, self.gpus_per_evaluator))] if self.gpus_per_evaluator else []
        return ([("driver", bundle(cpu))] + evaluator
                + [("generator", bundle(cpu, self.gpus_per_generator, self.generator_resources))] * self.generators
                + [("learner", bundle(cpu, self.gpus_per_learner, self.learner_resources))] * self.learners)

    def bundles(self) -> list[dict[str, float]]:
        """role_bundles() without the roles: what a run reserves."""
        return [b for _, b in self.role_bundles()]

    def first_bundle(self, role: str) -> int:
        """The index of `role`'s first bundle in bundles()."""
        return [r for r, _ in self.role_bundles()].index(role)


def bundle(cpus: float, gpus: float = 0, custom: dict[str, float] | None = None) -> dict[str, float]:
    return {"CPU": cpus} | ({"GPU": gpus} if gpus else {}) | {k: v for k, v in (custom or {}).items() if v}


class RunSettings(_Section):
    steps: int = Field(100, ge=1)
    """Learner optimizer steps."""
    rollout_budget: int | None = Field(None, ge=1)
    """Stop early once generators produced this many unique rollouts (K_inf)."""
    seed: int = 0
    """Seeds sampling, the eval split and the learner; the same seed repeats a run as far as threads allow."""
    output_dir: str = "runs/tiny"
    """The run folder: metrics, checkpoints, final model, logs."""
    eval_every: int = Field(25, ge=1)
    """Evaluate every k learner steps (also at step 0 and at the end)."""
    eval_prompts: int = Field(1000, ge=1)
    """Held-out problems per eval (capped by the split). 1000 gives σ ≈ 0.015 on pass@1."""
    eval_k: int = Field(4, ge=1)
    """k of pass@k, sampled at generation.eval_temperature; pass@1 is greedy."""
    eval_backend: Literal["transformers", "generation"] = "transformers"
    """The evaluator's engine, built by the generation factory: transformers (the default: runs on either engine
    are scored by one greedy decoder, which is how their learning parity was measured), or generation (the
    generators' own generation.backend, e.g. vLLM: faster on large models, scored by that engine)."""
    checkpoint_every: int | None = Field(None, ge=1)
    """Save learner state + buffer every k steps; None: only the final checkpoint."""
    keep_checkpoints: int | None = Field(3, ge=1)
    """The newest k of this run's checkpoints are kept, older ones deleted after each save (a 7B ZeRO checkpoint
    is ~100 GB). The newest, which a restart resumes and final_model links, is always kept. None: keep all."""
    log_samples_every: int | None = Field(10, ge=1)
    """Every k learner steps, each generator's newest group (prompt, completions, rewards, advantages, version,
    age) goes to samples.jsonl and to each tracker (a TensorBoard text, an MLflow artifact, a W&B table): what one
    reads first when the reward moves. None: never."""
    resume_from: str | None = None
    """A checkpoints/step_N folder, or 'auto': output_dir's newest complete one (none: a fresh start). Either
    continues the run that saved it (a finished run's final checkpoint, with a larger steps, extends it)."""
    overwrite: bool = False
    """Start over in an output_dir that holds another run's checkpoints or metrics: remove what a run writes there
    (checkpoints, metrics, logs, final_model) first. False: such a folder is refused unless resume_from continues
    its run (a fresh run must not take over another's history or hand out its model)."""
    max_generator_restarts: int = Field(3, ge=0)
    """Generators that die (actor lost, OOM-killed) are replaced this many times in a run; then the run stops."""
    max_restarts: int = Field(0, ge=0)
    """When a role dies beyond its own recovery (a learner rank, a shard past max_shard_restarts, a generator in a
    sync.type=nccl broadcast group), restart every role from the newest checkpoint this many times per run, instead
    of stopping. Steps since that checkpoint are trained again (set checkpoint_every: with none, from step 0).
    0 stops with one line, as torchrun and Ray Train do by default."""
    max_shard_restarts: int = Field(3, ge=0)
    """A replay shard that dies is restarted by Ray and restores its newest live snapshot, this many times per
    shard; needs replay.snapshot_every_steps. 0: a dead shard ends the run."""
    mismatch_warn: float = Field(0.02, ge=0)
    """At the first step (every rollout fresh), warn when the mean per-token |log π_learner − log π_generator|
    exceeds this. fp32 on CPU agrees to ~1e-6; bf16 engines on GPUs typically differ by 1e-3–1e-2."""
    mismatch_fail: float | None = Field(0.5, ge=0)
    """At the first step, stop the run with one line when that gap exceeds this: the generator is not sampling the
    policy the learner trains. None: never stop on it."""
    stall_timeout_s: float = Field(120.0, gt=0)
    """Seconds without a finished learner step (or a shard's answer to the per-step stats call) before the driver
    asks who waits on what. A role that does not answer then is hung and recovered as if it died (see hung_probe_s);
    a rule that holds the step (the pace, the limiter, caps) stops the run with one line naming it. Must exceed the
    slowest step: learner ranks that hold a step twice this long count as hung. Lower detects a hung role sooner."""
    hung_probe_s: float = Field(10.0, gt=0)
    """How long a stalled step's probes (a shard's reason for waiting, a generator's stats) wait for an answer; an
    actor silent that long is hung (paused, a wedged device or filesystem) and is killed and recovered as its death
    would be: a shard from its live snapshot, a generator anew, learner ranks through max_restarts. Each probe is a
    trivial call served beside the actor's work (a shard's event loop, a generator's second thread), so seconds are
    plenty for a live one (at load 20 on 2 cores, every live one answered in 10 s); too short kills an actor that
    is alive but starved of CPU, too long delays recovery."""
    start_timeout_s: float = Field(600.0, gt=0)
    """Seconds the learner ranks may take to load their weights and join their process group before the run stops
    with one line naming the ranks not started (a rank alone in the rendezvous would wait out gloo's or NCCL's 30
    min)."""
    checkpoint_timeout_s: float = Field(1800.0, gt=0)
    """Seconds a checkpoint may take (every learner rank's DeepSpeed state and model folder, every shard's
    snapshot), the final one included. A role not done by then (paused, a wedged filesystem) is named with the
    phase, and every role restarts from the newest checkpoint (max_restarts), instead of the driver waiting for
    ever (or ranks waiting out DeepSpeed's 30 min barrier). Must exceed the slowest save of the model's state."""
    eval_timeout_s: float = Field(1800.0, gt=0)
    """Seconds the driver waits for the eval in flight once it needs its scores (the next eval, the run's end).
    An evaluator not done by then is named and restarts every role (max_restarts). Must exceed the slowest eval:
    eval_prompts × (1 + eval_k) samples on the evaluator's device."""
    resume_timeout_s: float = Field(1800.0, gt=0)
    """Seconds a resume from a checkpoint may take: the learner ranks' state, the shards' buffers, every
    generator's place in the pace and the resumed weights. A role not done by then is named and restarts every
    role (max_restarts). Must exceed the slowest load of the model's state."""
    recovery_timeout_s: float = Field(300.0, gt=0)
    """Seconds the driver waits, after recovering a role in place, for the calls that wait on it: a shard
    restarted from its live snapshot answering the stats call it missed, the generator reports forgetting a
    replaced generator. A role not done by then is named and restarts every role (max_restarts)."""
    node_wait_s: float = Field(600.0, gt=0)
    """How long a restart (run.max_restarts) may wait, from the death, for Ray to declare a lost node dead and for
    the cluster to offer the learner ranks' resources again (a preempted or failed host): the roles are placed
    again as soon as a replacement node joins, else the run stops with one line naming the lost node and the resume
    command. The ranks then start within run.start_timeout_s. A generator whose node is lost is replaced without a
    restart: the driver waits this long from its death for the replacement to start (placed and loaded)."""
