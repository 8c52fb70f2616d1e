// bench-infer: an executor's batch-1 latency (p50, p99 over --iters single-sample runs) and
// throughput at --batches (default 16 and 64; median of --large-iters runs each) on the FL
// demo's MLP (784-128-10) or ResNet-18 (torchvision layout, BN folded at load, 3x224x224 unless
// --image), against stock engines on the very same graph, measured in the same run by
// bench/infer_anchor.py: onnxruntime (CPU execution provider, ORT_ENABLE_ALL, intra-op threads =
// --threads, inter-op 1, sequential), torch eager and torch.compile (inductor), plus torch's
// CUDA-graph replay on cuda. The graph Shoal compiled is written with Shoal's SaveOnnx and every
// anchor runs that file (onnxruntime as is, torch as the file's nodes in torch.nn.functional);
// each anchor's output on a check batch is compared with Shoal's before anything is timed.
// Anchors use the wheels' own libraries (torch: MKL + oneDNN; onnxruntime: MLAS); each row's
// note says which, and the thread count.
//
// --rounds rounds, interleaved: Shoal measures, then every anchor, then Shoal again; a first
// warm-up round is discarded. Each ratio is formed per round and printed as min/median/max over
// the rounds: latency = anchor bs1 p50 / Shoal's, throughput = Shoal's / anchor's (higher is
// better for both). Target: >= 1.0 against onnxruntime for both. RESULT infer is the smallest
// of the median ratios against onnxruntime (latency and each batch), or against the best anchor
// where onnxruntime did not run (cuda with a CPU-only wheel); nan with no anchor at all.
//
// --model FILE.onnx (the zoo: build/zoo/<name>.onnx): the anchors run that file as it is.
//   bench-infer [--executor cpu|cuda|auto] [--model mlp|resnet18|F.onnx] [--precision fp32|bf16]
//               [--batches 16,64] [--iters N] [--large-iters N] [--rounds N] [--image N]
//               [--threads N] [--no-compile] [--compile-mode MODE] [--compile] [--no-anchor]
//               [--python PATH]
//   --compile is --compile-mode max-autotune (minutes per shape; gpu-check passes it on cuda).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "project_python.h"
#include "run_stats.h"
#include "shoal/serving/executor/executor.h"
#include "shoal/serving/graph/architectures_graph.h"
#ifdef SHOAL_BENCH_INFER_ONNX
#include "shoal/serving/onnx/onnx.h"
#endif

extern char** environ;

namespace {

using namespace shoal::inference;
using shoal::Status;
using shoal::bench::SpreadOf;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string executor = "cpu", model = "mlp", precision = "fp32", python, compile_mode;
  std::vector<std::string> batches = {"16", "64"};
  int64_t image = 224;
  int iters = 0, large_iters = 0, rounds = 0, threads = 0;
  bool compile_max_autotune = false, no_compile = false, anchor = true;
};

// One engine's figures in one round.
struct Figures {
  double p50_ms = NAN, p99_ms = NAN;
  std::map<int64_t, double> tput;  // batch -> samples per second
};

struct Engine {
  std::string name, note;
  std::vector<Figures> rounds;  // index = round - 1
};

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

shoal::Result<Graph> BuildGraph(const Options& o) {
  if (o.model.ends_with(".onnx")) {
#ifdef SHOAL_BENCH_INFER_ONNX
    return LoadOnnx(o.model);
#endif
    return shoal::Unavailable("bench-infer was built without the ONNX reader");
  }
  if (o.model == "mlp") {
    Graph g = MlpGraph(784, {128}, 10);
    uint32_t s = 12345;  // weights the size of a trained model's, values irrelevant to speed
    for (auto& [name, init] : g.initializers) {
      for (float& x : init.floats) {
        s = s * 1664525u + 1013904223u;
        x = static_cast<float>(static_cast<int32_t>(s)) * 0x1p-36f;
      }
    }
    return g;
  }
  return ResNetGraph({.image = o.image});
}

[[maybe_unused]] bool WriteFloats(const std::string& path, const std::vector<float>& v) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return static_cast<bool>(f);
}

// The anchor script as a child with a pipe each way; its stderr goes to a log file.
class AnchorProcess {
 public:
  ~AnchorProcess() { Close(); }

  bool Start(const std::vector<std::string>& argv, const std::string& log) {
    int to[2], from[2];
    if (pipe(to) != 0) return false;
    if (pipe(from) != 0) {
      close(to[0]);
      close(to[1]);
      return false;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (int fd : {to[0], to[1], from[0], from[1]}) posix_spawn_file_actions_addclose(&fa, fd);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int rc = posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(to[0]);
    close(from[1]);
    if (rc != 0) {
      close(to[1]);
      close(from[0]);
      pid_ = -1;
      return false;
    }
    in_ = fdopen(to[1], "w");
    out_ = fdopen(from[0], "r");
    return in_ != nullptr && out_ != nullptr;
  }

  // The next line (without its newline); false at end of output.
  bool ReadLine(std::string* line) {
    char buf[4096];
    if (out_ == nullptr || std::fgets(buf, sizeof buf, out_) == nullptr) return false;
    *line = buf;
    while (!line->empty() && (line->back() == '\n' || line->back() == '\r')) line->pop_back();
    return true;
  }

  void Send(const std::string& line) {
    if (in_ == nullptr) return;
    std::fputs((line + "\n").c_str(), in_);
    std::fflush(in_);
  }

  void Close() {
    if (in_ != nullptr) {
      Send("QUIT");
      std::fclose(in_);
      in_ = nullptr;
    }
    if (out_ != nullptr) {
      std::fclose(out_);
      out_ = nullptr;
    }
    if (pid_ > 0) {
      int status = 0;
      waitpid(pid_, &status, 0);
      pid_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
};

std::string Value(const std::string& line, const std::string& key) {
  const size_t at = line.find(" " + key + "=");
  if (at == std::string::npos) return {};
  const size_t from = at + key.size() + 2;
  if (key == "note" || key == "reason") return line.substr(from);  // the rest of the line
  return line.substr(from, line.find(' ', from) - from);
}

std::string Fixed(double v, int digits) {
  if (std::isnan(v)) return "-";
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

std::string LogTail(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);) lines.push_back(l);
  std::string tail;
  for (size_t i = lines.size() > 8 ? lines.size() - 8 : 0; i < lines.size(); ++i) {
    tail += "    " + lines[i] + "\n";
  }
  return tail;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  shoal::bench::Args args(
      "bench-infer [--executor cpu|cuda|auto] [--model mlp|resnet18|FILE.onnx] "
      "[--precision fp32|fp16|bf16] [--batches 16,64] [--iters N] [--large-iters N] "
      "[--rounds N] [--image N] [--threads N] [--no-compile] [--compile-mode MODE] [--compile] "
      "[--no-anchor] [--python PATH]");
  args.Option("--executor", &o.executor)
      .Option("--model", &o.model)
      .Option("--precision", &o.precision)
      .Option("--python", &o.python)
      .Option("--batches", &o.batches)
      .Option("--image", &o.image)
      .Option("--iters", &o.iters)
      .Option("--large-iters", &o.large_iters)
      .Option("--rounds", &o.rounds)
      .Option("--threads", &o.threads)
      .Option("--compile-mode", &o.compile_mode)
      .Switch("--compile", &o.compile_max_autotune, true)
      .Switch("--no-compile", &o.no_compile, true)
      .Switch("--no-anchor", &o.anchor, false);
  if (!args.Parse(argc, argv)) return 2;
  if (o.compile_max_autotune && o.compile_mode.empty()) o.compile_mode = "max-autotune";
  const bool onnx_file = o.model.size() > 5 && o.model.ends_with(".onnx");
  if (o.model != "mlp" && o.model != "resnet18" && !onnx_file) {
    args.Usage();
    return 2;
  }
  const std::map<std::string, Precision> precisions = {
      {"fp32", Precision::kF32}, {"fp16", Precision::kF16}, {"bf16", Precision::kBF16}};
  if (precisions.count(o.precision) == 0) {
    args.Usage();
    return 2;
  }
  std::vector<int64_t> batches;
  for (const std::string& b : o.batches) {
    const int64_t n = std::strtoll(b.c_str(), nullptr, 10);
    if (n < 1) {
      args.Usage();
      return 2;
    }
    batches.push_back(n);
  }
  if (batches.empty()) {
    args.Usage();
    return 2;
  }

  auto executor = CreateExecutor(o.executor);
  if (!executor.ok()) {
    std::fprintf(stderr, "bench-infer: %s\n", executor.status().ToString().c_str());
    return 1;
  }
  const std::string device((*executor)->name());
  const bool resnet = o.model == "resnet18" || onnx_file, cuda = device == "cuda";
  // Defaults sized so a CPU run finishes in a few minutes on 2 cores (torch.compile included).
  if (o.iters <= 0) o.iters = resnet ? (cuda ? 200 : 20) : 2000;
  if (o.large_iters <= 0) o.large_iters = resnet ? (cuda ? 20 : 3) : 200;
  if (o.rounds <= 0) o.rounds = resnet ? 3 : 5;
  if (o.threads <= 0)
    o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());

  auto built = BuildGraph(o);  // an ONNX file is sized as ResNet-18 is (ms per sample)
  Graph g = built.ok() ? std::move(*built) : Graph{};
  for (Status s : {built.status(), g.Validate(), FoldBatchNorm(g)}) {
    if (!s.ok()) {
      std::fprintf(stderr, "bench-infer: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  const auto t0 = Clock::now();
  auto exe = (*executor)->Compile(
      g, {.precision = precisions.at(o.precision), .max_batch = max_batch, .threads = o.threads});
  // A precision this machine's ISA has no kernels for (oneDNN's bf16 needs AVX-512): the
  // anchors are still measured, Shoal's row says why it is empty.
  std::string shoal_unavailable;
  if (!exe.ok()) {
    if (exe.status().code() != shoal::StatusCode::kUnavailable) {
      std::fprintf(stderr, "bench-infer: compile: %s\n", exe.status().ToString().c_str());
      return 1;
    }
    shoal_unavailable = exe.status().ToString();
    std::fprintf(stderr, "bench-infer: shoal cannot run this: %s\n", shoal_unavailable.c_str());
  }
  const double compile_s = Seconds(t0, Clock::now());
  auto shapes = g.InferShapes(1);
  if (!shapes.ok()) {
    std::fprintf(stderr, "bench-infer: %s\n", shapes.status().ToString().c_str());
    return 1;
  }
  int64_t in_per = 1, out_per = 1;
  for (int64_t d : shapes->at(g.inputs[0].name)) in_per *= d;
  for (int64_t d : shapes->at(g.outputs[0].name)) out_per *= d;
  std::vector<float> in(static_cast<size_t>(in_per * max_batch)),
      out(static_cast<size_t>(out_per * max_batch));
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 255) / 255.0f;

  auto run = [&](int64_t batch) {
    const Status s =
        (*exe)->Run({std::span<const float>(in).first(static_cast<size_t>(batch * in_per)),
                     std::span<float>(out).first(static_cast<size_t>(batch * out_per)), batch});
    if (!s.ok()) {
      std::fprintf(stderr, "bench-infer: run: %s\n", s.ToString().c_str());
      std::exit(1);
    }
  };
  // Median and p99 (nearest rank) of `iters` timed runs after one untimed run, as the anchor.
  auto timed = [&](int64_t batch, int iters) {
    run(batch);
    std::vector<double> t;
    for (int i = 0; i < iters; ++i) {
      const auto a = Clock::now();
      run(batch);
      t.push_back(Seconds(a, Clock::now()));
    }
    std::sort(t.begin(), t.end());
    return std::make_pair(t[t.size() / 2], t[std::min(t.size() - 1, t.size() * 99 / 100)]);
  };
  auto measure = [&] {
    Figures f;
    const auto [p50, p99] = timed(1, o.iters);
    f.p50_ms = p50 * 1e3;
    f.p99_ms = p99 * 1e3;
    for (int64_t b : batches) f.tput[b] = static_cast<double>(b) / timed(b, o.large_iters).first;
    return f;
  };

  // The check batch and Shoal's output for it, and the graph as ONNX, for the anchors.
  const int64_t check_batch = 2;
  char tmpl[] = "/tmp/shoal-bench-infer-XXXXXX";
  const std::string dir = mkdtemp(tmpl) != nullptr ? tmpl : "";
  std::vector<float> check_out(static_cast<size_t>(out_per * check_batch));
  if (shoal_unavailable.empty()) {
    const Status s =
        (*exe)->Run({std::span<const float>(in).first(static_cast<size_t>(check_batch * in_per)),
                     check_out, check_batch});
    if (!s.ok()) {
      std::fprintf(stderr, "bench-infer: run: %s\n", s.ToString().c_str());
      return 1;
    }
  }

  Engine shoal_engine{"shoal " + device + " " + o.precision,
                      shoal_unavailable.empty()
                          ? "compile " + std::to_string(static_cast<int>(compile_s * 1e3)) +
                                " ms, " + std::to_string(o.threads) + " threads"
                          : "not measured: " + shoal_unavailable,
                      {}};
  std::vector<Engine> anchors;
  std::vector<std::pair<std::string, std::string>> skipped;  // name, reason
  AnchorProcess proc;
  bool anchor_up = false;
  std::string why = "--no-anchor", log = dir + "/anchor.log";
  if (o.anchor && dir.empty()) why = "cannot make a temporary directory";
  if (o.anchor && !dir.empty()) {
#ifdef SHOAL_BENCH_INFER_ONNX
    // The file as given for an ONNX model (SaveOnnx writes Shoal's first twelve operators only).
    const std::string onnx = onnx_file ? o.model : dir + "/model.onnx";
    const Status saved = onnx_file ? Status{} : SaveOnnx(g, onnx);
    const std::string py = o.python.empty() ? shoal::bench::ProjectPython() : o.python;
    if (!saved.ok()) {
      why = "SaveOnnx: " + saved.ToString();
    } else if (!WriteFloats(dir + "/check.in",
                            std::vector<float>(in.begin(), in.begin() + check_batch * in_per)) ||
               (shoal_unavailable.empty() && !WriteFloats(dir + "/check.out", check_out))) {
      why = "cannot write the check batch under " + dir;
    } else {
      std::string joined;
      for (int64_t b : batches) joined += (joined.empty() ? "" : ",") + std::to_string(b);
      std::vector<std::string> cmd = {py,
                                      SHOAL_INFER_ANCHOR_PY,
                                      "--onnx",
                                      onnx,
                                      "--check-input",
                                      dir + "/check.in",
                                      "--check-batch",
                                      std::to_string(check_batch),
                                      "--device",
                                      device,
                                      "--precision",
                                      o.precision,
                                      "--batches",
                                      joined,
                                      "--iters",
                                      std::to_string(o.iters),
                                      "--large-iters",
                                      std::to_string(o.large_iters),
                                      "--threads",
                                      std::to_string(o.threads)};
      if (shoal_unavailable.empty()) cmd.insert(cmd.end(), {"--check-output", dir + "/check.out"});
      if (o.no_compile) cmd.push_back("--no-compile");
      if (!o.compile_mode.empty()) cmd.insert(cmd.end(), {"--compile-mode", o.compile_mode});
      std::string shown;
      for (const std::string& c : cmd) shown += c + " ";
      std::fprintf(stderr, "bench-infer: anchor: %s(log %s)\n", shown.c_str(), log.c_str());
      if (!proc.Start(cmd, log)) {
        why = "cannot start " + py;
      } else {
        std::string line;
        while (proc.ReadLine(&line)) {
          if (line == "READY") {
            anchor_up = true;
            break;
          }
          char name[128] = {};
          if (std::sscanf(line.c_str(), "ENGINE %127s", name) == 1) {
            anchors.push_back({name, Value(line, "note"), {}});
          } else if (std::sscanf(line.c_str(), "SKIP %127s", name) == 1) {
            skipped.emplace_back(name, Value(line, "reason"));
          }
        }
        if (!anchor_up) why = "the anchor script failed during set-up; its log:\n" + LogTail(log);
      }
    }
#else
    why =
        "this build has no ONNX writer (shoal_inference_onnx: libonnx-dev and protobuf), so "
        "the anchors cannot be given Shoal's graph";
#endif
  }

  // Round 0 warms both sides (lazy initialisation, page faults) and is discarded.
  for (int r = 0; r <= o.rounds; ++r) {
    if (shoal_unavailable.empty()) {
      std::fprintf(stderr, "bench-infer: round %d/%d: shoal\n", r, o.rounds);
      const Figures mine = measure();
      if (r > 0) shoal_engine.rounds.push_back(mine);
    }
    if (!anchor_up) continue;
    std::fprintf(stderr, "bench-infer: round %d/%d: anchors\n", r, o.rounds);
    proc.Send("RUN " + std::to_string(r));
    std::string line;
    bool done = false;
    while (!done && proc.ReadLine(&line)) {
      char name[128] = {};
      if (line.rfind("DONE", 0) == 0) {
        done = true;
      } else if (std::sscanf(line.c_str(), "ANCHOR %127s", name) == 1 && r > 0) {
        for (Engine& e : anchors) {
          if (e.name != name) continue;
          Figures f;
          f.p50_ms = std::strtod(Value(line, "p50_ms").c_str(), nullptr);
          f.p99_ms = std::strtod(Value(line, "p99_ms").c_str(), nullptr);
          const std::string t = Value(line, "tput");
          for (size_t at = 0; at < t.size();) {
            const size_t comma = std::min(t.find(',', at), t.size());
            const std::string item = t.substr(at, comma - at);
            const size_t colon = item.find(':');
            if (colon != std::string::npos) {
              f.tput[std::strtoll(item.c_str(), nullptr, 10)] =
                  std::strtod(item.c_str() + colon + 1, nullptr);
            }
            at = comma + 1;
          }
          e.rounds.push_back(f);
        }
      }
    }
    if (!done) {
      anchor_up = false;
      why =
          "the anchor script stopped in round " + std::to_string(r) + "; its log:\n" + LogTail(log);
      anchors.clear();
    }
  }
  proc.Close();

  // Table: medians over the rounds.
  const char* unit = resnet ? "img/s" : "samples/s";
  std::printf(
      "bench-infer: %s (%s), executor %s, %s, %d threads, %d rounds (+1 warm-up) of: "
      "bs 1 x %d, bs %s x %d\n",
      o.model.c_str(),
      onnx_file ? ShapeToString(g.inputs[0].shape).c_str()
      : resnet  ? ("3x" + std::to_string(o.image) + "x" + std::to_string(o.image)).c_str()
                : "784-128-10",
      device.c_str(), o.precision.c_str(), o.threads, o.rounds, o.iters,
      [&] {
        std::string s;
        for (int64_t b : batches) s += (s.empty() ? "" : ",") + std::to_string(b);
        return s;
      }()
          .c_str(),
      o.large_iters);
  std::printf("%-22s %11s %11s", "what (median/round)", "bs1 p50 ms", "bs1 p99 ms");
  for (int64_t b : batches) std::printf(" %14s", ("bs" + std::to_string(b) + " " + unit).c_str());
  std::printf("\n");
  auto median_of = [](const Engine& e, auto get) {
    std::vector<double> v;
    for (const Figures& f : e.rounds) v.push_back(get(f));
    return SpreadOf(v).median;
  };
  auto tput_of = [](const Figures& f, int64_t b) {
    const auto it = f.tput.find(b);
    return it == f.tput.end() ? NAN : it->second;
  };
  auto print_row = [&](const Engine& e) {
    std::printf("%-22s %11s %11s", e.name.c_str(),
                Fixed(median_of(e, [](const Figures& f) { return f.p50_ms; }), 4).c_str(),
                Fixed(median_of(e, [](const Figures& f) { return f.p99_ms; }), 4).c_str());
    for (int64_t b : batches) {
      std::printf(" %14s",
                  Fixed(median_of(e, [&](const Figures& f) { return tput_of(f, b); }), 1).c_str());
    }
    std::printf("\n");
  };
  print_row(shoal_engine);
  for (const Engine& e : anchors) print_row(e);
  std::printf("notes:\n  %s: %s\n", shoal_engine.name.c_str(), shoal_engine.note.c_str());
  for (const Engine& e : anchors) std::printf("  %s: %s\n", e.name.c_str(), e.note.c_str());
  for (const auto& [name, reason] : skipped) {
    std::printf("  %s: not measured: %s\n", name.c_str(), reason.c_str());
  }
  if (anchors.empty()) std::printf("  anchor: not measured: %s\n", why.c_str());

  // Ratios per round against each anchor: min / median / max.
  std::printf(
      "ratios per round, min / median / max (higher is better: latency = anchor p50 / "
      "shoal p50, throughput = shoal / anchor):\n");
  const Engine* ort = nullptr;
  for (const Engine& e : anchors) {
    if (e.name == "onnxruntime") ort = &e;
  }
  std::map<std::string, double> result_parts;  // of the RESULT's anchor
  double best_fallback = NAN;
  for (const Engine& e : anchors) {
    const size_t n = std::min(e.rounds.size(), shoal_engine.rounds.size());
    auto spread = [&](auto ratio) {
      std::vector<double> v;
      for (size_t i = 0; i < n; ++i) v.push_back(ratio(shoal_engine.rounds[i], e.rounds[i]));
      return SpreadOf(v);
    };
    auto show = [](const shoal::bench::Spread& s) {
      return Fixed(s.min, 3) + " / " + Fixed(s.median, 3) + " / " + Fixed(s.max, 3);
    };
    std::vector<std::pair<std::string, shoal::bench::Spread>> parts;
    parts.emplace_back("latency bs1", spread([](const Figures& s, const Figures& a) {
                         return a.p50_ms / s.p50_ms;
                       }));
    for (int64_t b : batches) {
      parts.emplace_back("throughput bs" + std::to_string(b),
                         spread([&](const Figures& s, const Figures& a) {
                           return tput_of(s, b) / tput_of(a, b);
                         }));
    }
    std::printf("  vs %-16s", e.name.c_str());
    double worst = NAN;
    for (const auto& [what, s] : parts) {
      if (std::isnan(s.median)) continue;
      std::printf("  %s %s;", what.c_str(), show(s).c_str());
      if (!(s.median >= worst)) worst = s.median;
      if (&e == ort) result_parts[what] = s.median;
    }
    std::printf("\n");
    // Without onnxruntime: the best anchor, i.e. the one Shoal compares worst with.
    if (!std::isnan(worst) && !(worst >= best_fallback)) best_fallback = worst;
  }
  double result = NAN;
  if (ort != nullptr && !result_parts.empty()) {
    bool met = true;
    for (const auto& [what, r] : result_parts) {
      if (!(r >= 1.0)) met = false;
      if (!(r >= result)) result = r;
    }
    std::printf(
        "target vs onnxruntime (median ratios >= 1.0: throughput >= 1.0 x, bs1 latency "
        "<= 1.0 x):");
    for (const auto& [what, r] : result_parts) {
      std::printf(" %s %s (%s);", what.c_str(), Fixed(r, 3).c_str(), r >= 1.0 ? "met" : "MISSED");
    }
    std::printf(" overall %s\n", met ? "met" : "MISSED");
  } else if (!std::isnan(best_fallback)) {
    result = best_fallback;
    std::printf("onnxruntime not measured: RESULT is against the best anchor\n");
  } else if (!shoal_unavailable.empty()) {
    std::printf("shoal did not run (%s): no ratio\n", shoal_unavailable.c_str());
  } else {
    std::printf("no anchor measured: the ratio is against nothing\n");
  }
  std::printf("RESULT infer ratio=%.3f\n", result);
  std::error_code ec;
  if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  return 0;
}
