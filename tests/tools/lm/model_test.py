"""tools/lm/model.py: the shoal-gpt reference. The file format round-trips bit for bit, a
reader names the tensor it refuses, KV-cache generation equals no-cache generation token for
token, and LoRA applied unmerged equals LoRA merged into the weights."""

import json
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from tools.lm import model as lm

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("lm") / "m.safetensors"
    adapter = path.with_name("a.safetensors")
    subprocess.run([sys.executable, "-m", "tools.lm.model", "--random", "--seed", "7",
                    "--d-model", "64", "--n-layer", "2", "--n-head", "4", "--n-ctx", "64",
                    "--out", str(path), "--adapter-out", str(adapter), "--rank", "4",
                    "--alpha", "8"], check=True)
    return path, adapter


def test_random_file_is_the_contract(small):
    path, _ = small
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata() == {"format": "shoal-gpt/1", "vocab_size": "257", "d_model": "64",
                                "n_layer": "2", "n_head": "4", "n_ctx": "64", "eos": "256"}
        cfg = lm.Config(64, 2, 4, 64)
        assert sorted(f.keys()) == sorted(cfg.shapes())
        for name, shape in cfg.shapes().items():
            t = f.get_tensor(name)
            assert t.dtype == torch.float32 and tuple(t.shape) == shape, name
    n = 257 * 64 + 64 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64
    assert sum(p.numel() for p in lm.load(str(path)).parameters()) == n == 120640


def test_save_load_round_trip_is_bit_exact(small, tmp_path):
    # Bytes of every tensor and the metadata (safetensors orders the metadata keys at random, so
    # two writes of one model differ in the header only).
    path, _ = small
    m = lm.load(str(path))
    again = tmp_path / "again.safetensors"
    lm.save(m, str(again))
    with safe_open(str(path), framework="pt") as f, safe_open(str(again), framework="pt") as g:
        assert f.metadata() == g.metadata() and sorted(f.keys()) == sorted(g.keys())
        for k in f.keys():
            assert f.get_tensor(k).numpy().tobytes() == g.get_tensor(k).numpy().tobytes(), k
    m2 = lm.load(str(again))
    for (k, v), (k2, v2) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)


def test_reader_names_the_wrong_tensor(small, tmp_path):
    path, _ = small
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    bad = dict(tensors, **{"h.1.mlp.fc.weight": torch.zeros(255, 64)})
    save_file(bad, str(tmp_path / "bad.safetensors"), metadata=meta)
    with pytest.raises(lm.FormatError, match=r"tensor h\.1\.mlp\.fc\.weight has shape "
                                             r"\[255, 64\], expected \[256, 64\]"):
        lm.load(str(tmp_path / "bad.safetensors"))
    missing = {k: v for k, v in tensors.items() if k != "ln_f.bias"}
    save_file(missing, str(tmp_path / "missing.safetensors"), metadata=meta)
    with pytest.raises(lm.FormatError, match="missing tensor ln_f.bias"):
        lm.load(str(tmp_path / "missing.safetensors"))


def test_kv_cache_generation_equals_no_cache_token_for_token(small):
    path, adapter = small
    m = lm.load(str(path))
    prompt = lm.encode("The quick brown fox")
    cached = lm.generate(m, prompt, 40, use_cache=True)
    plain = lm.generate(m, prompt, 40, use_cache=False)
    assert cached == plain
    assert len(cached) == 40 or cached[-1] == lm.EOS
    # Stops at n_ctx: 19 prompt bytes + 45 new tokens = 64.
    assert len(lm.generate(m, prompt, 100)) <= 64 - len(prompt)
    # Logits with the cache equal the full forward's at every position (fp32 tolerance).
    toks = torch.tensor([prompt + cached[:10]])
    full, _ = m(toks)
    _, cache = m(toks[:, :5])
    step = []
    for i in range(5, toks.shape[1]):
        logits, cache = m(toks[:, i:i + 1], cache)
        step.append(logits[0, 0])
    assert torch.allclose(full[0, 5:], torch.stack(step), atol=1e-5)
    # Sampling with a seed: same seed, same tokens, with or without the cache.
    s1 = lm.generate(m, prompt, 30, temperature=0.9, top_p=0.9, seed=5)
    s2 = lm.generate(m, prompt, 30, temperature=0.9, top_p=0.9, seed=5, use_cache=False)
    assert s1 == s2


def test_lora_unmerged_equals_merged_and_init_is_identity(small):
    path, adapter = small
    m = lm.load(str(path))
    toks = torch.tensor([lm.encode("federated learning")])
    base, _ = m(toks)
    init = lm.lora_init(m, rank=4, seed=1)
    assert lm.apply_lora(m, init, alpha=8.0) == 4
    assert torch.equal(m(toks)[0], base)  # B = 0: the adapted model is the base
    tensors, alpha = lm.load_adapter(str(adapter))
    assert alpha == 8.0 and tensors["h.0.attn.qkv.lora_A"].shape == (4, 64)
    assert tensors["h.1.mlp.proj.lora_B"].shape == (64, 4)
    lm.apply_lora(m, tensors, alpha)
    adapted, _ = m(toks)
    assert not torch.allclose(adapted, base, atol=1e-3)
    lm.merge_lora(m)
    assert not lm.adapter_tensors(m)
    assert torch.allclose(m(toks)[0], adapted, atol=1e-4)


def test_adapter_checks_name_the_tensor(small):
    path, _ = small
    m = lm.load(str(path))
    t = lm.lora_init(m, rank=4, seed=1)
    with pytest.raises(lm.FormatError, match=r"tensor h\.0\.mlp\.fc\.lora_B has shape "
                                             r"\[256, 3\], expected \[256, 4\]"):
        lm.check_adapter(m, dict(t, **{"h.0.mlp.fc.lora_B": torch.zeros(256, 3)}))
    with pytest.raises(lm.FormatError, match=r"tensor h\.1\.attn\.proj\.lora_A has shape "
                                             r"\[4, 32\], expected \[4, 64\]"):
        lm.check_adapter(m, dict(t, **{"h.1.attn.proj.lora_A": torch.zeros(4, 32)}))
    with pytest.raises(lm.FormatError, match=r"tensor h\.5\.mlp\.fc\.lora_A names no linear"):
        lm.check_adapter(m, dict(t, **{"h.5.mlp.fc.lora_A": torch.zeros(4, 64)}))


def test_cli_generates_json(small):
    path, adapter = small
    out = subprocess.run([sys.executable, "-m", "tools.lm.model", "--model", str(path),
                          "--adapter", str(adapter), "--prompt", "Hi", "--max-new-tokens", "8"],
                         check=True, capture_output=True, text=True).stdout
    got = json.loads(out)
    m = lm.load(str(path))
    tensors, alpha = lm.load_adapter(str(adapter))
    lm.apply_lora(m, tensors, alpha)
    assert got["tokens"] == lm.generate(m, lm.encode("Hi"), 8)
