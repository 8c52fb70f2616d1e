"""Which BLAS a Python anchor runs on, read from the running process, for the benchmarks' tables.

The anchors run under the project venv (PyPI wheels), where:
  - numpy 2 calls the OpenBLAS it bundles (scipy-openblas, numpy.libs/libscipy_openblas64_*.so),
    not Debian's libblas.so.3. threadpoolctl reads the loaded library: its version, the kernels
    its DYNAMIC_ARCH picked at load time (after any OPENBLAS_CORETYPE in the environment, which
    the benches remove: bench/openblas_env.h) and its thread count.
  - torch 2 calls MKL and oneDNN linked into libtorch_cpu (no BLAS library of its own is mapped);
    torch.__config__ names their versions and torch.backends.cpu the SIMD level its kernels use.

blas_in_use() -> numpy's, e.g.
  "OpenBLAS 0.3.31.188.0 pthreads, Haswell kernels, 1 thread(s) (numpy's bundled scipy-openblas)"
torch_blas() -> torch's, e.g. "MKL 2024.2 + oneDNN 3.13.3, AVX2 kernels, 1 thread(s)"
openblas_path() -> the loaded OpenBLAS's file (bench-fold calls its saxpy from C++)
Call them after numpy or torch is imported (they load their libraries at import)."""
import os
import re
import sys


def _openblas_pools():
    try:
        import threadpoolctl
        return [p for p in threadpoolctl.threadpool_info() if p.get("internal_api") == "openblas"]
    except Exception:  # threadpoolctl missing (it is in requirements/bench.in) or failing
        return []


def _mapped():
    try:
        with open("/proc/self/maps") as f:
            return sorted({line.split()[-1] for line in f if "/" in line and ".so" in line})
    except OSError:
        return []


def _whose(path):
    base = os.path.basename(path)
    if base.startswith("libscipy_openblas"):
        return "numpy's bundled scipy-openblas"
    if base.startswith("libblas.so") or "/openblas-pthread/" in path:
        return f"Debian's, {path}"
    return path


def openblas_path():
    """The file of the OpenBLAS this process loaded ("" when none is found)."""
    pools = _openblas_pools()
    return pools[0].get("filepath", "") if pools else ""


def blas_in_use():
    """The OpenBLAS numpy runs on (the text starts with "OpenBLAS"), else what is mapped."""
    pools = _openblas_pools()
    if pools:
        p = pools[0]
        return (f"OpenBLAS {p.get('version')} {p.get('threading_layer')}, "
                f"{p.get('architecture')} kernels, {p.get('num_threads')} thread(s) "
                f"({_whose(p.get('filepath', ''))})")
    for lib in _mapped():  # no threadpoolctl: the file name alone
        base = os.path.basename(lib)
        if "openblas" in base or base.startswith("libblas.so"):
            real = os.path.realpath(lib)
            if "openblas" in real:
                return f"OpenBLAS ({_whose(real)})"
            return f"{'reference BLAS' if '/blas/' in real else 'unknown BLAS'}; {real}"
        if base.startswith(("libmkl_rt", "libblis")):
            return lib
    return "no BLAS library mapped"


def torch_blas():
    """The libraries PyPI's torch runs its CPU matrix products on (it links them statically)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return "torch not imported"
    cfg = torch.__config__.show()
    parts = []
    mkl = re.search(r"Math Kernel Library Version ([0-9.]+)", cfg)
    if mkl:
        parts.append(f"MKL {mkl.group(1)}")
    elif "BLAS_INFO=open" in cfg:
        parts.append(f"OpenBLAS ({blas_in_use()})")
    dnn = re.search(r"MKL-DNN v([0-9.]+)", cfg)
    if dnn and torch.backends.mkldnn.is_available():
        parts.append(f"oneDNN {dnn.group(1)}")
    text = " + ".join(parts) or "unknown BLAS"
    return f"{text}, {torch.backends.cpu.get_cpu_capability()} kernels, " \
           f"{torch.get_num_threads()} thread(s)"
