#!/usr/bin/env python3
"""Anchors for bench-infer: the very graph Shoal runs, in stock engines, same machine, same run.

bench-infer writes the graph its executor compiled (BatchNormalization already folded) with
Shoal's SaveOnnx, plus a check batch and Shoal's output for it, and starts this script. Every
anchor runs that one file:

  onnxruntime        the file itself: CPU execution provider (CUDA provider when the device is
                     cuda and the wheel has it), graph optimizations ORT_ENABLE_ALL, intra-op
                     threads = --threads, inter-op 1, sequential; inputs and outputs bound once
                     (IOBinding over preallocated arrays: the lowest-overhead Python path).
                     fp32 only: its CPU provider has no bf16 kernels on x86, so a bf16 run
                     measures it in fp32 and says so.
  torch_eager        the file's nodes as torch.nn.functional calls (Conv -> F.conv2d, Gemm ->
                     F.linear, ...) on its initializers, under inference_mode, torch threads =
                     --threads; ResNet in channels_last when that is faster (tried at set-up);
                     bf16 as the module and activations in bfloat16 (inputs converted inside).
  torch_compile      that module through torch.compile (the default inductor backend,
                     inductor's freezing on: constant weights folded and prepacked, as its CPU
                     inference guide advises), one compile per batch size.
  torch_cuda_graph   (cuda) the batch-1 forward captured once and replayed.

Each anchor's output on the check batch is compared with Shoal's (max |a - b| / max |b|) before
anything is timed; the note carries that figure and which library each anchor ran (torch's
BLAS, oneDNN and thread count from torch.__config__, onnxruntime's version and provider).

Protocol (stdout, one line each; stdin drives the rounds so bench-infer can interleave them with
its own):
  ENGINE <name> note=<text>                       after set-up, one per anchor
  SKIP <name> reason=<text>
  READY
  then for every "RUN <r>" read on stdin:
  ANCHOR <name> run=<r> p50_ms=<v> p99_ms=<v> tput=<batch>:<per second>[,<batch>:<per second>]
  DONE <r>
  and "QUIT" (or end of input) ends it.
"""
import argparse
import os
import re
import sys
import time

import numpy as np


def out(line):
    print(line, flush=True)


def skip(name, reason):
    out(f"SKIP {name} reason={reason}")


def time_calls(fn, iters, sync):
    """Median and p99 (nearest rank) of `iters` timed calls after one untimed call."""
    fn()
    sync()
    times = []
    for _ in range(max(1, iters)):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], times[min(len(times) - 1, int(len(times) * 0.99))]


def rel_diff(a, ref):
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    ref = np.asarray(ref, dtype=np.float64).reshape(-1)
    scale = max(float(np.max(np.abs(ref))), 1e-30)
    return float(np.max(np.abs(a - ref))) / scale


def torch_summary(torch):
    """torch's version, BLAS, oneDNN and threads, from torch.__config__ (no threadpoolctl)."""
    show = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=([^,\s]+)", show)
    dnnl = re.search(r"(?:Intel\(R\) MKL-DNN|oneDNN) (v[\d.]+)", show)
    cap = re.search(r"CPU capability usage: (\S+)", show)
    par = torch.__config__.parallel_info()
    backend = re.search(r"ATen parallel backend: (.+)", par)
    return (f"torch {torch.__version__}, BLAS {blas.group(1) if blas else '?'}, "
            f"oneDNN {dnnl.group(1) if dnnl else '?'}, CPU capability "
            f"{cap.group(1) if cap else '?'}, {torch.get_num_threads()} threads "
            f"({backend.group(1).strip() if backend else '?'})")


def onnx_module(torch, model_proto, dtype):
    """The ONNX graph's nodes as an nn.Module running torch.nn.functional calls in file order
    (Shoal's writer emits them topologically sorted) on the file's own initializers."""
    import onnx
    from onnx import numpy_helper
    nn, F = torch.nn, torch.nn.functional
    g = model_proto.graph

    def attrs(node):
        return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}

    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}

    class OnnxModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.params = nn.ParameterList()
            self.index = {}  # initializer name -> position in params
            self.steps = []
            for node in g.node:
                a = attrs(node)
                ins = list(node.input)
                if node.op_type == "Gemm":
                    w = inits[ins[1]].astype(np.float32)
                    w = w if a.get("transB", 0) else w.T  # F.linear wants [out, in]
                    if a.get("transA", 0):
                        raise ValueError("Gemm transA=1 is not run by the anchor")
                    w = w * a.get("alpha", 1.0)
                    b = None
                    if len(ins) > 2 and ins[2]:
                        b = (inits[ins[2]].astype(np.float32) * a.get("beta", 1.0)).reshape(-1)
                    ins = [ins[0], self.add(node.name + ".w", w), self.add(node.name + ".b", b)]
                else:
                    ins = [self.add(i, inits[i]) if i in inits else i for i in ins]
                self.steps.append((node.op_type, ins, list(node.output), a))
            self.input_name = g.input[0].name
            self.output_name = g.output[0].name
            self.dtype = dtype
            self.memory_format = torch.contiguous_format

        def add(self, name, value):
            if value is None:
                return None
            if value.dtype == np.int64:  # Reshape targets stay Python constants
                return ("const", tuple(int(v) for v in value.reshape(-1)))
            if name not in self.index:
                self.index[name] = len(self.params)
                self.params.append(nn.Parameter(torch.from_numpy(np.ascontiguousarray(value))
                                                .to(dtype), requires_grad=False))
            return ("param", self.index[name])

        def forward(self, x):
            if x.dim() == 4:
                x = x.to(dtype=self.dtype, memory_format=self.memory_format)
            else:
                x = x.to(self.dtype)
            env = {self.input_name: x}

            def get(i):
                if i is None or i == "":
                    return None
                if isinstance(i, tuple):
                    return self.params[i[1]] if i[0] == "param" else i[1]
                return env[i]

            for op, ins, outs, a in self.steps:
                v = [get(i) for i in ins]
                if op == "Conv":
                    pads = a.get("pads", [0, 0, 0, 0])
                    xin = v[0]
                    if pads[0] != pads[2] or pads[1] != pads[3]:
                        xin = F.pad(xin, (pads[1], pads[3], pads[0], pads[2]))
                        padding = (0, 0)
                    else:
                        padding = (pads[0], pads[1])
                    y = F.conv2d(xin, v[1], v[2] if len(v) > 2 else None,
                                 tuple(a.get("strides", [1, 1])), padding,
                                 tuple(a.get("dilations", [1, 1])), a.get("group", 1))
                elif op == "Gemm":
                    y = F.linear(v[0], v[1], v[2])
                elif op == "MatMul":
                    y = torch.matmul(v[0], v[1])
                elif op == "Identity":
                    y = v[0]
                elif op == "Relu":
                    y = F.relu(v[0])
                elif op == "Add":
                    y = v[0] + v[1]
                elif op in ("MaxPool", "AveragePool"):
                    pads = a.get("pads", [0, 0, 0, 0])
                    k = tuple(a["kernel_shape"])
                    s = tuple(a.get("strides", [1, 1]))
                    if op == "MaxPool":
                        y = F.max_pool2d(v[0], k, s, (pads[0], pads[1]),
                                         ceil_mode=bool(a.get("ceil_mode", 0)))
                    else:
                        y = F.avg_pool2d(v[0], k, s, (pads[0], pads[1]),
                                         ceil_mode=bool(a.get("ceil_mode", 0)),
                                         count_include_pad=bool(a.get("count_include_pad", 0)))
                elif op == "GlobalAveragePool":
                    y = F.adaptive_avg_pool2d(v[0], 1)
                elif op == "Flatten":
                    y = torch.flatten(v[0], a.get("axis", 1))
                elif op == "Reshape":
                    shape = [v[0].shape[i] if d == 0 else d for i, d in enumerate(v[1])]
                    y = v[0].reshape(shape)
                elif op == "Softmax":
                    y = F.softmax(v[0], a.get("axis", -1))
                elif op == "BatchNormalization":
                    y = F.batch_norm(v[0], v[3], v[4], v[1], v[2], False, 0.0,
                                     a.get("epsilon", 1e-5))
                else:
                    raise ValueError(f"operator {op} is not run by the anchor")
                env[outs[0]] = y
            return env[self.output_name].float()

    return OnnxModule().eval()


class Anchor:
    def __init__(self, name, fns, sync, note):
        self.name, self.fns, self.sync, self.note = name, fns, sync, note  # fns: batch -> callable


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onnx", required=True, help="the graph Shoal compiled (SaveOnnx)")
    ap.add_argument("--check-input", required=True, help="float32 check batch")
    ap.add_argument("--check-output", help="Shoal's float32 output for it (none: Shoal could not "
                    "run this precision, nothing to compare with)")
    ap.add_argument("--check-batch", type=int, required=True)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32")
    ap.add_argument("--batches", default="16,64", help="throughput batch sizes")
    ap.add_argument("--iters", type=int, default=100, help="batch-1 runs per round")
    ap.add_argument("--large-iters", type=int, default=5, help="runs per round per batch")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--compile-mode", default=None, help="torch.compile mode (cuda: max-autotune)")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",") if b]
    cuda = args.device == "cuda"

    import onnx
    model_proto = onnx.load(args.onnx)
    inits = {t.name for t in model_proto.graph.initializer}
    graph_in = [i for i in model_proto.graph.input if i.name not in inits][0]
    in_shape = [d.dim_value for d in graph_in.type.tensor_type.shape.dim][1:]
    check_x = np.fromfile(args.check_input, dtype=np.float32).reshape([args.check_batch] + in_shape)
    check_y = None
    if args.check_output:
        check_y = np.fromfile(args.check_output, dtype=np.float32).reshape(args.check_batch, -1)
    out_dims = [d.dim_value for d in model_proto.graph.output[0].type.tensor_type.shape.dim][1:]
    out_len = int(np.prod(out_dims))
    rng = np.random.default_rng(0)
    inputs = {b: rng.random([b] + in_shape, dtype=np.float32) for b in [1] + batches}
    # A narrower Shoal precision differs from an fp32 anchor by its rounding: bf16 keeps 8 bits.
    tol = {"fp32": 1e-4, "fp16": 2e-2, "bf16": 8e-2}[args.precision]
    anchors = []

    def checked(name, y, note):
        if check_y is None:
            return f"output not compared (Shoal did not run); {note}"
        d = rel_diff(y, check_y)
        verdict = "matches" if d <= tol else f"DIFFERS (tolerance {tol:g})"
        return f"output vs Shoal's: max|diff|/max|shoal| {d:.2e} {verdict}; {note}"

    # onnxruntime on the file itself.
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
        skip("onnxruntime", "onnxruntime is not installed for " + sys.executable)
    if ort is not None:
        provider = "CUDAExecutionProvider" if cuda else "CPUExecutionProvider"
        if provider not in ort.get_available_providers():
            skip("onnxruntime", f"{provider} is not in this wheel "
                 f"({', '.join(ort.get_available_providers())})")
        else:
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            so.intra_op_num_threads = args.threads
            so.inter_op_num_threads = 1
            sess = ort.InferenceSession(args.onnx, so, providers=[provider])
            iname, oname = sess.get_inputs()[0].name, sess.get_outputs()[0].name
            dev = "cuda" if cuda else "cpu"

            def bound(x):
                y = np.empty([x.shape[0]] + out_dims, np.float32)
                io = sess.io_binding()
                io.bind_ortvalue_input(iname, ort.OrtValue.ortvalue_from_numpy(x, dev, 0))
                io.bind_ortvalue_output(oname, ort.OrtValue.ortvalue_from_numpy(y, dev, 0))
                return io

            y = sess.run([oname], {iname: check_x})[0]
            out_dims[:] = list(y.shape[1:])  # the file may leave a dimension symbolic
            bindings = {b: bound(x) for b, x in inputs.items()}
            prec = "fp32" if args.precision == "fp32" else "fp32 (no bf16/fp16 CPU kernels)"
            note = (f"onnxruntime {ort.__version__} {provider}, {prec}, ORT_ENABLE_ALL, "
                    f"intra_op {args.threads}, inter_op 1, sequential, IOBinding")
            anchors.append(Anchor("onnxruntime",
                                  {b: (lambda io=io: sess.run_with_iobinding(io))
                                   for b, io in bindings.items()},
                                  lambda: None, checked("onnxruntime", y, note)))

    # torch: eager, compiled, CUDA graph.
    try:
        import torch
    except ImportError:
        torch = None
        skip("torch_eager", "torch is not installed for " + sys.executable)
    if torch is not None:
        torch.set_num_threads(args.threads)
        dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[
            args.precision]
        if cuda and not torch.cuda.is_available():
            skip("torch_eager", "torch sees no CUDA device")
            torch = None
        elif not cuda and dtype == torch.float16:
            skip("torch_eager", "fp16 on the CPU is not a torch fast path")
            torch = None
    if torch is not None:
        dev = torch.device(args.device)
        sync = torch.cuda.synchronize if cuda else (lambda: None)
        try:
            module = onnx_module(torch, model_proto, dtype).to(dev)
            with torch.inference_mode():
                module(torch.from_numpy(check_x).to(dev))  # raises on an operator it lacks
        except Exception as e:  # an operator the rebuild does not know: onnxruntime still runs
            for name in ("torch_eager", "torch_compile"):
                skip(name, f"the graph's nodes as torch calls: {type(e).__name__}: "
                     f"{str(e).splitlines()[0][:160]}")
            torch = None
    if torch is not None:
        tin = {b: torch.from_numpy(x).to(dev) for b, x in inputs.items()}
        summary = (f"torch {torch.__version__} CUDA {torch.version.cuda}" if cuda
                   else torch_summary(torch))
        fmt_note = ""
        with torch.inference_mode():
            if len(in_shape) == 3:  # channels_last where it is faster (bs 16 decides)
                b = batches[0]
                best = None
                for fmt, label in ((torch.contiguous_format, "NCHW"),
                                   (torch.channels_last, "channels_last")):
                    module.memory_format = fmt
                    module.to(memory_format=fmt)
                    t, _ = time_calls(lambda: module(tin[b]), 1, sync)
                    if best is None or t < best[0]:
                        best = (t, fmt, label)
                module.memory_format = best[1]
                module.to(memory_format=best[1])
                fmt_note = f", {best[2]} (faster at bs {b})"
            y = module(torch.from_numpy(check_x).to(dev)).cpu().numpy()
        eager_note = f"{summary}, {args.precision}, inference_mode{fmt_note}"

        def infer(fn, x):
            def call():
                with torch.inference_mode():
                    return fn(x)
            return call

        anchors.append(Anchor("torch_eager", {b: infer(module, x) for b, x in tin.items()}, sync,
                              checked("torch_eager", y, eager_note)))

        if cuda:
            static_x = tin[1].clone()
            with torch.inference_mode():
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        module(static_x)
                torch.cuda.current_stream().wait_stream(s)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    module(static_x)
            anchors.append(Anchor("torch_cuda_graph", {1: graph.replay}, sync,
                                  f"{summary}, batch 1 only"))

        if args.no_compile:
            skip("torch_compile", "--no-compile")
        else:
            import torch._inductor.config as inductor_config
            inductor_config.freezing = True
            mode = args.compile_mode
            t0 = time.perf_counter()
            try:
                compiled = torch.compile(module, mode=mode, dynamic=False)
                with torch.inference_mode():
                    y = compiled(torch.from_numpy(check_x).to(dev)).cpu().numpy()
                    for x in tin.values():  # one graph per batch size, compiled now
                        compiled(x)
                        sync()
                took = time.perf_counter() - t0
                note = (f"{summary}, {args.precision}, inductor (mode {mode or 'default'}, "
                        f"freezing), compiled {len(tin) + 1} shapes in {took:.0f} s{fmt_note}")
                anchors.append(Anchor("torch_compile",
                                      {b: infer(compiled, x) for b, x in tin.items()}, sync,
                                      checked("torch_compile", y, note)))
            except Exception as e:  # a compiler failure is reported, the others still run
                skip("torch_compile", f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")

    for a in anchors:
        out(f"ENGINE {a.name} note={a.note}")
    out("READY")

    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "QUIT":
            break
        if words[0] != "RUN":
            continue
        r = words[1]
        for a in anchors:
            p50 = p99 = float("nan")
            if 1 in a.fns:
                p50, p99 = time_calls(a.fns[1], args.iters, a.sync)
            tputs = []
            for b in batches:
                if b in a.fns:
                    t, _ = time_calls(a.fns[b], args.large_iters, a.sync)
                    tputs.append(f"{b}:{b / t:.3f}")
            out(f"ANCHOR {a.name} run={r} p50_ms={p50 * 1e3:.5f} p99_ms={p99 * 1e3:.5f} "
                f"tput={','.join(tputs) or 'none'}")
        out(f"DONE {r}")


if __name__ == "__main__":
    main()
