"""transformers backend: HF `generate` with sampling. Always available; the CPU default."""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from replay_rl.generation.backend import Completion, SamplingParams, truncate_at_eos
from replay_rl.models import load_model, load_tokenizer


class HFBackend:
    def __init__(self, model_path: str, dtype: str = "float32", device: str = "cpu") -> None:
        self.device = torch.device(device)
        self.model = load_model(model_path, dtype).to(self.device).eval()
        tok = load_tokenizer(model_path)
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
        out = self.model.generate(
            input_ids=ids.to(self.device), attention_mask=mask.to(self.device), max_new_tokens=params.max_new_tokens,
            do_sample=not greedy, temperature=None if greedy else params.temperature,
            top_p=None if greedy else params.top_p, top_k=None, num_return_sequences=params.n,
            pad_token_id=self.pad_id, eos_token_id=self.eos_id, return_dict_in_generate=True, output_scores=True,
        )
        new = out.sequences[:, width:]                                   # (len·n, C)
        # scores are processed: temperature applied, tokens outside top-p at −inf; their log-softmax is the
        # distribution each token was drawn from, which the learner recomputes (learner/losses.py processed_logits)
        scores = torch.stack(out.scores, dim=1).float()                  # (len·n, C, V)
        logprobs = torch.log_softmax(scores, -1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
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

    def tokens_generated(self) -> int:
        return self._tokens
