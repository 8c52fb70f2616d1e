"""Which BLAS a Python anchor runs on, read from the running process, for the benchmarks' tables.

blas_in_use() -> one line, e.g.
  "OpenBLAS 0.3.21 pthreads, Haswell kernels, 1 thread(s); libblas.so.3 = .../openblas-pthread/libblas.so.3"
  "reference BLAS; libblas.so.3 = /usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0"
numpy and Debian's torch call BLAS through libblas.so.3 (Debian's alternatives pick its file), so
the file mapped under that name (/proc/self/maps) says which BLAS runs their matrix products;
threadpoolctl, when installed, adds OpenBLAS's version, kernels and threads. Call it after numpy
or torch is imported (they map their BLAS at import)."""
import os


def _mapped():
    try:
        with open("/proc/self/maps") as f:
            return sorted({line.split()[-1] for line in f if "/" in line and ".so" in line})
    except OSError:
        return []


def _openblas_detail():
    try:
        import threadpoolctl
        for p in threadpoolctl.threadpool_info():
            if p.get("internal_api") == "openblas":
                return (f"OpenBLAS {p.get('version')} {p.get('threading_layer')}, "
                        f"{p.get('architecture')} kernels, {p.get('num_threads')} thread(s)")
    except Exception:  # threadpoolctl missing or failing: the file name decides
        pass
    return "OpenBLAS"


def blas_in_use():
    libs = _mapped()
    blas = [lib for lib in libs if os.path.basename(lib).startswith("libblas.so")]
    if blas:
        lib = blas[0]
        real = os.path.realpath(lib)
        if "openblas" in real:
            return f"{_openblas_detail()}; libblas.so.3 = {lib}"
        if "/blas/" in real:
            return f"reference BLAS; libblas.so.3 = {real}"
        return f"unknown BLAS; libblas.so.3 = {real}"
    for lib in libs:  # linked to a BLAS directly, not through libblas.so.3
        base = os.path.basename(lib)
        if base.startswith("libopenblas"):
            return f"{_openblas_detail()}; {lib}"
        if base.startswith(("libmkl_rt", "libblis")):
            return lib
    return "no BLAS library mapped"


def is_openblas(text):
    return text.startswith("OpenBLAS")
