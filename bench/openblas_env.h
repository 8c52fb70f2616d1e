// The environment a Python anchor (numpy, torch; the project venv's PyPI wheels) runs in, as a
// prefix for its shell command line: "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE
// OPENBLAS_NUM_THREADS=t OMP_NUM_THREADS=t MKL_NUM_THREADS=t ".
//   - OpenBLAS's own CPU detection. numpy 2 calls the OpenBLAS it bundles (scipy-openblas), which
//     honours OPENBLAS_CORETYPE like any DYNAMIC_ARCH build: some machines set it (and
//     OPENBLAS_L2_SIZE) because older OpenBLAS builds compute wrong results or crash on their
//     processors, and a current one then runs older kernels (OPENBLAS_CORETYPE=Haswell on an
//     AVX-512 CPU made sgemm ~1.7x slower). Both are removed together; the anchors print the
//     kernels OpenBLAS then picked (bench/anchor_blas.py, through threadpoolctl).
//   - The thread count of the Shoal side it is compared with, for every runtime the anchors use:
//     OpenBLAS's (numpy), OpenMP's and MKL's (torch's MKL and oneDNN, linked into libtorch_cpu).
// No library path is set: neither wheel loads Debian's libblas.so.3.
#pragma once

#include <string>

namespace shoal::bench {

inline std::string OpenBlasAnchorEnv(int threads) {
  const std::string t = std::to_string(threads);
  return "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=" + t +
         " OMP_NUM_THREADS=" + t + " MKL_NUM_THREADS=" + t + " ";
}

}  // namespace shoal::bench
