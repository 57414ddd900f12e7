"""Runs inside vLLM's worker processes (`worker_extension_cls`): loads new weights into the live model."""

from __future__ import annotations


class WeightLoaderExtension:
    def load_safetensors_bytes(self, data: bytes) -> int:
        from safetensors.torch import load

        state = load(data)
        if hasattr(self, "reload_weights"):  # vLLM ≥ 0.2x: in-place reload that re-runs weight post-processing
            self.reload_weights(weights_iterator=iter(state.items()))
        else:
            self.model_runner.model.load_weights(weights=list(state.items()))
        return len(state)
