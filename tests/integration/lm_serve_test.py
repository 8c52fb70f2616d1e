"""The lm inference function end to end (issue 36 item 3): shoald serves a random shoal-gpt model
(tools/lm/model.py --random) and a LoRA adapter with spec.inference.source.lm, over the
OpenAI-compatible routes under /fn/<name>/v1. Concurrent greedy completions (base and adapter,
chosen by model "lm:ft" or the adapter field) equal the PyTorch reference token for token and
count usage in bytes; the OpenAI Python client works unchanged (models, completions, chat,
streaming with usage); streamed chunks concatenate to the non-streamed answer, greedy and seeded
sampling; the stream is chunked SSE ending in [DONE]; bad requests get 400s naming the field.

Run by ctest (lm_serve.integration), or:
  SHOAL_BIN_DIR=build/bin .venv/bin/python -m pytest -q tests/integration/lm_serve_test.py
Needs root (shoald's data plane), torch and openai; skips naming what is missing.
"""

import http.client
import json
import os
import sys
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, ROOT)
from shoal_testlib import BIN, standalone_shoald  # noqa: E402

torch = pytest.importorskip("torch", reason="torch is not installed")
openai = pytest.importorskip("openai", reason="openai is not installed")
from tools.lm import model as ref  # noqa: E402

FN = "lm"
PROMPTS = ["Hello", "The quick brown fox", "a", "0123456789abcdef"]
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def served():
    # Beside the build (the instances' sandboxes see it, not the host's /tmp).
    out = os.path.join(os.path.dirname(os.path.abspath(BIN)), "lm_serve")
    os.makedirs(out, exist_ok=True)
    base, adapter = os.path.join(out, "base.safetensors"), os.path.join(out, "ft.safetensors")
    ref.main(["--random", "--seed", "5", "--out", base, "--adapter-out", adapter])
    for p in (base, adapter):
        os.chmod(p, 0o644)
    models = {"": ref.load(base), "ft": ref.load(base)}
    tensors, alpha = ref.load_adapter(adapter, None)
    ref.apply_lora(models["ft"], tensors, alpha)
    with standalone_shoald("lmserve", binaries=("shoald", "shoal", "shoal-fn")) as s:
        s.deploy(f"""apiVersion: shoal.dev/v1
kind: Function
metadata: {{name: {FN}}}
spec:
  handler: inference
  concurrency: 16
  scale: {{min: 1, max: 1}}
  inference:
    threads: 1
    maxBatchSize: 16
    source:
      lm:
        base: {base}
        adapters:
          - {{name: ft, path: {adapter}}}
""")
        s.wait_ready(FN, timeout=60)
        yield s, models


def post(port, path, body, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", f"/fn/{FN}{path}", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    headers = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, headers, data


def expected(models, adapter, prompt, n=MAX_TOKENS):
    return ref.generate(models[adapter], ref.encode(prompt), n)


def test_concurrent_greedy_completions_equal_reference(served):
    s, models = served
    jobs = []
    for p in PROMPTS:
        jobs.append(({"model": FN, "prompt": p}, ""))
        jobs.append(({"model": f"{FN}:ft", "prompt": p}, "ft"))
        jobs.append(({"model": FN, "adapter": "ft", "prompt": p}, "ft"))
    results = [None] * len(jobs)

    def run(i, body):
        body = dict(body, max_tokens=MAX_TOKENS, temperature=0, return_token_ids=True)
        results[i] = post(s.port, "/v1/completions", body)

    threads = [threading.Thread(target=run, args=(i, b)) for i, (b, _) in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for (body, adapter), (status, _, data) in zip(jobs, results):
        assert status == 200, data
        answer = json.loads(data)
        choice = answer["choices"][0]
        want = expected(models, adapter, body["prompt"])
        assert choice["token_ids"] == want, (body, choice)
        assert choice["finish_reason"] == ("stop" if want[-1] == 256 else "length")
        assert answer["usage"] == {"prompt_tokens": len(body["prompt"]),
                                   "completion_tokens": len(want),
                                   "total_tokens": len(body["prompt"]) + len(want)}
        assert answer["object"] == "text_completion" and answer["model"] == body["model"]
    stats = json.loads(s.api.request(f"/v1/functions/{FN}")[1] or "{}")
    assert stats  # the function is still there after the burst


def test_openai_client_unchanged(served):
    s, models = served
    client = openai.OpenAI(base_url=f"{s.gw}/fn/{FN}/v1", api_key="unused", max_retries=0)
    assert sorted(m.id for m in client.models.list().data) == [FN, f"{FN}:ft"]
    c = client.completions.create(model=f"{FN}:ft", prompt="Hello", max_tokens=MAX_TOKENS,
                                  temperature=0)
    want = expected(models, "ft", "Hello")
    assert c.choices[0].text == ref.decode(want)
    assert c.usage.prompt_tokens == 5 and c.usage.completion_tokens == len(want)
    pieces = list(client.completions.create(model=f"{FN}:ft", prompt="Hello",
                                            max_tokens=MAX_TOKENS, temperature=0, stream=True))
    assert "".join(p.choices[0].text for p in pieces) == c.choices[0].text
    assert pieces[-1].choices[0].finish_reason == c.choices[0].finish_reason
    assert len(pieces) >= 2
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    chat = client.chat.completions.create(model=FN, messages=messages, max_tokens=MAX_TOKENS,
                                          temperature=0)
    prompt = "system: Be brief.\nuser: Hi\nassistant: "
    want = expected(models, "", prompt)
    assert chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content == ref.decode(want)
    assert chat.usage.prompt_tokens == len(prompt)
    stream = list(client.chat.completions.create(
        model=FN, messages=messages, max_tokens=MAX_TOKENS, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert stream[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == \
        chat.choices[0].message.content
    assert stream[-1].usage.completion_tokens == chat.usage.completion_tokens
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=f"{FN}:nope", prompt="x")
    assert "model: adapter 'nope' is not loaded (loaded: ft)" in str(e.value)


def sse_events(data):
    events = data.decode().split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    return [json.loads(e[len("data: "):]) for e in events[:-2]]


def test_stream_is_chunked_sse_and_concatenates(served):
    s, _ = served
    for sampling in ({"temperature": 0}, {"temperature": 0.9, "top_p": 0.8, "seed": 11}):
        body = dict(model=f"{FN}:ft", prompt="The quick", max_tokens=MAX_TOKENS, **sampling)
        status, headers, whole = post(s.port, "/v1/completions", body)
        assert status == 200 and headers["content-type"] == "application/json"
        status, headers, data = post(s.port, "/v1/completions", dict(body, stream=True))
        assert status == 200
        assert headers["content-type"] == "text/event-stream"
        assert headers["transfer-encoding"] == "chunked" and "content-length" not in headers
        events = sse_events(data)
        text = "".join(e["choices"][0]["text"] for e in events)
        assert text == json.loads(whole)["choices"][0]["text"]
        assert events[-1]["choices"][0]["finish_reason"] in ("stop", "length")
        assert all(e["id"] == events[0]["id"] for e in events)
    # A seed gives the same sample again.
    body = dict(model=FN, prompt="abc", max_tokens=MAX_TOKENS, temperature=1, seed=3)
    first = json.loads(post(s.port, "/v1/completions", body)[2])["choices"][0]["text"]
    again = json.loads(post(s.port, "/v1/completions", body)[2])["choices"][0]["text"]
    assert first == again


@pytest.mark.parametrize("path,body,message", [
    ("/v1/completions", {"model": FN}, "prompt: is required"),
    ("/v1/completions", {"model": FN, "prompt": "x", "max_tokens": 0},
     "max_tokens: must be in [1, "),
    ("/v1/completions", {"model": FN, "prompt": "x", "temperature": 3},
     "temperature: must be in [0, 2], got 3"),
    ("/v1/completions", {"model": FN, "prompt": "x", "top_p": 0}, "top_p: must be in (0, 1]"),
    ("/v1/completions", {"model": "gpt-4", "prompt": "x"},
     "model: 'gpt-4' is not served here: use 'lm' or 'lm:<adapter>'"),
    ("/v1/completions", {"model": FN, "prompt": "x", "adapter": "nope"},
     "model: adapter 'nope' is not loaded (loaded: ft)"),
    ("/v1/completions", {"model": FN, "prompt": ["a", "b"]},
     "prompt: one prompt per request (got a list of 2)"),
    ("/v1/completions", {"model": FN, "prompt": "x", "n": 2},
     "n: only 1 choice per request is supported"),
    ("/v1/completions", {"model": FN, "prompt": "x", "stop": ["a", "b", "c", "d", "e"]},
     "stop: must be a string or a list of at most 4 strings"),
    ("/v1/completions", {"model": FN, "prompt": "x" * 64},
     "prompt: 64 tokens (bytes), the model's context is 64 tokens"),
    ("/v1/completions", {"model": FN, "prompt": "x", "stream": "yes"},
     "stream: must be true or false"),
    ("/v1/chat/completions", {"model": FN}, "messages: is required"),
    ("/v1/chat/completions", {"model": FN, "messages": [{"content": "hi"}]},
     "messages[0].role: is required"),
])
def test_bad_requests_name_the_field(served, path, body, message):
    s, _ = served
    status, headers, data = post(s.port, path, body)
    assert status == 400, data
    err = json.loads(data)["error"]
    assert message in err["message"], err
    assert err["type"] == "invalid_request_error"


def test_not_json_is_400(served):
    s, _ = served
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    c.request("POST", f"/fn/{FN}/v1/completions", b"{nope", {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 400 and b"the request body is not JSON" in r.read()
