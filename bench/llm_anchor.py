"""bench-llm's anchor: the same shoal-gpt weights as a Hugging Face transformers GPT2LMHeadModel
(the contract is GPT-2's architecture: Conv1D weights are the transposed linears, GELU-tanh is
"gelu_new", the head tied to wte), generating with model.generate behind a minimal threaded HTTP
server that speaks the same OpenAI-compatible POST /v1/completions with stream: true (SSE, one
event per token, a usage event, [DONE]). Each request runs its own generate (transformers has no
continuous batching); torch uses --threads intra-op threads, as many as Shoal's engine.

Before serving it checks that its greedy tokens equal tools/lm/model.py's on a probe prompt
(same weights, same model) and prints {"ready": port, "probe_equal": bool} on stdout.
  python bench/llm_anchor.py --base model.safetensors --port P --threads T
"""

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from safetensors import safe_open
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
from tools.lm import model as ref  # noqa: E402

EOS = 256


def load_gpt2(path):
    with safe_open(path, "pt") as f:
        meta = f.metadata()
        t = {k: f.get_tensor(k) for k in f.keys()}
    d, n_layer, n_head, n_ctx = (int(meta[k]) for k in ("d_model", "n_layer", "n_head", "n_ctx"))
    cfg = GPT2Config(vocab_size=257, n_positions=n_ctx, n_embd=d, n_layer=n_layer, n_head=n_head,
                     activation_function="gelu_new", layer_norm_epsilon=1e-5,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=EOS,
                     eos_token_id=EOS, tie_word_embeddings=True)
    m = GPT2LMHeadModel(cfg)
    sd = {"transformer.wte.weight": t["wte"], "transformer.wpe.weight": t["wpe"],
          "transformer.ln_f.weight": t["ln_f.weight"], "transformer.ln_f.bias": t["ln_f.bias"]}
    for i in range(n_layer):
        p, q = f"h.{i}.", f"transformer.h.{i}."
        for a, b in (("ln1", "ln_1"), ("ln2", "ln_2")):
            sd[q + b + ".weight"] = t[p + a + ".weight"]
            sd[q + b + ".bias"] = t[p + a + ".bias"]
        for a, b in (("attn.qkv", "attn.c_attn"), ("attn.proj", "attn.c_proj"),
                     ("mlp.fc", "mlp.c_fc"), ("mlp.proj", "mlp.c_proj")):
            sd[q + b + ".weight"] = t[p + a + ".weight"].t().contiguous()  # Conv1D: [in, out]
            sd[q + b + ".bias"] = t[p + a + ".bias"]
    sd["lm_head.weight"] = t["wte"]
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert not unexpected and all("attn.bias" in k or "masked_bias" in k for k in missing), \
        (missing, unexpected)
    return m.eval(), n_ctx


class TokenStreamer:
    """transformers' streamer protocol: put() gets the prompt first, then each new token."""

    def __init__(self, on_token):
        self.on_token, self.prompt_seen = on_token, False

    def put(self, value):
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        for tok in value.reshape(-1).tolist():
            self.on_token(int(tok))

    def end(self):
        pass


def make_handler(model, n_ctx):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def chunk(self, data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            prompt = list(body["prompt"].encode())
            max_new = min(int(body.get("max_tokens", 16)), n_ctx - len(prompt))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            count = [0]

            def on_token(tok):
                count[0] += 1
                text = bytes([tok]).decode("latin-1") if tok < 256 else ""
                ev = {"object": "text_completion", "choices": [{"index": 0, "text": text}]}
                self.chunk(b"data: " + json.dumps(ev).encode() + b"\n\n")

            with torch.no_grad():
                model.generate(torch.tensor([prompt]), max_new_tokens=max_new, do_sample=False,
                               eos_token_id=EOS, pad_token_id=EOS,
                               attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                               streamer=TokenStreamer(on_token))
            usage = {"prompt_tokens": len(prompt), "completion_tokens": count[0],
                     "total_tokens": len(prompt) + count[0]}
            self.chunk(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
            self.chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, n_ctx = load_gpt2(args.base)
    probe = ref.encode("The quick brown fox")
    want = ref.generate(ref.load(args.base), probe, 16)
    with torch.no_grad():
        out = model.generate(torch.tensor([probe]), max_new_tokens=16, do_sample=False,
                             eos_token_id=EOS, pad_token_id=EOS,
                             attention_mask=torch.ones(1, len(probe), dtype=torch.long))
    got = out[0, len(probe):].tolist()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(model, n_ctx))
    server.daemon_threads = True
    print(json.dumps({"ready": args.port, "probe_equal": got == want}), flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
