"""Generation backend protocol. The generator and the evaluator know only this; hf.py and vllm.py are leaves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Protocol, Sequence

import numpy as np

from replay_rl.config import GenerationConfig
from replay_rl.rollout import FINISH_LENGTH, FINISH_STOP


@dataclass(frozen=True)
class SamplingParams:
    temperature: float   # 0 means greedy
    top_p: float
    max_new_tokens: int
    n: int               # completions per prompt (the group size G when training)


@dataclass(frozen=True)
class Completion:
    token_ids: np.ndarray  # (C,) int32, includes the EOS token when finish == FINISH_STOP
    logprobs: np.ndarray   # (C,) float32 log-prob of each token under the distribution it was sampled from:
                           # temperature applied, top-p renormalised (the learner's π_θ uses the same processing)
    finish: int            # FINISH_STOP | FINISH_LENGTH
    version: int           # weights version loaded when it finished (newer than the call's start after an
                           # in-flight update: then its later tokens came from the newer weights)


class HalfLoaded(RuntimeError):
    """A weight load failed part way: the engine holds layers of two versions (vLLM's layerwise reload also leaves
    its loaders wrapped), so it must not generate again. Its requests in flight were aborted; the driver takes this
    as the generator's death and a replacement loads the newest version whole."""


class GenerationBackend(Protocol):
    version: int  # learner version of the weights currently loaded

    def generate(self, prompts: Sequence[np.ndarray], params: SamplingParams,
                 on_step: Callable[[], None] | None = None) -> list[list[Completion]]: ...
    # on_step: called between decoding steps by backends that can swap weights mid-generation (vllm); it may call
    # load_weights. Backends that cannot (transformers) ignore it and update between calls only.
    # load_weights: a backend that cannot finish a load it began (vllm) raises HalfLoaded and refuses to generate
    # or score from then on; one whose next whole load repairs it (transformers) lets the error through.
    def load_weights(self, named_tensors: Iterable[tuple[str, "object"]], version: int) -> None: ...
    def score(self, sequences: Sequence[np.ndarray]) -> list[np.ndarray]: ...
    # log-probs of tokens 1..L−1 of each sequence under the weights loaded, raw (temperature 1, no nucleus): the
    # weight-path check (sync/weight_check.py). Not called while a generate call is in flight.
    def tokens_generated(self) -> int: ...


def truncate_at_eos(ids: np.ndarray, logprobs: np.ndarray, eos_id: int, version: int) -> Completion:
    """Cut a generated row after its first EOS (kept, so the learner trains the stop decision)."""
    hits = np.flatnonzero(ids == eos_id)
    if len(hits):
        end = int(hits[0]) + 1
        return Completion(ids[:end].astype(np.int32), logprobs[:end].astype(np.float32), FINISH_STOP, version)
    return Completion(ids.astype(np.int32), logprobs.astype(np.float32), FINISH_LENGTH, version)


def sampling_params(cfg: GenerationConfig, n: int | None = None, greedy: bool = False) -> SamplingParams:
    return SamplingParams(0.0 if greedy else cfg.temperature, cfg.top_p, cfg.max_new_tokens,
                          cfg.group_size if n is None else n)

