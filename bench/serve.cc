// bench-serve: model serving over the Open Inference Protocol v2 REST routes, Shoal against
// KServe 0.21's own Python model server on the same ONNX file (the 784-128-10 MLP of
// tests/data/inference/mlp.onnx, or a torchvision ResNet-18 exported here): a real shoald serving
// it as an inference function (/v2/models/<m>/infer), and kserve.ModelServer with an
// onnxruntime-backed kserve.Model (bench/serve_kserve.py: uvicorn workers = cores, one
// onnxruntime thread each, gRPC and the per-request log lines off; the Python server has no
// batcher). The same requests to both, JSON tensors and the binary tensor extension (KServe
// 0.21 decodes and answers it: dataplane.decode_inference_request, InferResponse.to_rest):
//  - requests/s at saturation: wrk, the same Lua script (the body from a file), connections and
//    duration for both, runs interleaved;
//  - latency at a fixed rate: bench/open_loop.h, an open-loop generator (request i due at
//    t0 + i / rate, latency from that due time, at most `connections` in flight), at the same
//    rate for both: --rate-fraction of KServe's median JSON requests/s measured just before.
// RESULT serve ratio = Shoal's / KServe's JSON requests/s (the median of the runs' ratios);
// serve_binary the same for binary bodies; serve_p99 Shoal's p99 / KServe's at the fixed rate,
// JSON. Issue 28's target: ratio >= 3 with serve_p99 <= 1.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "bench_shoald.h"
#include "open_loop.h"
#include "project_python.h"
#include "run_stats.h"
#include "tests/support/shoald_fixture.h"
#include "wrk_runner.h"

using namespace shoal::testing;
using shoal::bench::Spread;
using shoal::bench::SpreadOf;

namespace {

const std::string kSource = SHOAL_SOURCE_DIR;

// A child process in its own process group (the KServe server and the workers it spawns),
// stopped with the whole group, and in a CPU cgroup of its own: Shoal's instance runs in
// shoald's cgroup (shoal/<node>/...), which competes for the CPU as one group; on a machine busy
// with other processes a KServe left in the root group would get a share per process instead.
// In its own group (cpu.shares 1024, or cpu.weight 100 on cgroup v2: the defaults) it competes
// as Shoal's does, as a Kubernetes pod would. Without a writable cgroup filesystem it runs where
// it is (said on stderr).
class ChildGroup {
 public:
  bool Start(const std::vector<std::string>& argv, const std::string& log) {
    const bool v1 = access("/sys/fs/cgroup/cpu/cgroup.procs", F_OK) == 0;
    cgroup_ = std::string(v1 ? "/sys/fs/cgroup/cpu" : "/sys/fs/cgroup") + "/shoal-bench-serve-" +
              std::to_string(getpid());
    if (mkdir(cgroup_.c_str(), 0755) != 0) {
      std::fprintf(stderr, "no cgroup of its own for KServe (%s): %s\n", cgroup_.c_str(),
                   std::strerror(errno));
      cgroup_.clear();
    }
    pid_ = fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      setsid();
      if (!cgroup_.empty()) {
        const int cg = open((cgroup_ + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
        if (cg >= 0) {
          [[maybe_unused]] ssize_t n = write(cg, "0", 1);
          close(cg);
        }
      }
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    return true;
  }
  bool Running() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }
  const std::string& cgroup() const { return cgroup_; }
  void Stop() {
    if (pid_ > 0) {
      kill(-pid_, SIGTERM);
      for (int i = 0; i < 100 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      kill(-pid_, SIGKILL);  // the workers too, whatever the parent did with them
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    // Empty once the group's processes are gone (a killed worker takes a moment to be reaped).
    for (int i = 0; !cgroup_.empty() && rmdir(cgroup_.c_str()) != 0 && i < 50; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    cgroup_.clear();
  }
  ~ChildGroup() { Stop(); }

 private:
  pid_t pid_ = -1;
  std::string cgroup_;
};

struct Model {
  std::string name;            // mlp | resnet18
  std::string onnx;            // the file both servers load
  std::vector<int64_t> shape;  // one request's input, batch 1
  int64_t elements = 0;
};

struct Body {
  std::string label;    // JSON | binary
  std::string lua;      // wrk script
  std::string request;  // the whole HTTP request, for the open-loop generator
};

std::string ShapeJson(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) s += ',';
    s += std::to_string(shape[i]);  // GCC 12's -Wrestrict misfires on "," + to_string at -O3
  }
  return s + "]";
}

// The two bodies of one request (the same image): JSON tensors, and the binary extension with
// the answer asked for in binary too.
std::vector<Body> MakeBodies(const Model& m, const std::string& dir, const std::string& path) {
  std::vector<float> image(static_cast<size_t>(m.elements));
  uint32_t s = 12345;  // a fixed pseudo-random image in [0, 1)
  for (float& v : image) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(s >> 8) / 16777216.0f;
  }
  std::string json = R"({"inputs":[{"name":"input","shape":)" + ShapeJson(m.shape) +
                     R"(,"datatype":"FP32","data":[)";
  for (size_t i = 0; i < image.size(); ++i) {
    char b[24];
    std::snprintf(b, sizeof b, i ? ",%.6g" : "%.6g", image[i]);
    json += b;
  }
  json += "]}]}";
  const std::string header =
      R"({"inputs":[{"name":"input","shape":)" + ShapeJson(m.shape) +
      R"(,"datatype":"FP32","parameters":{"binary_data_size":)" + std::to_string(image.size() * 4) +
      R"(}}],"outputs":[{"name":"logits","parameters":{"binary_data":true}}]})";
  std::string binary = header;
  binary.append(reinterpret_cast<const char*>(image.data()), image.size() * 4);

  auto make = [&](const std::string& label, const std::string& body, const std::string& type,
                  const std::string& extra_header) {
    Body b;
    b.label = label;
    const std::string file = dir + "/" + m.name + "-" + label + ".body";
    std::ofstream(file, std::ios::binary) << body;
    b.lua = dir + "/" + m.name + "-" + label + ".lua";
    std::ofstream lua(b.lua);
    lua << "local f = io.open(\"" << file << "\", \"rb\")\nwrk.body = f:read(\"*all\")\nf:close()\n"
        << "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"" << type << "\"\n";
    std::string h = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: " + type +
                    "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    if (!extra_header.empty()) {
      lua << "wrk.headers[\"Inference-Header-Content-Length\"] = \"" << extra_header << "\"\n";
      h += "Inference-Header-Content-Length: " + extra_header + "\r\n";
    }
    b.request = h + "\r\n" + body;
    return b;
  };
  return {make("JSON", json, "application/json", ""),
          make("binary", binary, "application/octet-stream", std::to_string(header.size()))};
}

// The logits of one answer (JSON data, or the binary extension's bytes after the header).
std::vector<float> Logits(const HttpResult& r) {
  std::vector<float> out;
  if (r.status != 200) return out;
  std::string body = r.body;
  if (auto te = r.headers.find("transfer-encoding"); te != r.headers.end()) {
    body.clear();  // uvicorn answers KServe's binary responses chunked
    for (size_t at = 0;;) {
      const size_t line_end = r.body.find("\r\n", at);
      if (line_end == std::string::npos) return out;
      const size_t n = std::strtoul(r.body.c_str() + at, nullptr, 16);
      if (n == 0) break;
      body += r.body.substr(line_end + 2, n);
      at = line_end + 2 + n + 2;
    }
  }
  size_t json_len = body.size();
  if (auto h = r.headers.find("inference-header-content-length"); h != r.headers.end()) {
    json_len = std::stoul(h->second);
  }
  auto j = nlohmann::json::parse(body.substr(0, json_len), nullptr, false);
  if (j.is_discarded() || !j.contains("outputs") || j["outputs"].empty()) return out;
  const auto& o = j["outputs"][0];
  if (o.contains("data") && o["data"].is_array()) {
    for (const auto& v : o["data"]) out.push_back(v.get<float>());
  } else {
    const size_t n = (body.size() - json_len) / 4;
    out.resize(n);
    std::memcpy(out.data(), body.data() + json_len, n * 4);
  }
  return out;
}

// The request's head lines and body for the fixture's Http().
HttpResult Send(uint16_t port, const std::string& path, const Body& b) {
  const size_t head_end = b.request.find("\r\n\r\n");
  const std::string body = b.request.substr(head_end + 4);
  std::vector<std::string> headers;
  const std::string head = b.request.substr(0, head_end);
  for (size_t at = head.find("\r\n"); at != std::string::npos;) {
    const size_t next = head.find("\r\n", at + 2);
    std::string line = head.substr(at + 2, next == std::string::npos ? next : next - at - 2);
    if (!line.starts_with("Host:") && !line.starts_with("Content-Length:")) headers.push_back(line);
    at = next;
  }
  return Http(port, "POST", path, body, headers);
}

// bench/export_resnet18.py: torchvision's ResNet-18 (random weights) as ONNX, the exporter's
// Identity nodes folded (Shoal's loader has no Identity operator).
bool ExportResnet18(const std::string& out) {
  const std::string cmd = shoal::bench::ProjectPython() + " " + kSource +
                          "/bench/export_resnet18.py '" + out + "' 2>&1 | grep -v Warning 1>&2";
  return std::system(cmd.c_str()) == 0;
}

std::string Fmt(double v, const char* f = "%.0f") {
  char b[32];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string SpreadText(const Spread& s, const char* f) {
  return Fmt(s.min, f) + " / " + Fmt(s.median, f) + " / " + Fmt(s.max, f);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 3, secs = 5, conns = 32, wrk_threads = 1, workers = 0, max_batch = 1,
      model_threads = 0;
  double rate_fraction = 0.5;
  std::string model_name = "mlp", delay = "0";
  shoal::bench::Args args(
      "bench-serve [--model mlp|resnet18] [--runs 3] [--seconds 5] [--connections 32] "
      "[--wrk-threads 1] [--workers cores] [--rate-fraction 0.5] [--max-batch 1] "
      "[--max-delay 0] [--model-threads T]");
  args.Option("--model", &model_name)
      .Option("--runs", &runs)
      .Option("--seconds", &secs)
      .Option("--connections", &conns)
      .Option("--wrk-threads", &wrk_threads)
      .Option("--workers", &workers)
      .Option("--rate-fraction", &rate_fraction)
      .Option("--max-batch", &max_batch)
      .Option("--max-delay", &delay)
      .Option("--model-threads", &model_threads);
  if (!args.Parse(argc, argv)) return 2;
  if (model_name != "mlp" && model_name != "resnet18") {
    args.Usage();
    return 2;
  }
  if (!shoal::bench::WrkInstalled("bench-serve", "serve")) return 1;
  if (workers <= 0) workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Shoal's model threads: as many cores as KServe's workers x 1 onnxruntime thread use for
  // ResNet-18; one for the MLP, whose 6 us batch-1 run more threads only slow down.
  if (model_threads <= 0) model_threads = model_name == "mlp" ? 1 : workers;
  char tmpl[] = "/tmp/shoal-bench-serve-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  chmod(dir.c_str(), 0755);  // the instance's sandbox reads the model from here

  Model m;
  m.name = model_name;
  if (model_name == "mlp") {
    m.onnx = kSource + "/tests/data/inference/mlp.onnx";
    m.shape = {1, 784};
  } else {
    m.onnx = dir + "/resnet18.onnx";
    m.shape = {1, 3, 224, 224};
    std::fprintf(stderr, "exporting torchvision's ResNet-18 (random weights) to %s\n",
                 m.onnx.c_str());
    if (!ExportResnet18(m.onnx)) {
      std::fprintf(stderr, "the ResNet-18 export failed\n");
      return 1;
    }
  }
  m.elements = 1;
  for (int64_t d : m.shape) m.elements *= d;
  const std::string path = "/v2/models/" + m.name + "/infer";
  const std::vector<Body> bodies = MakeBodies(m, dir, path);

  // KServe first: its workers import kserve and onnxruntime for several seconds each.
  const uint16_t kport = FreePort();
  std::fprintf(stderr, "[1/5] KServe %s: kserve.ModelServer, %d uvicorn workers, port %u\n", "0.21",
               workers, kport);
  ChildGroup kserve;
  const std::string klog = dir + "/kserve.log";
  if (!kserve.Start({shoal::bench::ProjectPython(), kSource + "/bench/serve_kserve.py", "--onnx",
                     m.onnx, "--model_name", m.name, "--http_port", std::to_string(kport),
                     "--workers", std::to_string(workers), "--threads", "1"},
                    klog)) {
    return 1;
  }
  std::fprintf(stderr, "[2/5] shoald (%d event loops), inference function from the same file\n",
               workers);
  Shoald shoald;
  if (!shoal::bench::StartShoald(shoald, workers)) return 1;
  auto d = shoald.Deploy(
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: " + m.name +
      "-serve}\nspec:\n  handler: inference\n  concurrency: 256\n  scale: {min: 1, max: 1}\n"
      "  inference:\n    modelName: " +
      m.name + "\n    source: {onnx: " + m.onnx +
      "}\n    device: cpu\n    threads: " + std::to_string(model_threads) +
      "\n    maxBatchSize: " + std::to_string(max_batch) + "\n    maxQueueDelay: " + delay + "\n");
  if (d.exit_code != 0 || !shoald.WaitReady(m.name + "-serve", 1, 60000)) {
    std::fprintf(stderr, "inference deploy failed: %s%s\n%s", d.err.c_str(), d.out.c_str(),
                 shoald.Log().c_str());
    return 1;
  }
  // Both must give the same logits for the same request, JSON and binary, before any timing.
  bool ready = false;
  for (int i = 0; i < 1200 && kserve.Running(); ++i) {
    if (Send(kport, path, bodies[0]).status == 200) {
      ready = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  if (!ready) {
    std::ifstream f(klog);
    std::fprintf(stderr, "KServe did not answer:\n%s\n",
                 std::string(std::istreambuf_iterator<char>(f), {}).c_str());
    return 1;
  }
  std::fprintf(stderr, "[3/5] the same answers from both (JSON and binary)\n");
  for (const Body& b : bodies) {
    const std::vector<float> ks = Logits(Send(kport, path, b));
    const std::vector<float> sh = Logits(Send(shoald.port(), path, b));
    double diff = ks.size() == sh.size() && !ks.empty() ? 0 : INFINITY;
    for (size_t i = 0; i < ks.size() && i < sh.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(ks[i] - sh[i])));
    }
    std::fprintf(stderr, "  %s: %zu logits each, max |KServe - Shoal| = %.3g\n", b.label.c_str(),
                 ks.size(), diff);
    if (!(diff <= 1e-3)) {
      std::fprintf(stderr, "the two servers disagree on %s\n", b.label.c_str());
      return 1;
    }
  }

  struct Peer {
    const char* name;
    uint16_t port;
  };
  const Peer peers[2] = {{"KServe 0.21", kport}, {"Shoal", shoald.port()}};
  // A request slower than wrk's timeout is an error, not a latency: ResNet-18's JSON body
  // (150,528 values) takes KServe seconds to parse on this VM.
  const int wrk_timeout = 60;
  // [body][peer][run]
  std::vector<double> rps[2][2], errors[2][2], p50[2][2], p99[2][2], answered[2][2];
  std::fprintf(stderr, "[4/5] saturation: wrk -t%d -c%d -d%ds, %d runs interleaved\n", wrk_threads,
               conns, secs, runs);
  for (int b = 0; b < 2; ++b) {
    for (const Peer& p : peers) {  // warm-up: each worker's first requests
      shoal::bench::RunWrk(p.port, path, wrk_threads, conns, 1, bodies[b].lua, wrk_timeout);
    }
  }
  for (int r = 0; r < runs; ++r) {
    for (int b = 0; b < 2; ++b) {
      for (int k = 0; k < 2; ++k) {
        const int p = (r % 2 == 0) ? k : 1 - k;  // alternate who goes first
        auto w = shoal::bench::RunWrk(peers[p].port, path, wrk_threads, conns, secs, bodies[b].lua,
                                      wrk_timeout);
        rps[b][p].push_back(w.good_rps);
        errors[b][p].push_back(static_cast<double>(w.errors));
        std::fprintf(stderr, "  run %d %-6s %-11s %9.0f req/s (2xx), p99 %.2f ms, %ld errors\n",
                     r + 1, bodies[b].label.c_str(), peers[p].name, w.good_rps, w.p99_ms, w.errors);
      }
    }
  }
  const double rate = std::max(1.0, std::round(rate_fraction * SpreadOf(rps[0][0]).median));
  std::fprintf(stderr,
               "[5/5] fixed rate %.0f req/s (%.2f x KServe's JSON median), open loop, "
               "%d connections, %d s, %d runs\n",
               rate, rate_fraction, conns, secs, runs);
  for (int r = 0; r < runs; ++r) {
    for (int b = 0; b < 2; ++b) {
      for (int k = 0; k < 2; ++k) {
        const int p = (r % 2 == 0) ? k : 1 - k;
        auto o = shoal::bench::RunOpenLoop(peers[p].port, bodies[b].request, rate, secs, conns);
        p50[b][p].push_back(o.p50_ms);
        p99[b][p].push_back(o.p99_ms);
        answered[b][p].push_back(o.answered_rps);
        std::fprintf(stderr,
                     "  run %d %-6s %-11s p50 %.3f ms, p99 %.3f ms, max %.2f ms; %ld due, %ld "
                     "2xx, %ld other, %ld unanswered\n",
                     r + 1, bodies[b].label.c_str(), peers[p].name, o.p50_ms, o.p99_ms, o.max_ms,
                     o.due, o.ok, o.non2xx, o.unanswered);
      }
    }
  }
  const std::string kserve_cgroup = kserve.cgroup();
  kserve.Stop();
  shoald.Stop();

  std::printf(
      "bench-serve: %s (%s, input %s) over OIP v2 REST, Shoal (shoald, %d event loops, one "
      "instance, maxBatchSize %d, maxQueueDelay %s, %d model threads) vs KServe 0.21 "
      "(kserve.ModelServer on uvicorn+uvloop+httptools, %d workers, onnxruntime 1 thread each, "
      "no batcher in the Python server; its processes in a CPU cgroup of their own%s, as Shoal's "
      "instance is in shoald's); load from this machine's cores too\n",
      m.name.c_str(), m.onnx.c_str(), ShapeJson(m.shape).c_str(), workers, max_batch, delay.c_str(),
      model_threads, workers, kserve_cgroup.empty() ? " (not made here)" : "");
  std::printf(
      "saturation: wrk -t%d -c%d -d%ds --timeout %ds, 2xx req/s, min / median / max of %d runs\n",
      wrk_threads, conns, secs, wrk_timeout, runs);
  std::printf(
      "fixed rate: %.0f req/s for both (%.2f x KServe's JSON median), open loop from "
      "each request's due time, %d connections\n",
      rate, rate_fraction, conns);
  std::printf("%-7s %-12s %26s %8s %26s %26s\n", "body", "server", "req/s (saturation)", "errors",
              "p50 ms @ rate", "p99 ms @ rate");
  for (int b = 0; b < 2; ++b) {
    for (int p = 0; p < 2; ++p) {
      double errs = 0;
      for (double e : errors[b][p]) errs += e;
      const Spread r = SpreadOf(rps[b][p]);
      std::printf("%-7s %-12s %26s %8.0f %26s %26s\n", bodies[b].label.c_str(), peers[p].name,
                  SpreadText(r, r.median < 100 ? "%.1f" : "%.0f").c_str(), errs,
                  SpreadText(SpreadOf(p50[b][p]), "%.3f").c_str(),
                  SpreadText(SpreadOf(p99[b][p]), "%.3f").c_str());
    }
  }
  double result[2] = {0, 0}, p99_ratio = 0;
  for (int b = 0; b < 2; ++b) {
    std::vector<double> ratio, lat;
    for (int r = 0; r < runs; ++r) {
      ratio.push_back(rps[b][0][r] > 0 ? rps[b][1][r] / rps[b][0][r] : NAN);
      lat.push_back(p99[b][0][r] > 0 ? p99[b][1][r] / p99[b][0][r] : NAN);
    }
    const Spread s = SpreadOf(ratio), l = SpreadOf(lat);
    std::printf("%-7s Shoal / KServe req/s %s, p99 at the fixed rate Shoal / KServe %s\n",
                bodies[b].label.c_str(), SpreadText(s, "%.2f").c_str(),
                SpreadText(l, "%.3f").c_str());
    result[b] = s.median;
    if (b == 0) p99_ratio = l.median;
  }
  std::printf("target (issue 28): req/s ratio >= 3 at an equal or lower p99: %s\n",
              result[0] >= 3 && p99_ratio <= 1 ? "met" : "missed");
  std::printf("RESULT serve ratio=%.3f\n", result[0]);
  std::printf("RESULT serve_binary ratio=%.3f\n", result[1]);
  std::printf("RESULT serve_p99 ratio=%.3f\n", p99_ratio);
  return 0;
}
