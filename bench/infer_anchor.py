#!/usr/bin/env python3
"""Anchors for bench-infer: the same model in stock tools on the same device, same run.

  torch eager           model.eval() under inference_mode (channels-last for ResNet)
  torch CUDA graph      the whole batch-1 forward captured once and replayed (cuda only)
  torch.compile         mode="max-autotune", large batch (cuda only, behind --compile: it
                        compiles for minutes the first time; inductor caches the result)
  onnxruntime           the torch model exported to ONNX, CUDA or CPU provider (fp32 only)
  numpy                 the MLP's forward as matrix products into preallocated arrays (CPU, fp32)

Every note ends with the BLAS the process runs on (anchor_blas.py): torch and numpy call it for
their CPU matrix products. bench-infer starts this script with libblas.so.3 pointed at OpenBLAS.

Prints one line per anchor for bench-infer to parse:
  ANCHOR <name> bs1_p50_ms=<v> bs1_p99_ms=<v> throughput=<v> note=<text>     (nan = not measured)
  SKIP <name> reason=<text>
"""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from anchor_blas import blas_in_use  # noqa: E402


def skip(name, reason):
    print(f"SKIP {name} reason={reason}", flush=True)


def report(name, p50=float("nan"), p99=float("nan"), tput=float("nan"), note="", blas=True):
    if blas:
        note = f"{note}; BLAS: {blas_in_use()}"
    print(f"ANCHOR {name} bs1_p50_ms={p50:.4f} bs1_p99_ms={p99:.4f} throughput={tput:.2f} "
          f"note={note}", flush=True)


def numpy_mlp(model, args):
    """The MLP's forward in numpy with torch's weights: two BLAS products into preallocated
    arrays, bias and ReLU in place. The weights stay [out, in] and go to BLAS as transposed views
    (faster here than a transposed copy: OpenBLAS 0.3.21, 4096 x 784 x 128, 5.4 -> 3.2 ms)."""
    import numpy as np
    w1 = np.ascontiguousarray(model.fc1.weight.detach().float().cpu().numpy()).T
    b1 = model.fc1.bias.detach().float().cpu().numpy()
    w2 = np.ascontiguousarray(model.fc2.weight.detach().float().cpu().numpy()).T
    b2 = model.fc2.bias.detach().float().cpu().numpy()

    def forward(x, h, o):
        np.matmul(x, w1, out=h)
        h += b1
        np.maximum(h, 0, out=h)
        np.matmul(h, w2, out=o)
        o += b2

    def bufs(batch):
        return (np.random.default_rng(0).random((batch, 784), dtype=np.float32),
                np.empty((batch, w1.shape[1]), np.float32), np.empty((batch, 10), np.float32))

    one, big = bufs(1), bufs(args.batch)
    p50, p99 = time_calls(lambda: forward(*one), args.iters, lambda: None)
    t, _ = time_calls(lambda: forward(*big), args.large_iters, lambda: None)
    report("numpy", p50 * 1e3, p99 * 1e3, args.batch / t, f"numpy {np.__version__}")


def build_model(torch, name, image, classes):
    from torch_models import BasicBlock, Mlp
    nn, F = torch.nn, torch.nn.functional
    if name == "mlp":
        return Mlp(), (784,)
    try:
        import torchvision
        return torchvision.models.resnet18(num_classes=classes), (3, image, image)
    except ImportError:
        pass

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                      nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            layers, cin = [], 64
            for i, w in enumerate([64, 128, 256, 512]):
                layers += [BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)]
                cin = w
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(512, classes)

        def forward(self, x):
            x = self.layers(self.stem(x))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
    return ResNet18(), (3, image, image)


def time_calls(fn, iters, sync):
    fn()
    fn()
    sync()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], times[min(len(times) - 1, int(len(times) * 0.99))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "resnet18"], default="mlp")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32")
    ap.add_argument("--batch", type=int, default=256, help="large batch")
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--iters", type=int, default=100, help="batch-1 runs")
    ap.add_argument("--large-iters", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--compile", action="store_true", help="also torch.compile max-autotune")
    args = ap.parse_args()

    try:
        import torch
    except ImportError:
        skip("torch", "torch is not installed for " + sys.executable)
        return
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    if args.device == "cuda" and not torch.cuda.is_available():
        skip("torch", "torch sees no CUDA device")
        return
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[args.precision]
    if args.device == "cpu" and dtype == torch.float16:
        skip("torch", "fp16 on the CPU is not a torch fast path")
        return
    torch.manual_seed(0)
    model, sample = build_model(torch, args.model, args.image, 1000)
    model = model.eval().to(dev, dtype)
    fmt = torch.channels_last if len(sample) == 3 else torch.contiguous_format
    model = model.to(memory_format=fmt)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)

    def inputs(batch):
        return torch.rand((batch,) + sample, device=dev, dtype=dtype).contiguous(memory_format=fmt)

    x1, xn = inputs(1), inputs(args.batch)
    ver = f"torch {torch.__version__}"
    with torch.inference_mode():
        p50, p99 = time_calls(lambda: model(x1), args.iters, sync)
        big, _ = time_calls(lambda: model(xn), args.large_iters, sync)
        report("torch_eager", p50 * 1e3, p99 * 1e3, args.batch / big, ver,
               blas=args.device == "cpu")
    if args.model == "mlp" and args.device == "cpu" and dtype == torch.float32:
        try:
            numpy_mlp(model, args)
        except ImportError:
            skip("numpy", "numpy is not installed for " + sys.executable)
    else:
        skip("numpy", "MLP on the CPU in fp32 only")

    if args.device == "cuda":
        static_x = x1.clone()
        with torch.inference_mode():
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    model(static_x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                model(static_x)
            p50, p99 = time_calls(g.replay, args.iters, sync)
        report("torch_cuda_graph", p50 * 1e3, p99 * 1e3, note=ver, blas=False)
        if args.compile:
            t0 = time.perf_counter()
            cm = torch.compile(model, mode="max-autotune")
            with torch.inference_mode():
                cm(xn)
                sync()
                took = time.perf_counter() - t0
                big, _ = time_calls(lambda: cm(xn), args.large_iters, sync)
            report("torch_compile_max_autotune", tput=args.batch / big,
                   note=f"{ver},compiled_in_{took:.0f}s(inductor_cache)", blas=False)
        else:
            skip("torch_compile_max_autotune", "not run (pass --compile; minutes to compile)")
    else:
        skip("torch_cuda_graph", "cuda only")

    try:
        import onnxruntime as ort
    except ImportError:
        skip("onnxruntime", "onnxruntime is not installed")
        return
    if dtype != torch.float32:
        skip("onnxruntime", "fp32 only")
        return
    provider = "CUDAExecutionProvider" if args.device == "cuda" else "CPUExecutionProvider"
    if provider not in ort.get_available_providers():
        skip("onnxruntime", provider + " is not available")
        return
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        cpu_model = model.float().to("cpu", memory_format=torch.contiguous_format)
        torch.onnx.export(cpu_model, torch.rand((1,) + sample), path, opset_version=13,
                          input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
        opts = ort.SessionOptions()
        if args.threads > 0:
            opts.intra_op_num_threads = args.threads
        sess = ort.InferenceSession(path, opts, providers=[provider])
        a1 = torch.rand((1,) + sample).numpy()
        an = torch.rand((args.batch,) + sample).numpy()
        p50, p99 = time_calls(lambda: sess.run(None, {"input": a1}), args.iters, lambda: None)
        big, _ = time_calls(lambda: sess.run(None, {"input": an}), args.large_iters, lambda: None)
        report("onnxruntime", p50 * 1e3, p99 * 1e3, args.batch / big,
               f"onnxruntime {ort.__version__} {provider} (its own kernels)", blas=False)


if __name__ == "__main__":
    main()
