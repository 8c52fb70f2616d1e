"""The native shoal-gpt runtime (shoal/serving/lm, driven by build/bin/shoal-lm) against the
PyTorch reference (tools/lm/model.py) on the same random weights: greedy fp32 generation equal
token for token, with and without a LoRA adapter, alone and in several continuous-batching
compositions (all at once, joining at different steps, base and adapter mixed); stop sequences,
max_tokens and the context limit end generation where the contract says; a malformed base or
adapter is refused naming the tensor.

Run by ctest (lm_reference.serving), or:
  SHOAL_BIN_DIR=build/bin .venv/bin/python -m pytest -q tests/serving/lm/lm_reference_test.py
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, ROOT)
torch = pytest.importorskip("torch", reason="torch is not installed")
from tools.lm import model as ref  # noqa: E402

BIN = os.environ.get("SHOAL_BIN_DIR", os.path.join(ROOT, "build", "bin"))
SHOAL_LM = os.path.join(BIN, "shoal-lm")
PROMPTS = ["Hello", "The quick brown fox", "a", "", "0123456789" * 3 + "abcdefghij"]
MAX_TOKENS = 20
ALPHA = 8.0


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if not os.path.exists(SHOAL_LM):
        pytest.skip(f"{SHOAL_LM} is not built (oneDNN missing?)")
    d = tmp_path_factory.mktemp("lm")
    base, adapter = str(d / "base.safetensors"), str(d / "adapter.safetensors")
    ref.main(["--random", "--seed", "3", "--d-model", "64", "--n-layer", "2", "--n-head", "4",
              "--n-ctx", "64", "--out", base, "--adapter-out", adapter, "--rank", "4",
              "--alpha", str(ALPHA)])
    base_model = ref.load(base)
    tuned = ref.load(base)
    tensors, alpha = ref.load_adapter(adapter, None)
    ref.apply_lora(tuned, tensors, alpha)
    expect = {}
    for name, m in (("", base_model), ("ft", tuned)):
        for p in PROMPTS:
            expect[(name, p)] = ref.generate(m, ref.encode(p), MAX_TOKENS)
    return {"dir": d, "base": base, "adapter": adapter, "expect": expect, "model": base_model}


def run(setup, requests, *extra):
    path = setup["dir"] / "requests.json"
    path.write_text(json.dumps(requests))
    out = subprocess.run([SHOAL_LM, "--base", setup["base"], "--adapter",
                          f"ft={setup['adapter']}", "--requests", str(path), *extra],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def req(prompt, adapter="", join=0, **kw):
    return dict(prompt=prompt, adapter=adapter, join_step=join, max_tokens=MAX_TOKENS, **kw)


def test_adapter_changes_the_output(setup):
    differs = [p for p in PROMPTS if setup["expect"][("", p)] != setup["expect"][("ft", p)]]
    assert len(differs) >= 3


@pytest.mark.parametrize("layout", ["together", "staggered", "mixed", "one_at_a_time"])
def test_batched_equals_reference(setup, layout):
    reqs = []
    for i, p in enumerate(PROMPTS):
        for j, name in enumerate(("", "ft")):
            if layout == "together":
                reqs.append(req(p, name))
            elif layout == "staggered":
                reqs.append(req(p, name, join=3 * i + j))
            elif layout == "mixed":
                reqs.append(req(p, name, join=(7 * i + 5 * j) % 11))
            else:  # each alone
                reqs.append(req(p, name, join=(2 * i + j) * (MAX_TOKENS + 1)))
    got = run(setup, reqs)
    for r, g in zip(reqs, got):
        assert g["tokens"] == setup["expect"][(r["adapter"], r["prompt"])], r


def test_max_sequences_queues_the_rest(setup):
    reqs = [req(p, name) for p in PROMPTS for name in ("", "ft")]
    got = run(setup, reqs, "--max-sequences", "3")
    for r, g in zip(reqs, got):
        assert g["tokens"] == setup["expect"][(r["adapter"], r["prompt"])], r


def test_stop_sequence_and_length(setup):
    toks = setup["expect"][("", "Hello")]
    text = bytes(t for t in toks if t < 256)
    assert len(text) >= 8
    stop = list(text[4:6])
    cut = text.find(text[4:6])
    [g] = run(setup, [req("Hello", stop=[stop])])
    assert g["finish"] == "stop"
    assert g["tokens"] == toks[:cut + 2]
    [g] = run(setup, [dict(prompt="Hello", max_tokens=3)])
    assert g["tokens"] == toks[:3] and g["finish"] == "length"
    # 60 prompt bytes in a 64-token context: 4 tokens, as the reference stops.
    p = "x" * 60
    want = ref.generate(setup["model"], ref.encode(p), MAX_TOKENS)
    [g] = run(setup, [req(p)])
    assert g["tokens"] == want and len(want) <= 4
    [g] = run(setup, [req("y" * 64)])
    assert g["finish"].startswith("error: prompt: 64 tokens (bytes)"), g


def test_bad_files_are_refused_naming_the_tensor(setup, tmp_path):
    from safetensors.torch import load_file, save_file
    sd = load_file(setup["base"])
    with open(setup["base"], "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        meta = json.loads(f.read(n))["__metadata__"]
    sd["h.1.mlp.fc.weight"] = sd["h.1.mlp.fc.weight"][:10].contiguous()
    bad = str(tmp_path / "bad.safetensors")
    save_file(sd, bad, metadata=meta)
    (tmp_path / "r.json").write_text("[]")
    out = subprocess.run([SHOAL_LM, "--base", bad, "--requests", str(tmp_path / "r.json")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "tensor 'h.1.mlp.fc.weight' has shape [10, 64], the metadata says [256, 64]" in out.stderr
    ad = load_file(setup["adapter"])
    key = next(k for k in ad if k.endswith("attn.qkv.lora_B"))
    ad[key] = ad[key][:, :2].contiguous()
    save_file(ad, bad, metadata={"format": "shoal-lora/1", "rank": "4", "alpha": "8"})
    out = subprocess.run([SHOAL_LM, "--base", setup["base"], "--adapter", f"x={bad}",
                          "--requests", str(tmp_path / "r.json")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert f"tensor '{key}' has shape [192, 2], the metadata says [192, 4]" in out.stderr


def test_hot_swap_between_steps(setup):
    """A new version of an adapter put between steps: sequences that started before it finish
    on the version they started with; those that join after take the new one."""
    model = ref.load(setup["base"])
    second = str(setup["dir"] / "adapter2.safetensors")
    ref.save_adapter(ref._random_adapter(model, 4, 99), second, ALPHA)
    tuned2 = ref.load(setup["base"])
    tensors, alpha = ref.load_adapter(second, None)
    ref.apply_lora(tuned2, tensors, alpha)
    reqs = [req(p, "ft", join=0) for p in PROMPTS] + [req(p, "ft", join=5) for p in PROMPTS]
    got = run(setup, reqs, "--put", f"5:ft={second}")
    for r, g in zip(reqs, got):
        if r["join_step"] == 0:
            assert g["adapter_version"] == 1
            assert g["tokens"] == setup["expect"][("ft", r["prompt"])], r
        else:
            assert g["adapter_version"] == 2
            assert g["tokens"] == ref.generate(tuned2, ref.encode(r["prompt"]), MAX_TOKENS), r


INT8_TOLERANCE = 0.05  # max |logit(int8) - logit(fp32)| <= this x max |logit(fp32)|


def test_int8_logits_within_tolerance(setup):
    path = setup["dir"] / "prompts.json"
    path.write_text(json.dumps([{"prompt": p} for p in PROMPTS]))
    out = subprocess.run([SHOAL_LM, "--base", setup["base"], "--requests", str(path),
                          "--compare-int8"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(rows) == len(PROMPTS)
    for p, r in zip(PROMPTS, rows):
        print(p, r)
        assert 0 < r["max_abs_diff"] <= INT8_TOLERANCE * r["max_abs_logit"], (p, r)
    # Served int8 runs (greedy): the first token is fp32's where the logits' top two are apart.
    got = run(setup, [req(p) for p in PROMPTS], "--int8")
    assert all(g["finish"] in ("stop", "length") for g in got)
    first_equal = sum(g["tokens"][0] == setup["expect"][("", p)][0] for p, g in zip(PROMPTS, got))
    assert first_equal == sum(r["argmax_equal"] for r in rows)
