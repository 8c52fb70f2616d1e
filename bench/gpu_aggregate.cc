// bench-gpu-aggregate: the FL fold on a CUDA device. K ResNet-18-sized updates (11.69 M params)
// in f32 and bf16 are folded into a float32 accumulator (a) already in device memory (batched
// kernel, kGpuFoldMaxBatch updates per launch), (b) from pinned host memory registered the way
// the leaf registers the job's pool (GpuFolder: copies overlapped with the kernel, the sum copied
// back once), (c) the leaf's per-update path (acc in host memory too). Figures: update bytes read
// per second (best of --reps). Anchors in the same run: this process's device-to-device copy and
// pinned host-to-device copy (always), and bench/gpu_aggregate_anchor.py (torch add_ loop, one
// GEMV w @ stacked, a fused Triton kernel, torch's copies; "unavailable" where a module is
// missing). Ratio: device-resident f32 / Triton f32 (or / the D2D copy when Triton is missing).
//
//   bench-gpu-aggregate [--params N] [--updates K] [--reps R] [--anchor script | --no-anchor]
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench_args.h"
#include "project_python.h"
#include "shoal/fl/gpu/gpu_fold.h"
#include "shoal/fl/kernels/fold.h"

namespace {

using shoal::Status;
using shoal::aggregator::DType;
using shoal::aggregator::DTypeName;
using shoal::aggregator::DTypeSize;
using shoal::aggregator::GpuFolder;

struct Row {
  std::string what, dtype;
  double gbps = 0, ms = 0;
  std::string note;
};

[[noreturn]] void Fail(const std::string& what) {
  std::printf("bench-gpu-aggregate: FAILED: %s\n", what.c_str());
  std::printf("RESULT gpu_aggregate failed\n");
  std::exit(1);
}
void Check(const Status& st, const char* what) {
  if (!st.ok()) Fail(std::string(what) + ": " + st.ToString());
}
void CheckCuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Fail(std::string(what) + ": " + cudaGetErrorString(e));
}

// Anchor name -> dtype -> GB/s (or the reason it is unavailable).
struct Anchors {
  std::map<std::string, std::map<std::string, double>> gbps;
  std::map<std::string, std::map<std::string, double>> ms;  // for the K updates
  std::map<std::string, std::string> unavailable;
  std::string peer = "versions not reported";  // "torch 2.15.0+cu132, triton 3.9.0"
};

Anchors RunAnchorScript(const std::string& script, size_t n, size_t k, int reps) {
  Anchors a;
  const std::string cmd = shoal::bench::ProjectPython() + " " + script + " --params " +
                          std::to_string(n) + " --updates " + std::to_string(k) + " --reps " +
                          std::to_string(reps);
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    a.unavailable["script"] = "cannot run " + cmd;
    return a;
  }
  char line[1024];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    char name[64], dtype[16], peer[512];
    double g = 0, ms = 0;
    if (std::sscanf(line, "PEER %511[^\n]", peer) == 1) {
      a.peer = peer;
    } else if (std::sscanf(line, "ANCHOR %63s %15s gbps=%lf ms=%lf", name, dtype, &g, &ms) >= 3) {
      a.gbps[name][dtype] = g;
      a.ms[name][dtype] = ms;
    } else if (std::sscanf(line, "ANCHOR %63s %15s unavailable", name, dtype) == 2) {
      std::string why = line;
      const size_t at = why.find("unavailable");
      why = why.substr(at + 12);
      while (!why.empty() && (why.back() == '\n' || why.back() == '\r')) why.pop_back();
      a.unavailable[name] = why;
    }
  }
  const int rc = pclose(p);
  if (rc != 0 && a.gbps.empty())
    a.unavailable["script"] = cmd + " exited with " + std::to_string(rc);
  return a;
}

// Best-of-reps milliseconds of fn() between two events on `stream`, fn run once to warm up.
template <typename F>
double BestMs(int reps, cudaStream_t stream, F&& fn) {
  cudaEvent_t a, b;
  CheckCuda(cudaEventCreate(&a), "cudaEventCreate");
  CheckCuda(cudaEventCreate(&b), "cudaEventCreate");
  fn();
  CheckCuda(cudaDeviceSynchronize(), "warm-up");
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    CheckCuda(cudaEventRecord(a, stream), "cudaEventRecord");
    fn();
    CheckCuda(cudaEventRecord(b, stream), "cudaEventRecord");
    CheckCuda(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    CheckCuda(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    best = std::min(best, static_cast<double>(ms));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

template <typename F>
double BestWallMs(int reps, F&& fn) {
  fn();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(
        best,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = 11'689'512, k = 64;
  int reps = 5;
  std::string anchor = SHOAL_GPU_AGGREGATE_ANCHOR_PY;
  bool run_anchor = true;
  shoal::bench::Args args(
      "bench-gpu-aggregate [--params N] [--updates K] [--reps R] [--anchor script | "
      "--no-anchor]");
  args.FoldSizes(&n, &k, &reps).Option("--anchor", &anchor);
  args.Switch("--no-anchor", &run_anchor, false);
  if (!args.Parse(argc, argv)) return 2;
  reps = std::max(1, reps);
  if (n == 0 || k == 0) Fail("--params and --updates must be > 0");

  std::string why;
  if (!shoal::aggregator::GpuFoldAvailable(&why)) {
    // Nothing was measured: say so, and why, rather than print figures.
    std::printf("bench-gpu-aggregate: %s\n", why.c_str());
    std::printf("bench-gpu-aggregate: nothing measured on this machine\n");
    std::printf("RESULT gpu_aggregate skipped\n");
    // scripts/gpu-check sets SHOAL_REQUIRE_GPU=1: there a missing device is a failure.
    const char* require = std::getenv("SHOAL_REQUIRE_GPU");
    return require != nullptr && std::string(require) == "1" ? 1 : 0;
  }
  cudaDeviceProp prop{};
  CheckCuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::fprintf(stderr, "bench-gpu-aggregate: %s, params=%zu updates=%zu reps=%d\n", prop.name, n, k,
               reps);

  // The script first, while this process holds no device memory.
  Anchors anchors;
  if (run_anchor) {
    std::fprintf(stderr, "bench-gpu-aggregate: anchors: %s\n", anchor.c_str());
    anchors = RunAnchorScript(anchor, n, k, reps);
  } else {
    anchors.unavailable["script"] = "--no-anchor";
  }

  auto folder_or = GpuFolder::Create();
  Check(folder_or.status(), "GpuFolder::Create");
  GpuFolder& folder = **folder_or;
  auto stream = static_cast<cudaStream_t>(folder.compute_stream());

  std::vector<Row> rows;
  std::map<std::string, double> device_gbps, d2d_gbps, h2d_gbps;
  std::vector<float> scratch(n), host_acc(n);
  for (DType d : {DType::kF32, DType::kBF16}) {
    const std::string dn(DTypeName(d));
    const size_t es = DTypeSize(d), bytes = n * es, total = bytes * k;
    // Host updates in one shared mapping registered like the job's pool (MAP_SHARED, as
    // /dev/shm is), different values per update.
    // The leaf's partial sum sits in the same mapping, after the updates.
    const size_t mapped = total + n * sizeof(float);
    void* map = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) Fail("mmap of the host updates");
    auto* host = static_cast<std::byte*>(map);
    auto* pool_acc = reinterpret_cast<float*>(host + total);
    uint32_t s = 12345;
    for (size_t u = 0; u < k; ++u) {
      for (size_t i = 0; i < n; ++i) {
        s = s * 1664525u + 1013904223u;
        scratch[i] = static_cast<float>(static_cast<int32_t>(s)) * 0x1p-31f;
      }
      shoal::aggregator::ConvertFromF32(host + u * bytes, scratch.data(), d, n);
    }
    std::vector<float> ws(k);
    for (size_t u = 0; u < k; ++u) ws[u] = 1.0f / static_cast<float>(k) * (1.0f + 0.01f * u);

    // (a) device-resident updates.
    void* dev = nullptr;
    CheckCuda(cudaMalloc(&dev, total), "cudaMalloc (updates)");
    CheckCuda(cudaMemcpy(dev, host, total, cudaMemcpyHostToDevice), "cudaMemcpy (updates)");
    std::vector<const void*> xs(k);
    for (size_t u = 0; u < k; ++u) xs[u] = static_cast<std::byte*>(dev) + u * bytes;
    Check(folder.ResetAccumulator(n), "ResetAccumulator");
    double ms = BestMs(reps, stream, [&] {
      Check(folder.AccumulateDevice(xs.data(), ws.data(), static_cast<int>(k), d),
            "AccumulateDevice");
    });
    device_gbps[dn] = total / ms / 1e6;
    rows.push_back({"shoal device-resident", dn, device_gbps[dn], ms, "batched kernel"});

    // Check the sum once against the CPU fold on a prefix (the tests check it everywhere).
    {
      Check(folder.ResetAccumulator(n), "ResetAccumulator");
      Check(folder.AccumulateDevice(xs.data(), ws.data(), static_cast<int>(k), d), "fold");
      Check(folder.DownloadAccumulator(host_acc.data()), "DownloadAccumulator");
      const size_t m = std::min<size_t>(n, 1 << 16);
      std::vector<float> want(m, 0.0f);
      for (size_t u = 0; u < k; ++u) {
        shoal::aggregator::Fold(want.data(), host + u * bytes, d, m, ws[u]);
      }
      for (size_t i = 0; i < m; ++i) {
        if (!(std::fabs(host_acc[i] - want[i]) <= 1e-5f * (1 + std::fabs(want[i])))) {
          Fail("device fold differs from the CPU fold at " + std::to_string(i) + ": " +
               std::to_string(host_acc[i]) + " vs " + std::to_string(want[i]));
        }
      }
    }

    // Device-to-device copy of the same bytes (read + write, like the script's figure).
    void* dst = nullptr;
    CheckCuda(cudaMalloc(&dst, total), "cudaMalloc (copy)");
    ms = BestMs(reps, stream, [&] {
      CheckCuda(cudaMemcpyAsync(dst, dev, total, cudaMemcpyDeviceToDevice, stream), "D2D");
    });
    d2d_gbps[dn] = 2.0 * total / ms / 1e6;
    rows.push_back({"cudaMemcpy D2D (anchor)", dn, d2d_gbps[dn], ms, "read + write bytes"});

    // (b) from pinned host memory: register once (timed: this is the pool's start-up cost).
    const auto t0 = std::chrono::steady_clock::now();
    Check(folder.RegisterHost(host, mapped), "RegisterHost");
    const double reg_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "bench-gpu-aggregate: cudaHostRegister of %.2f GB: %.2f s\n", total / 1e9,
                 reg_s);
    ms = BestMs(reps, stream, [&] {
      CheckCuda(cudaMemcpyAsync(dst, host, total, cudaMemcpyHostToDevice, stream), "H2D");
    });
    h2d_gbps[dn] = total / ms / 1e6;
    rows.push_back({"pinned H2D copy (anchor)", dn, h2d_gbps[dn], ms, "one cudaMemcpyAsync"});
    CheckCuda(cudaFree(dst), "cudaFree");
    CheckCuda(cudaFree(dev), "cudaFree");

    ms = BestWallMs(reps, [&] {
      Check(folder.ResetAccumulator(n), "ResetAccumulator");
      for (size_t u = 0; u < k; ++u)
        Check(folder.AccumulateHost(host + u * bytes, d, ws[u]), "AccumulateHost");
      Check(folder.DownloadAccumulator(host_acc.data()), "DownloadAccumulator");
    });
    rows.push_back({"shoal from pinned host", dn, total / ms / 1e6, ms,
                    "copies overlapped, sum copied back once"});

    // (c) the leaf's path: the partial sum in host memory too, per update.
    ms = BestWallMs(reps, [&] {
      for (size_t u = 0; u < k; ++u) {
        shoal::aggregator::GpuFoldSegment seg{pool_acc, host + u * bytes, d, n, ws[u]};
        Check(folder.FoldHost({&seg, 1}), "FoldHost");
      }
    });
    rows.push_back(
        {"shoal leaf (acc in host)", dn, total / ms / 1e6, ms, "acc in + out per update"});
    Check(folder.UnregisterHost(), "UnregisterHost");
    munmap(map, mapped);
  }

  std::printf(
      "bench-gpu-aggregate: %s, %zu updates x %zu params (f32 %.1f MB, bf16 %.1f MB "
      "each); GB/s = update bytes read / time\n",
      prop.name, k, n, n * 4 / 1e6, n * 2 / 1e6);
  std::printf("anchors: %s\n", run_anchor ? anchors.peer.c_str() : "not run (--no-anchor)");
  std::printf("%-30s %-5s %10s %12s  %s\n", "what", "dtype", "GB/s", "ms (K upd.)", "note");
  for (const Row& r : rows) {
    std::printf("%-30s %-5s %10.1f %12.3f  %s\n", r.what.c_str(), r.dtype.c_str(), r.gbps, r.ms,
                r.note.c_str());
  }
  for (const char* name : {"torch_add", "torch_gemv", "triton", "d2d_copy", "pinned_h2d"}) {
    auto it = anchors.gbps.find(name);
    if (it == anchors.gbps.end()) {
      auto u = anchors.unavailable.find(name);
      if (u == anchors.unavailable.end()) u = anchors.unavailable.find("script");
      std::printf("%-30s %-5s %10s %12s  %s\n", (std::string(name) + " (anchor)").c_str(), "-",
                  "unavail.", "-",
                  u == anchors.unavailable.end() ? "no output" : u->second.c_str());
      continue;
    }
    for (const auto& [dt, g] : it->second) {
      std::printf("%-30s %-5s %10.1f %12.3f  %s\n", (std::string(name) + " (anchor)").c_str(),
                  dt.c_str(), g, anchors.ms[name][dt],
                  std::string(name) == "d2d_copy" ? "torch, read + write bytes" : "torch");
    }
  }
  double ratio;
  const auto tri = anchors.gbps.find("triton");
  if (tri != anchors.gbps.end() && tri->second.count("f32")) {
    ratio = device_gbps["f32"] / tri->second.at("f32");
    std::printf(
        "ratio = shoal device-resident f32 (%.1f GB/s) / Triton fused kernel f32 (%.1f "
        "GB/s) = %.3f (target >= 1.0; bf16: %.3f)\n",
        device_gbps["f32"], tri->second.at("f32"), ratio,
        tri->second.count("bf16") ? device_gbps["bf16"] / tri->second.at("bf16") : 0.0);
  } else {
    ratio = device_gbps["f32"] / d2d_gbps["f32"];
    std::printf(
        "Triton anchor unavailable: ratio = shoal device-resident f32 (%.1f GB/s) / "
        "D2D copy (%.1f GB/s) = %.3f\n",
        device_gbps["f32"], d2d_gbps["f32"], ratio);
  }
  for (const Row& r : rows) {
    if (r.what == "shoal from pinned host") {
      std::printf("from host %s: %.1f GB/s = %.3f x pinned H2D (%.1f GB/s) (target >= 0.9)\n",
                  r.dtype.c_str(), r.gbps, r.gbps / h2d_gbps[r.dtype], h2d_gbps[r.dtype]);
    }
  }
  std::printf("RESULT gpu_aggregate ratio=%.3f\n", ratio);
  return 0;
}
