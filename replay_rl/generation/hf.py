"""transformers backend: HF `generate` with sampling. Always available; the CPU default."""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np
import torch
from transformers import GenerationConfig, LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

from replay_rl.generation.backend import Completion, SamplingParams, truncate_at_eos
from replay_rl.models.hf_folder import load_model, load_tokenizer
from replay_rl.models.scoring import sequence_logprobs


class SampledLogprobs:
    """The last logits processor: the log-probability of each drawn token under the distribution it was drawn from.
    It keeps one step's log-softmax and reads the drawn token from the next step's input ids, so memory is
    O(rows·vocab), where HF's output_scores keeps every step's scores, O(rows·steps·vocab): 80 GB for 128 rollouts
    of 1024 tokens at a 152k vocabulary."""

    def __init__(self) -> None:
        self.last: torch.Tensor | None = None
        self.picked: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._take(input_ids[:, -1])
        self.last = torch.log_softmax(scores.float(), -1)
        return scores

    def _take(self, drawn: torch.Tensor) -> None:
        if self.last is not None:
            self.picked.append(self.last.gather(-1, drawn[:, None]).squeeze(-1))
            self.last = None

    def result(self, new: torch.Tensor) -> torch.Tensor:
        """(rows, C) log-probs of the C new tokens (HF may have run one step past the end and undone it)."""
        if len(self.picked) < new.shape[1]:
            self._take(new[:, len(self.picked)])
        return torch.stack(self.picked[:new.shape[1]], dim=1)


class HFBackend:
    def __init__(self, model_path: str, dtype: str = "float32", device: str = "cpu") -> None:
        self.device = torch.device(device)
        self.model = load_model(model_path, dtype).to(self.device).eval()
        tok = load_tokenizer(model_path)
        # nothing from the model's generation_config.json (a top_k, a repetition penalty, another EOS): HF merges it
        # into every generate call's unset fields, and the learner's π_θ reproduces temperature and top-p only
        self.model.generation_config = GenerationConfig(pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        self.pad_id, self.eos_id = tok.pad_token_id, tok.eos_token_id
        self.version = 0
        self._tokens = 0

    @torch.no_grad()
    def generate(self, prompts: Sequence[np.ndarray], params: SamplingParams,
                 on_step: Callable[[], None] | None = None) -> list[list[Completion]]:
        # on_step is ignored: HF generate runs to completion, so weights change only between calls
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):  # left padding: every prompt ends at the same column
            ids[i, width - len(p):] = torch.as_tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        greedy = params.temperature == 0
        recorder = SampledLogprobs()
        # temperature and top-p are applied here, before the recorder, rather than by HF (which adds its warpers
        # after custom processors): the recorded distribution is the one each token is drawn from, and the
        # learner recomputes it (learner/losses.py processed_logits)
        warpers = [] if greedy else [TemperatureLogitsWarper(params.temperature)] * (params.temperature != 1.0) + \
            [TopPLogitsWarper(params.top_p)] * (params.top_p < 1.0)
        out = self.model.generate(
            input_ids=ids.to(self.device), attention_mask=mask.to(self.device), max_new_tokens=params.max_new_tokens,
            do_sample=not greedy, temperature=None if greedy else 1.0, top_p=None if greedy else 1.0, top_k=None,
            min_p=None, typical_p=None, repetition_penalty=None, epsilon_cutoff=None, eta_cutoff=None,
            num_return_sequences=params.n, logits_processor=LogitsProcessorList([*warpers, recorder]),
            pad_token_id=self.pad_id, eos_token_id=self.eos_id,
        )
        new = out[:, width:]                                             # (len·n, C)
        logprobs = recorder.result(new)
        new, logprobs = new.cpu().numpy(), logprobs.cpu().numpy()
        rows = [truncate_at_eos(new[j], logprobs[j], self.eos_id, self.version) for j in range(len(new))]
        self._tokens += sum(len(r.token_ids) for r in rows)
        return [rows[i * params.n:(i + 1) * params.n] for i in range(len(prompts))]

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        state = self.model.state_dict()
        for name, tensor in named_tensors:
            if name not in state:
                raise KeyError(f"weight {name!r} is not a parameter of the generator's model; "
                               "learner and generator must load the same architecture")
            state[name].copy_(tensor)
        self.version = version

    def score(self, sequences: Sequence[np.ndarray]) -> list[np.ndarray]:
        return sequence_logprobs(self.model, sequences, self.pad_id)

    def tokens_generated(self) -> int:
        return self._tokens
