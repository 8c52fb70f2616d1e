// The environment that puts a Python anchor (numpy, torch) on OpenBLAS as a user's machine
// would run it: libblas.so.3 resolved from Debian's openblas-pthread directory (whatever the
// alternatives point at), OpenBLAS's own CPU detection (an OPENBLAS_CORETYPE or OPENBLAS_L2_SIZE
// set outside is removed: OPENBLAS_CORETYPE=Haswell, say, picks AVX2 kernels on an AVX-512 CPU
// and makes sgemm ~1.7x slower), and the thread count of the Shoal side it is compared with.
// The anchors print the BLAS they mapped (bench/anchor_blas.py), which checks that this worked.
#pragma once

#include <sys/stat.h>

#include <cstdlib>
#include <string>

namespace shoal::bench {

inline constexpr char kDebianOpenBlasDir[] = "/usr/lib/x86_64-linux-gnu/openblas-pthread";

// A prefix for a shell command line: "env -u ... VAR=value ... ".
inline std::string OpenBlasAnchorEnv(int threads) {
  const std::string t = std::to_string(threads);
  std::string env = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=" + t +
                    " OMP_NUM_THREADS=" + t + " MKL_NUM_THREADS=" + t + " ";
  struct stat st {};
  if (stat(kDebianOpenBlasDir, &st) == 0) {
    const char* old = std::getenv("LD_LIBRARY_PATH");
    env += std::string("LD_LIBRARY_PATH=") + kDebianOpenBlasDir +
           (old && *old ? std::string(":") + old : "") + " ";
  }
  return env;
}

}  // namespace shoal::bench
