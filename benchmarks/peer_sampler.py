"""Do TRL's GRPOTrainer and our generator draw from one distribution? (issue 42, the TRL gap)

peer_step.py found the two trainers' updates, prompts, masks, rewards and advantages the same; what it left untested
is whether the two samplers, given one model and one prompt, draw alike. Here both sample from the SmolLM2 preset's
starting weights on the same training problems, --calls times each: TRL through its own
`_generate_and_score_completions` (its generation config, its masks), ours through the HFBackend a run's generators
use. Every completion is scored by one scorer (our backend's log-probs of the tokens drawn), and the two samples are
compared on completion length, the share cut at max_new_tokens, the reward, and each completion's mean token
log-prob (means with standard errors, and a two-sample Kolmogorov-Smirnov test on the log-probs and the lengths).

    PYTHONPATH=. /work/tvenv/bin/python benchmarks/peer_sampler.py --calls 16   # a venv with trl 1.16
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_step import MATCHED, trl_sampling  # noqa: E402
from peer_trl import PRESET  # noqa: E402

from replay_rl.config import RunConfig  # noqa: E402
from replay_rl.evaluation.warmstart import ensure_model  # noqa: E402
from replay_rl.generation.backend import sampling_params  # noqa: E402
from replay_rl.generation.hf import HFBackend  # noqa: E402
from replay_rl.models.hf_folder import load_tokenizer  # noqa: E402
from replay_rl.rollout import FINISH_LENGTH  # noqa: E402
from replay_rl.tasks import make_task  # noqa: E402
from replay_rl.tasks.scoring import completion_rewards, encode_prompts  # noqa: E402


def ks_test(a: np.ndarray, b: np.ndarray) -> dict:
    """Two-sample Kolmogorov-Smirnov: the largest gap between the empirical CDFs, and its asymptotic p-value."""
    grid = np.sort(np.concatenate([a, b]))
    d = float(np.max(np.abs(np.searchsorted(np.sort(a), grid, "right") / len(a) -
                            np.searchsorted(np.sort(b), grid, "right") / len(b))))
    ne = len(a) * len(b) / (len(a) + len(b))
    lam = (np.sqrt(ne) + 0.12 + 0.11 / np.sqrt(ne)) * d
    p = float(np.clip(2 * sum((-1) ** (k - 1) * np.exp(-2 * k * k * lam * lam) for k in range(1, 101)), 0, 1))
    return {"d": d, "p": p if d > 0 else 1.0}


def summary(rows: list[dict]) -> dict:
    """Each measure's mean and standard error over completions."""
    return {k: {"mean": float(np.mean(v := [r[k] for r in rows])), "se": float(np.std(v, ddof=1) / np.sqrt(len(v)))}
            for k in ("length", "cut", "reward", "mean_logprob")}


def described(backend: HFBackend, task, tok, problems, completions) -> list[dict]:
    """Per completion: length, cut, reward (our scorer) and its tokens' mean log-prob under the starting weights."""
    prompts = encode_prompts(tok, problems, chat=True)
    rewards = completion_rewards(task, tok, list(zip(problems, completions)))
    scored = backend.score([np.concatenate([p, c.token_ids]) for p, c in zip(prompts, completions)])
    return [{"length": len(c.token_ids), "cut": float(c.finish == FINISH_LENGTH), "reward": r,
             "mean_logprob": float(np.mean(s[len(p) - 1:]))}
            for p, c, r, s in zip(prompts, completions, rewards, scored)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=16, help="generation calls a side, each on --problems problems")
    ap.add_argument("--problems", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "peer_trl" / "step"))
    args = ap.parse_args()
    cfg = RunConfig.load(str(PRESET), MATCHED)
    model, g = ensure_model(cfg), cfg.generation
    task, tok = make_task(cfg.task, cfg.task.split_seed), load_tokenizer(model)
    _, problems, generate_trl = trl_sampling(cfg, model, Path(args.out), args.problems, args.seed)
    backend = HFBackend(str(model))
    torch.manual_seed(args.seed)
    sides: dict[str, list[dict]] = {"trl": [], "ours": []}
    for _ in range(args.calls):
        sides["trl"] += described(backend, task, tok, problems, generate_trl()[1])
        groups = backend.generate(encode_prompts(tok, problems[::g.group_size], chat=True), sampling_params(g))
        sides["ours"] += described(backend, task, tok, problems, [c for group in groups for c in group])
    result = {"calls": args.calls, "problems": args.problems, "group_size": g.group_size, "seed": args.seed,
              "completions_a_side": len(sides["ours"]), **{s: summary(rows) for s, rows in sides.items()},
              "ks": {k: ks_test(np.array([r[k] for r in sides["trl"]], float),
                                np.array([r[k] for r in sides["ours"]], float)) for k in ("mean_logprob", "length")}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"sampler_seed{args.seed}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
