import subprocess
import sys

import pytest
import torch

from replay_rl.config import TinyModelSpec
from replay_rl.models.hf_folder import (CHARSET, build_tokenizer, init_tiny_model_folder, load_model, load_tokenizer,
                             parameter_count, usable_attention)


def test_tokenizer_round_trips_task_strings(tmp_path):
    tok = build_tokenizer()
    tok.save_pretrained(tmp_path)
    tok = load_tokenizer(tmp_path)
    for text in ["12+34=46", "3 5 7:22=3*5+7", "(8-2)/3", "What is 2+2?\nPut it in \\boxed{4}.", CHARSET]:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == len(text)  # one token per character
        assert tok.decode(ids) == text
    assert tok.decode(tok("1+1=", add_special_tokens=False)["input_ids"] + [tok.eos_token_id],
                      skip_special_tokens=True) == "1+1="


def test_tiny_model_folder_reloads_offline_with_identical_logits(tmp_path):
    spec = TinyModelSpec(seed=3)
    path = init_tiny_model_folder(spec, tmp_path / "m")
    assert (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file()
    model = load_model(path)
    assert 200_000 < parameter_count(model) < 5_000_000
    ids = load_tokenizer(path)("12+34=", return_tensors="pt")["input_ids"]
    # a fresh interpreter with the hub disabled must see exactly the same function
    # one thread on both sides (conftest bounds this process): reductions then sum in the same order
    code = (f"import torch; torch.set_num_threads(1); from transformers import AutoModelForCausalLM as M; "
            f"m = M.from_pretrained({str(path)!r}); print(m(torch.tensor({ids.tolist()})).logits.sum().item())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"HF_HUB_OFFLINE": "1", "PATH": ""}, check=True)
    with torch.no_grad():
        assert float(out.stdout.strip().splitlines()[-1]) == model(ids).logits.sum().item()


def test_same_seed_same_weights_other_seed_differs(tmp_path):
    a = load_model(init_tiny_model_folder(TinyModelSpec(seed=1), tmp_path / "a"))
    b = load_model(init_tiny_model_folder(TinyModelSpec(seed=1), tmp_path / "b"))
    c = load_model(init_tiny_model_folder(TinyModelSpec(seed=2), tmp_path / "c"))
    for (n, p), q, r in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(p, q), n
    assert not all(torch.equal(p, r) for p, r in zip(a.parameters(), c.parameters()))


def test_flash_attention_falls_back_to_sdpa_in_one_line_where_it_cannot_run(tmp_path, capsys):
    from transformers.utils import is_flash_attn_2_available

    if is_flash_attn_2_available():
        pytest.skip("flash_attn runs here")
    path = init_tiny_model_folder(TinyModelSpec(), tmp_path / "m")
    usable_attention.cache_clear()
    models = [load_model(path, "float32", "flash_attention_2") for _ in range(2)]
    assert [m.config._attn_implementation for m in models] == ["sdpa", "sdpa"]
    said = [line for line in capsys.readouterr().out.splitlines() if "attn_implementation" in line]
    assert said == ["model.attn_implementation=flash_attention_2 is not available here (needs the flash_attn package "
                    "and a GPU); using sdpa"]
    assert load_model(path, "float32", "eager").config._attn_implementation == "eager"
