"""shoal-gpt: the PyTorch reference of the project's byte-level GPT-style language model.

The format contract (tensor names, shapes, metadata, LoRA adapters) is
docs/reference/lm-format.md; the C++ serving side codes against the same page and checks its
generation against this file token for token. Everything here is fp32 and deterministic.

    python -m tools.lm.model --random --seed 1 --d-model 64 --n-layer 2 --n-head 4 \
        --n-ctx 64 --out /tmp/m.safetensors [--adapter-out /tmp/a.safetensors --rank 4]
    python -m tools.lm.model --model /tmp/m.safetensors [--adapter A] --prompt "Hello" \
        --max-new-tokens 20 [--temperature 0.8 --top-p 0.9 --seed 3] [--no-cache]
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file

FORMAT = "shoal-gpt/1"
LORA_FORMAT = "shoal-lora/1"
VOCAB_SIZE = 257
EOS = 256
LN_EPS = 1e-5
# The linears a LoRA adapter may adapt, per layer (contract: docs/reference/lm-format.md).
LORA_TARGETS = ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj")


class FormatError(ValueError):
    """A model or adapter file that does not match the contract; the message names the tensor."""


@dataclass(frozen=True)
class Config:
    d_model: int
    n_layer: int
    n_head: int
    n_ctx: int
    vocab_size: int = VOCAB_SIZE
    eos: int = EOS

    def __post_init__(self):
        if self.d_model % self.n_head != 0:
            raise FormatError(f"d_model {self.d_model} is not a multiple of n_head {self.n_head}")

    def metadata(self) -> dict[str, str]:
        return {
            "format": FORMAT,
            "vocab_size": str(self.vocab_size),
            "d_model": str(self.d_model),
            "n_layer": str(self.n_layer),
            "n_head": str(self.n_head),
            "n_ctx": str(self.n_ctx),
            "eos": str(self.eos),
        }

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every base tensor's name and shape, in file order."""
        d, v = self.d_model, self.vocab_size
        out: dict[str, tuple[int, ...]] = {"wte": (v, d), "wpe": (self.n_ctx, d)}
        for i in range(self.n_layer):
            p = f"h.{i}."
            out.update({
                p + "ln1.weight": (d,), p + "ln1.bias": (d,),
                p + "attn.qkv.weight": (3 * d, d), p + "attn.qkv.bias": (3 * d,),
                p + "attn.proj.weight": (d, d), p + "attn.proj.bias": (d,),
                p + "ln2.weight": (d,), p + "ln2.bias": (d,),
                p + "mlp.fc.weight": (4 * d, d), p + "mlp.fc.bias": (4 * d,),
                p + "mlp.proj.weight": (d, 4 * d), p + "mlp.proj.bias": (d,),
            })
        out.update({"ln_f.weight": (d,), "ln_f.bias": (d,)})
        return out


class Linear(torch.nn.Module):
    """y = x W^T + b, plus (alpha / r) * (x A^T) B^T when a LoRA adapter is attached.

    The adapter's parameters sit beside the weight, so state-dict names are the contract's
    ("h.0.attn.qkv.lora_A")."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(out_features, in_features))
        self.bias = torch.nn.Parameter(torch.zeros(out_features))
        self.lora_A: torch.nn.Parameter | None = None
        self.lora_B: torch.nn.Parameter | None = None
        self.lora_scale = 0.0

    def attach_lora(self, a: torch.Tensor, b: torch.Tensor, alpha: float) -> None:
        self.lora_A = torch.nn.Parameter(a.detach().clone().float())
        self.lora_B = torch.nn.Parameter(b.detach().clone().float())
        self.lora_scale = alpha / a.shape[0]

    def detach_lora(self) -> None:
        self.lora_A = None
        self.lora_B = None
        self.lora_scale = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight, self.bias)
        if self.lora_A is not None:
            y = y + self.lora_scale * F.linear(F.linear(x, self.lora_A), self.lora_B)
        return y


class Attention(torch.nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = Linear(cfg.d_model, cfg.d_model)

    def forward(self, x, past):
        bsz, t, d = x.shape
        dh = d // self.n_head
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(bsz, t, self.n_head, dh).transpose(1, 2) for z in (q, k, v))
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        n_past = k.shape[2] - t
        att = (q @ k.transpose(-2, -1)) / math.sqrt(dh)
        # Query i (absolute position n_past + i) sees keys 0..n_past + i.
        mask = torch.ones(t, k.shape[2], dtype=torch.bool).tril(diagonal=n_past)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(bsz, t, d)
        return self.proj(y), (k, v)


class MLP(torch.nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.fc = Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(torch.nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(cfg.d_model, eps=LN_EPS)
        self.attn = Attention(cfg)
        self.ln2 = torch.nn.LayerNorm(cfg.d_model, eps=LN_EPS)
        self.mlp = MLP(cfg)

    def forward(self, x, past):
        a, kv = self.attn(self.ln1(x), past)
        x = x + a
        return x + self.mlp(self.ln2(x)), kv


class GPT(torch.nn.Module):
    """The shoal-gpt decoder; state_dict() names are exactly the file's tensor names."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.wte = torch.nn.Parameter(torch.zeros(cfg.vocab_size, cfg.d_model))
        self.wpe = torch.nn.Parameter(torch.zeros(cfg.n_ctx, cfg.d_model))
        self.h = torch.nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = torch.nn.LayerNorm(cfg.d_model, eps=LN_EPS)

    def forward(self, tokens: torch.Tensor, cache: list | None = None):
        """tokens [B, T] (int64) -> (logits [B, T, V], new cache).

        cache is None (no cache) or the list returned by a previous call (one (k, v) pair per
        layer, each [B, n_head, T_past, d_head]); the new tokens continue at position T_past."""
        n_past = 0 if cache is None else cache[0][0].shape[2]
        t = tokens.shape[1]
        if n_past + t > self.cfg.n_ctx:
            raise ValueError(f"sequence of {n_past + t} tokens exceeds n_ctx {self.cfg.n_ctx}")
        x = self.wte[tokens] + self.wpe[n_past:n_past + t]
        new_cache = []
        for i, block in enumerate(self.h):
            x, kv = block(x, None if cache is None else cache[i])
            new_cache.append(kv)
        return self.ln_f(x) @ self.wte.t(), new_cache

    def linear(self, name: str) -> Linear:
        """The Linear called `name` ("h.0.attn.qkv")."""
        mod = self.get_submodule(name)
        if not isinstance(mod, Linear):
            raise FormatError(f"{name} is not an adaptable linear")
        return mod

    def lora_linears(self, targets=LORA_TARGETS) -> list[str]:
        return [f"h.{i}.{t}" for i in range(self.cfg.n_layer) for t in targets]


def init_weights(model: GPT, seed: int, std: float = 0.02, random_affine: bool = False) -> GPT:
    """GPT-2 style init (normal(0, std), zero biases, unit LayerNorms), from `seed` only.

    random_affine also draws LayerNorm gains/biases and linear biases, so that a random test
    model exercises every tensor of the format (a zero bias hides a reader that ignores it)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "ln_f.weight":
                p.fill_(1.0)
                if random_affine:
                    p.add_(0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.zero_()
                if random_affine:
                    p.add_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(std * torch.randn(p.shape, generator=g))
    return model


# ---------------------------------------------------------------- save / load


def _metadata_int(meta: dict, key: str, path: str) -> int:
    if key not in meta:
        raise FormatError(f"{path}: metadata lacks {key!r}")
    try:
        return int(meta[key])
    except ValueError:
        raise FormatError(f"{path}: metadata {key!r} is not an integer: {meta[key]!r}") from None


def _save_file(tensors: dict[str, torch.Tensor], path: str, metadata: dict[str, str]) -> None:
    """safetensors' save_file, with the header's JSON keys sorted: the library writes its
    metadata map in a hash order that changes from one process to the next, so the same tensors
    made different bytes (the pretraining's determinism test found it). The tensors' bytes and
    offsets are untouched; the header stays padded to 8 bytes with spaces, as the format says."""
    save_file(tensors, path, metadata=metadata)
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    if "__metadata__" in header:
        header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blob[8 + n:])


def save(model: GPT, path: str) -> None:
    tensors = {k: v.detach().float().contiguous() for k, v in model.state_dict().items()
               if ".lora_" not in k}
    _save_file(tensors, path, metadata=model.cfg.metadata())


def load(path: str) -> GPT:
    """Reads a shoal-gpt file, checking the metadata and every tensor's name, dtype and shape."""
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
        if meta.get("format") != FORMAT:
            raise FormatError(f"{path}: metadata format is {meta.get('format')!r}, not {FORMAT!r}")
        cfg = Config(d_model=_metadata_int(meta, "d_model", path),
                     n_layer=_metadata_int(meta, "n_layer", path),
                     n_head=_metadata_int(meta, "n_head", path),
                     n_ctx=_metadata_int(meta, "n_ctx", path),
                     vocab_size=_metadata_int(meta, "vocab_size", path),
                     eos=_metadata_int(meta, "eos", path))
        if cfg.vocab_size != VOCAB_SIZE or cfg.eos != EOS:
            raise FormatError(f"{path}: vocab_size/eos {cfg.vocab_size}/{cfg.eos}, "
                              f"expected {VOCAB_SIZE}/{EOS}")
        want = cfg.shapes()
        have = set(f.keys())
        for name in have - set(want):
            raise FormatError(f"{path}: unexpected tensor {name}")
        model = GPT(cfg)
        sd = {}
        for name, shape in want.items():
            if name not in have:
                raise FormatError(f"{path}: missing tensor {name}")
            t = f.get_tensor(name)
            if t.dtype != torch.float32:
                raise FormatError(f"{path}: tensor {name} is {t.dtype}, expected F32")
            if tuple(t.shape) != shape:
                raise FormatError(f"{path}: tensor {name} has shape {list(t.shape)}, "
                                  f"expected {list(shape)}")
            sd[name] = t
    model.load_state_dict(sd)
    return model.eval()


# ---------------------------------------------------------------- LoRA


def lora_init(model: GPT, rank: int, seed: int, targets=LORA_TARGETS) -> dict[str, torch.Tensor]:
    """The LoRA initial adapter: A ~ kaiming-uniform(a=sqrt(5)) from `seed` (peft's default),
    B = 0, so the adapted model starts equal to the base. Tensors in contract order."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name in model.lora_linears(targets):
        lin = model.linear(name)
        fan_in = lin.weight.shape[1]
        bound = 1.0 / math.sqrt(fan_in)  # kaiming_uniform_ with a=sqrt(5)
        out[name + ".lora_A"] = (torch.rand(rank, fan_in, generator=g) * 2 - 1) * bound
        out[name + ".lora_B"] = torch.zeros(lin.weight.shape[0], rank)
    return out


def check_adapter(model: GPT, tensors: dict[str, torch.Tensor], where: str = "adapter") -> int:
    """Checks an adapter's names and shapes against `model`; returns its rank."""
    rank = None
    pairs = {}
    for name, t in tensors.items():
        base, _, kind = name.rpartition(".")
        if kind not in ("lora_A", "lora_B") or base.split(".", 2)[-1] not in LORA_TARGETS:
            raise FormatError(f"{where}: unexpected tensor {name}")
        try:
            lin = model.linear(base)
        except (AttributeError, FormatError):
            raise FormatError(f"{where}: tensor {name} names no linear of the model") from None
        out_f, in_f = lin.weight.shape
        if t.dim() != 2:
            raise FormatError(f"{where}: tensor {name} has shape {list(t.shape)}, expected 2-D")
        r = t.shape[0] if kind == "lora_A" else t.shape[1]
        inner = t.shape[1] if kind == "lora_A" else t.shape[0]
        want_inner = in_f if kind == "lora_A" else out_f
        if inner != want_inner or (rank is not None and r != rank) or r < 1:
            want = [rank or r, in_f] if kind == "lora_A" else [out_f, rank or r]
            raise FormatError(f"{where}: tensor {name} has shape {list(t.shape)}, expected {want}")
        rank = r
        pairs.setdefault(base, set()).add(kind)
    for base, kinds in pairs.items():
        if kinds != {"lora_A", "lora_B"}:
            missing = ({"lora_A", "lora_B"} - kinds).pop()
            raise FormatError(f"{where}: missing tensor {base}.{missing}")
    if rank is None:
        raise FormatError(f"{where}: no LoRA tensors")
    return rank


def apply_lora(model: GPT, tensors: dict[str, torch.Tensor], alpha: float) -> int:
    """Attaches an adapter (unmerged: W + (alpha/r) B A evaluated per call); returns the rank."""
    rank = check_adapter(model, tensors)
    for name in model.lora_linears():
        model.linear(name).detach_lora()
    for name, a in tensors.items():
        if name.endswith(".lora_A"):
            base = name[: -len(".lora_A")]
            model.linear(base).attach_lora(a, tensors[base + ".lora_B"], alpha)
    return rank


def merge_lora(model: GPT) -> GPT:
    """Folds every attached adapter into its weight (W += (alpha/r) B A) and detaches it."""
    with torch.no_grad():
        for name in model.lora_linears():
            lin = model.linear(name)
            if lin.lora_A is not None:
                lin.weight += lin.lora_scale * (lin.lora_B @ lin.lora_A)
                lin.detach_lora()
    return model


def adapter_tensors(model: GPT) -> dict[str, torch.Tensor]:
    """The attached adapter's tensors, contract names, detached copies."""
    return {k: v.detach().clone() for k, v in model.state_dict().items() if ".lora_" in k}


def save_adapter(tensors: dict[str, torch.Tensor], path: str, alpha: float) -> None:
    rank = next(t.shape[0] for k, t in tensors.items() if k.endswith(".lora_A"))
    _save_file({k: v.detach().float().contiguous() for k, v in tensors.items()}, path,
               metadata={"format": LORA_FORMAT, "rank": str(rank), "alpha": repr(float(alpha))})


def load_adapter(path: str, alpha: float | None = None) -> tuple[dict[str, torch.Tensor], float]:
    """Reads an adapter file -> (tensors, alpha). A file without metadata (an FL commit) needs
    `alpha` from the caller (the FL job's spec.model.lora.alpha); metadata wins otherwise."""
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    if meta.get("format") not in (None, LORA_FORMAT):
        raise FormatError(f"{path}: metadata format is {meta['format']!r}, not {LORA_FORMAT!r}")
    if "alpha" in meta:
        alpha = float(meta["alpha"])
    if alpha is None:
        raise FormatError(f"{path}: no alpha in the metadata and none given")
    for k, t in tensors.items():
        if t.dtype != torch.float32:
            raise FormatError(f"{path}: tensor {k} is {t.dtype}, expected F32")
    return tensors, alpha


# ---------------------------------------------------------------- generation


def sample_next(logits: torch.Tensor, temperature: float, top_p: float,
                gen: torch.Generator | None) -> int:
    """Greedy (temperature 0: argmax, lowest id on a tie) or temperature + nucleus sampling:
    keep the fewest most-probable tokens whose probability sums to >= top_p."""
    if temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    if top_p < 1.0:
        p_sorted, idx = torch.sort(probs, descending=True, stable=True)
        keep = (p_sorted.cumsum(0) - p_sorted) < top_p
        probs = torch.zeros_like(probs).scatter_(0, idx[keep], p_sorted[keep])
    return int(torch.multinomial(probs, 1, generator=gen))


@torch.no_grad()
def generate(model: GPT, prompt: list[int], max_new_tokens: int, temperature: float = 0.0,
             top_p: float = 1.0, seed: int = 0, use_cache: bool = True) -> list[int]:
    """Continues `prompt` (token ids) by up to max_new_tokens; stops after emitting EOS or when
    the context (n_ctx) is full. Returns the new tokens only (EOS included if emitted)."""
    if not prompt:
        prompt = [EOS]  # an empty prompt starts a document
    gen = torch.Generator().manual_seed(seed)
    out: list[int] = []
    seq = list(prompt)
    cache = None
    step_tokens = seq
    while len(out) < max_new_tokens and len(seq) < model.cfg.n_ctx:
        if use_cache:
            logits, cache = model(torch.tensor([step_tokens]), cache)
        else:
            logits, _ = model(torch.tensor([seq]))
        tok = sample_next(logits[0, -1], temperature, top_p, gen)
        out.append(tok)
        seq.append(tok)
        step_tokens = [tok]
        if tok == EOS:
            break
    return out


def encode(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def decode(tokens: list[int]) -> str:
    return bytes(t for t in tokens if t < 256).decode("utf-8", errors="replace")


# ---------------------------------------------------------------- CLI


def _random_adapter(model: GPT, rank: int, seed: int) -> dict[str, torch.Tensor]:
    """A test adapter with B != 0 (the LoRA init has B = 0, which would change nothing)."""
    tensors = lora_init(model, rank, seed)
    g = torch.Generator().manual_seed(seed + 1)
    for k, t in tensors.items():
        if k.endswith(".lora_B"):
            t.copy_(0.05 * torch.randn(t.shape, generator=g))
    return tensors


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.lm.model", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--random", action="store_true", help="write a random model to --out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-ctx", type=int, default=64)
    ap.add_argument("--std", type=float, default=0.2,
                    help="--random's weight std (larger than training's 0.02: peaked logits, "
                         "so greedy decoding has no near-ties)")
    ap.add_argument("--out")
    ap.add_argument("--adapter-out", help="with --random: also write a random adapter")
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--alpha", type=float, default=8.0)
    ap.add_argument("--model", help="generate with this model file")
    ap.add_argument("--adapter", help="apply this adapter file")
    ap.add_argument("--prompt", default="")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--no-cache", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)

    if args.random:
        if not args.out:
            ap.error("--random needs --out")
        cfg = Config(args.d_model, args.n_layer, args.n_head, args.n_ctx)
        model = init_weights(GPT(cfg), args.seed, std=args.std, random_affine=True)
        save(model, args.out)
        if args.adapter_out:
            save_adapter(_random_adapter(model, args.rank, args.seed), args.adapter_out,
                         args.alpha)
        return 0
    if not args.model:
        ap.error("give --random --out F, or --model F to generate")
    model = load(args.model)
    if args.adapter:
        tensors, alpha = load_adapter(args.adapter, args.alpha)
        apply_lora(model, tensors, alpha)
    toks = generate(model, encode(args.prompt), args.max_new_tokens, args.temperature,
                    args.top_p, args.seed, use_cache=not args.no_cache)
    json.dump({"tokens": toks, "text": decode(toks)}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
