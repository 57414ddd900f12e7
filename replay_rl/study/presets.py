"""The compute-saved study's presets: which rows (W/T split, μ, buffer size rule, overrides), learning rates, seeds
and budgets each preset runs, per task. `replay-rl study` runs them."""

from __future__ import annotations

PAPER_MU = 5.28  # Qwen2.5-7B, paper Table 2


def replay(w: int, t: int, *, n: str = "horizon", mu: float = PAPER_MU, extra: tuple[str, ...] = (),
           lrs: tuple[float, ...] | None = None, seeds: int | None = None) -> dict:
    """One study row: the emulated split (W, T) at μ, its buffer size rule `n` (capacity_for), extra overrides, the
    learning rates it runs at and its seeds per LR (None: the preset's)."""
    return {"w": w, "t": t, "mu": mu, "n": n, "overrides": list(extra), "lrs": lrs, "seeds": seeds}


HEADLINE = {
    "replay_53_N": replay(5, 3),
    "replay_53_N2.5B": replay(5, 3, n="2.5B"),
    "replay_53_N10B": replay(5, 3, n="10B"),
    "replay_44_N": replay(4, 4),
    "replay_62_N": replay(6, 2),
    "posbias0.2_53_N": replay(5, 3, extra=("replay.type=positive_bias", "replay.delta=0.2")),
    "posbias0.5_53_N": replay(5, 3, extra=("replay.type=positive_bias", "replay.delta=0.5")),
    "asymre_53_N": replay(5, 3, extra=("learner.loss.type=asymre",)),
}
SENSITIVITY = {"replay_53_N_mu2": replay(5, 3, mu=2.0), "replay_53_N_mu10": replay(5, 3, mu=10.0)}

# the sanity ladder at (5,3): replay ratio μ·T/W = 1 (must match the baseline), 1.5, 2, 3 at the horizon N, then larger N
LADDER = {f"fifo_y{y:g}_N": replay(5, 3, mu=y * 5 / 3) for y in (1, 1.5, 2, 3)} | {
    "fifo_y3_N4B": replay(5, 3, mu=5.0, n="4B"), "fifo_y3_N10B": replay(5, 3, mu=5.0, n="10B")}

# the paper's Fig. 4 at (5,3), μ=5.28: every row at several learning rates, the baseline included, compared frontier
# against frontier. Replay reuses each rollout ~3.2 times, so its grid starts lower. The small-N and sampler rows run
# at one LR, 5e-5, to fit the study in this box's budget (an outside check found 5e-5 ahead of 1.5e-4 at N=B): they
# answer whether local diversity rescues small N, not where its best LR lies
FRONTIER_LRS = (5e-5, 1e-4, 1.5e-4, 3e-4)
REPLAY_LRS = (2.5e-5, 5e-5, 1e-4, 1.5e-4)
SMALL_N_LRS = (5e-5,)
FRONTIER = {
    "replay_53_N10B": replay(5, 3, n="10B", lrs=REPLAY_LRS),
    "replay_53_N2B": replay(5, 3, n="2B", lrs=SMALL_N_LRS, seeds=2),
    "replay_53_NB+R": replay(5, 3, n="B+R", lrs=SMALL_N_LRS, seeds=2),
    "replay_53_N5B": replay(5, 3, n="5B", lrs=SMALL_N_LRS, seeds=2),
    "replay_53_NB": replay(5, 3, n="B", lrs=SMALL_N_LRS, seeds=2),
    # the probe's recommended N (its LR at the config's split is the config's, 5e-5), against the grid at 5e-5
    "replay_53_Nprobe": replay(5, 3, n="probe", lrs=SMALL_N_LRS, seeds=2),
}
# local diversity (replay.sampler) at small N, where every batch repeats much of the previous one
DIVERSITY = {
    "fresh_anchored_53_NB+R": replay(5, 3, n="B+R", extra=("replay.sampler=fresh_anchored",), lrs=SMALL_N_LRS),
    "least_recent_53_NB+R": replay(5, 3, n="B+R", extra=("replay.sampler=least_recent",), lrs=SMALL_N_LRS),
}

# countdown (a second task, not tuned on: the arithmetic rows) gets the headline comparison and the probe check: the
# baseline at 5 LRs (it did best at the arithmetic grid's lowest, 5e-5, so its grid was widened down to 2.5e-5) and
# N=10B at 2.5e-5, 5e-5 and 1e-4 (replay's 1.5e-4, worst on arithmetic, and N=B were cut before they ran, to fit
# the session's budget), 3 seeds each, plus the probe's N at 5e-5 (2 seeds)
COUNTDOWN_FRONTIER = {"configs": {"replay_53_N10B": replay(5, 3, n="10B", lrs=(2.5e-5, 5e-5, 1e-4)),
                                  "replay_53_Nprobe": FRONTIER["replay_53_Nprobe"]},
                      "sensitivity": {}, "sensitivity_seeds": 0, "lrs": (2.5e-5, *FRONTIER_LRS)}

# the measure issue's rerun on the fixed-step warm start: each side at three LRs bracketing its best in the committed
# frontier study (arithmetic: baseline 1.5e-4, N=10B 5e-5; countdown: baseline 5e-5, N=10B 2.5e-5, its lowest then,
# so its grid moves down), 3 seeds, today's budget; then each side's two best LRs (by the smoothed final median)
# extended to 3x that budget ("extend"), resumed from their final checkpoints
MEASURE = {"steps": 500, "eval_every": 25, "seeds": 3, "extend": 3, "extend_best": 2, "sensitivity": {},
           "sensitivity_seeds": 0, "set": ["run.eval_k=16"], "lrs": (1e-4, 1.5e-4, 3e-4),
           # 2e-4 added after part 1 found replay's best at 1e-4, its grid's top then
           "configs": {"replay_53_N10B": replay(5, 3, n="10B", lrs=(2.5e-5, 5e-5, 1e-4, 2e-4))},
           "tasks": {"arithmetic": {},
                     "countdown": {"lrs": (2.5e-5, 5e-5, 1e-4),
                                   "configs": {"replay_53_N10B": replay(5, 3, n="10B", lrs=(1.25e-5, 2.5e-5, 5e-5))}}}}

# issue 29's screen of the adaptive reuse rules on arithmetic (2 seeds, 2 LRs each; the baseline as in "measure"):
# each rule's constants set once here, on arithmetic, and kept for countdown. The schedule anneals the sampling
# window from N = 10B to B over the first half of the run; the trust region masks rollouts whose mean squared log-ratio
# passes M2PO's 0.04; the controller shrinks the window on a gradient-norm spike (DGG-like) and grows it back
RULE_LRS = (5e-5, 1e-4)
TRUST = "learner.loss.trust_region={max_m2: 0.04}"
RULES = {"replay_53_N10B": replay(5, 3, n="10B", lrs=RULE_LRS),
         "schedule_53_N10B": replay(5, 3, n="10B", extra=("replay.capacity_schedule={end: 0.5}",), lrs=RULE_LRS),
         "trust_m2_53_N10B": replay(5, 3, n="10B", extra=(TRUST,), lrs=RULE_LRS),
         "controller_53_N10B": replay(5, 3, n="10B", extra=("replay.reuse_controller={signal: grad_norm}",),
                                      lrs=RULE_LRS)}
RULES_SCREEN = {"steps": 500, "eval_every": 25, "seeds": 2, "sensitivity": {}, "sensitivity_seeds": 0,
                "set": ["run.eval_k=16"], "lrs": (1e-4, 1.5e-4, 3e-4), "configs": RULES}

# issue 29's second stage: the screen's best rule (the trust region, which tied plain N=10B at 5e-5 and masked the
# fewest tokens there) over a frontier of 3 LRs bracketing its best, 3 seeds, on both tasks, with the screen's
# constants unchanged on countdown; baseline and plain N=10B as in "measure" (the same grids), at its base budget
RULES_FRONTIER = MEASURE | {"extend": None, "extend_best": None, "configs": {
    "replay_53_N10B": MEASURE["configs"]["replay_53_N10B"],
    "trust_m2_53_N10B": replay(5, 3, n="10B", extra=(TRUST,), lrs=(2.5e-5, 5e-5, 1e-4))},
    "tasks": {"arithmetic": {}, "countdown": MEASURE["tasks"]["countdown"] | {"configs": {
        "replay_53_N10B": MEASURE["tasks"]["countdown"]["configs"]["replay_53_N10B"],
        "trust_m2_53_N10B": replay(5, 3, n="10B", extra=(TRUST,), lrs=(1.25e-5, 2.5e-5, 5e-5))}}}}

# issue 30's check of the probe's pilot (it recommended N = 20B on both tasks, at lr 5e-5 on arithmetic and 2.5e-5 on
# countdown): the grid over N at that LR, 2 seeds, against the measure study's baseline frontier (3 seeds)
GRID_N = ("B+R", "2B", "5B", "10B", "20B")
PROBE_GRID = MEASURE | {"extend": None, "extend_best": None, "configs": {
    f"replay_53_N{n}": replay(5, 3, n=n, lrs=(5e-5,), seeds=2) for n in GRID_N},
    "tasks": {"arithmetic": {}, "countdown": MEASURE["tasks"]["countdown"] | {"configs": {
        f"replay_53_N{n}": replay(5, 3, n=n, lrs=(2.5e-5,), seeds=2) for n in GRID_N}}}}

# issue 42's pre-registered replication (benchmarks/results/replication/plan.md), phase 1: each side's two best 3x LRs
# of "measure" bracketed from below, 3 seeds, the measure study's 3x budget run from step 0 on the shipped warm model
# (baseline 3 x 500 steps, replay 3 x 1178) with its eval spacing; phase 2's preset is added once phase 1 has chosen
REPLICATE = {"steps": 500, "budget_multiple": 3, "eval_every": 25, "seeds": 3, "sensitivity": {},
             "sensitivity_seeds": 0, "set": ["run.eval_k=16"], "lrs": (1e-4, 1.5e-4),
             "configs": {"replay_53_N10B": replay(5, 3, n="10B", lrs=(2.5e-5, 5e-5))}}

# issue 43's screen of the rules that choose the data (benchmarks/results/rules43/plan.md, written before its runs).
# Stage 1 on SmolLM2 (the preset's task, 1 generator and 1 learner rank as every study run): the on-policy baseline
# and plain replay (the preset's N = 32 = 2B), each at two LRs, 2 seeds, to the compute of 100 on-policy steps
SMOLLM2_SIDES = {"steps": 100, "eval_every": 25, "seeds": 2, "sensitivity": {}, "sensitivity_seeds": 0,
                 "set": ["run.eval_prompts=200"], "lrs": (1e-5, 2e-5),
                 "configs": {"replay_53_N2B": replay(5, 3, n="2B", lrs=(5e-6, 1e-5))}, "tasks": {"smollm2": {}}}
# on arithmetic at the replication's 3x budget: each rule on plain N = 10B at replay's two LRs, 2 seeds, its
# constants set here once: stale negatives vetoed past the mean batch age of plain N = 10B in the measure study (16
# versions); prompt replay at its defaults (half of each call, a pool of 256, 4 visits)
RULES43 = {"replay_53_N10B": replay(5, 3, n="10B", lrs=(2.5e-5, 5e-5)),
           "effective_53_N10B": replay(5, 3, n="10B", extra=("replay.sampler=effective",), lrs=(2.5e-5, 5e-5)),
           "stale_neg_53_N10B": replay(5, 3, n="10B", extra=("learner.loss.stale_negatives={max_age: 16, weight: 0}",),
                                       lrs=(2.5e-5, 5e-5)),
           "prompt_replay_53_N10B": replay(5, 3, n="10B", extra=("generation.prompt_replay={share: 0.5}",),
                                           lrs=(2.5e-5, 5e-5))}
RULES43_SCREEN = REPLICATE | {"seeds": 2, "configs": RULES43}

# a preset's "tasks" maps each task it runs to the keys it replaces there; without "tasks" it runs arithmetic
PRESETS: dict[str, dict] = {
    # the ladder: 1 seed a rung, ~15 min here
    "ladder": {"steps": 200, "eval_every": 25, "seeds": 1, "configs": LADDER, "sensitivity": {},
               "sensitivity_seeds": 0, "set": [], "lrs": (None,)},
    # the earlier study at one learning rate: baseline + headline configs at 5 seeds, sensitivity at 3; ~1.5 h here
    "full": {"steps": 400, "eval_every": 25, "seeds": 5, "configs": HEADLINE, "sensitivity": SENSITIVITY,
             "sensitivity_seeds": 3, "set": [], "lrs": (None,)},
    # the LR frontier (Fig. 4) with N rows and samplers; the baseline runs 500 steps so that it levels off
    "frontier": {"steps": 500, "eval_every": 25, "seeds": 3, "configs": FRONTIER, "sensitivity": DIVERSITY,
                 "sensitivity_seeds": 2, "set": [], "lrs": FRONTIER_LRS,
                 "tasks": {"arithmetic": {}, "countdown": COUNTDOWN_FRONTIER}},
    # a first look, ≤ 12 min on 2 cores: the baseline and N=10B, each at the best LR the frontier study found, on
    # seeds it did not use (3, 4), so that the check is out of sample
    "quick": {"steps": 200, "eval_every": 25, "seeds": 2, "first_seed": 3,
              "configs": {"replay_53_N10B": replay(5, 3, n="10B", lrs=(5e-5,))},
              "sensitivity": {}, "sensitivity_seeds": 0, "set": [], "lrs": (1.5e-4,)},
    "measure": MEASURE,
    "rules": RULES_SCREEN,
    "rules_frontier": RULES_FRONTIER,
    "probe_grid": PROBE_GRID,
    "replicate": REPLICATE,
    "smollm2_sides": SMOLLM2_SIDES,
    "rules43": RULES43_SCREEN,
    # CI: the whole pipeline end to end in about a minute, two LRs on each side, each side's best extended to 2x its
    # steps from its final checkpoint; its numbers mean nothing
    "mini": {"steps": 12, "eval_every": 6, "seeds": 1, "extend": 2, "extend_best": 1,
             "configs": {"replay_53_N2B": replay(5, 3, n="2B", extra=("replay.sampler=fresh_anchored",))},
             "sensitivity": {}, "sensitivity_seeds": 0, "set": ["run.eval_prompts=100", "learner.batch_size=32"],
             "lrs": (1e-4, 2e-4)},
}
# the study runs one generator actor and one learner rank: on 2 cores that wastes least; the emulated W/T is
# set by cluster.emulate, which is all the pacing and accounting read. A role that dies restarts the run's roles up
# to twice (from step 0: study runs keep no checkpoint but their last, which would change when ranks draw ahead)
# rather than fail the trial and, with it, an unattended phase (issue 44); a run that restarted says so in its
# ledger (ledger/run_restarts)
STUDY_BASE = ["cluster.generators=1", "cluster.learners=1", "replay.sample_timeout_s=600", "run.checkpoint_every=null",
              "run.max_restarts=2"]
