// bench-llm: serving a language model with streamed answers. A real shoald serves a shoal-gpt
// model as an lm inference function (spec.inference.source.lm: the native decoder, continuous
// batching, SSE through the gateway); the anchor is the same weights as a transformers
// GPT2LMHeadModel running model.generate behind a minimal threaded HTTP server
// (bench/llm_anchor.py; it checks its greedy tokens equal tools/lm/model.py's first), each
// request its own generate, torch on the same number of threads as Shoal's engine. The same
// client (one blocking connection per stream, bench-side C++) sends the same requests to both:
// `streams` concurrent streams, each `per_stream` requests one after the other, greedy,
// `max_tokens` new tokens, prompts of `prompt_bytes` bytes (tokens are bytes).
// Figures per stream count, the median over runs (runs interleaved Shoal / anchor):
//   decode tokens/s   completion tokens of all requests / the run's wall time
//   TTFT              time to the first event (median over the run's requests)
//   prefill tokens/s  prompt tokens / TTFT (median over requests)
// RESULT llm ratio = Shoal's / the anchor's decode tokens/s at the most streams.
// The model: --base, else the trained one (scripts/lm-path) when it exists, else a random one of
// --d-model/--n-layer/--n-head/--n-ctx written by tools/lm/model.py --random.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "bench_shoald.h"
#include "lm_base.h"
#include "peer_process.h"
#include "project_python.h"
#include "run_stats.h"
#include "sse_stream.h"
#include "tests/support/shoald_fixture.h"

using namespace shoal::testing;
using shoal::bench::Median;
using shoal::bench::SpreadOf;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;
using shoal::bench::Answer;
using shoal::bench::Stream;

namespace {

const std::string kSource = SHOAL_SOURCE_DIR;

struct RunFigures {
  double decode_tps = NAN;
  double ttft_ms = NAN;
  double prefill_tps = NAN;
  int failed = 0;
};

RunFigures RunStreams(uint16_t port, const std::string& path, const std::string& model, int streams,
                      int per_stream, int max_tokens, int prompt_bytes) {
  static const std::string kText =
      "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
      "age of foolishness, it was the epoch of belief, it was the epoch of incredulity. ";
  std::vector<Answer> answers(static_cast<size_t>(streams * per_stream));
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int s = 0; s < streams; ++s) {
    threads.emplace_back([&, s] {
      for (int k = 0; k < per_stream; ++k) {
        const size_t i = static_cast<size_t>(s * per_stream + k);
        std::string prompt;
        for (size_t j = i * 7; prompt.size() < static_cast<size_t>(prompt_bytes); ++j) {
          prompt.push_back(kText[j % kText.size()]);
        }
        const Json body = {
            {"model", model},   {"prompt", prompt}, {"max_tokens", max_tokens},
            {"temperature", 0}, {"stream", true},   {"stream_options", {{"include_usage", true}}}};
        answers[i] = Stream(port, path, body.dump());
      }
    });
  }
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  RunFigures f;
  double tokens = 0;
  std::vector<double> ttft, prefill;
  for (const Answer& a : answers) {
    if (!a.ok) {
      ++f.failed;
      continue;
    }
    tokens += a.completion_tokens;
    ttft.push_back(a.ttft_s * 1e3);
    prefill.push_back(a.prompt_tokens / a.ttft_s);
  }
  if (f.failed == 0) {
    f.decode_tps = tokens / wall;
    f.ttft_ms = Median(ttft);
    f.prefill_tps = Median(prefill);
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 3, threads = 2, per_stream = 2, max_tokens = 60, prompt_bytes = 64;
  int d_model = 192, n_layer = 4, n_head = 6, n_ctx = 128;  // the trained model's sizes
  std::string base;
  std::string precision = "fp32";
  shoal::bench::Args args(
      "bench-llm [--runs N] [--threads T] [--per-stream K] [--max-tokens M] [--prompt-bytes P] "
      "[--precision fp32|int8] [--base model.safetensors | --d-model D --n-layer L --n-head H "
      "--n-ctx C]");
  args.Option("--runs", &runs)
      .Option("--threads", &threads)
      .Option("--per-stream", &per_stream)
      .Option("--max-tokens", &max_tokens)
      .Option("--prompt-bytes", &prompt_bytes)
      .Option("--base", &base)
      .Option("--precision", &precision)
      .Option("--d-model", &d_model)
      .Option("--n-layer", &n_layer)
      .Option("--n-head", &n_head)
      .Option("--n-ctx", &n_ctx);
  if (!args.Parse(argc, argv)) return 2;
  const std::vector<int> stream_counts = {1, 8, 32};
  const std::string out_dir = std::filesystem::absolute("bench-llm").string();
  std::filesystem::create_directories(out_dir);
  std::string model_what;
  if (!shoal::bench::PrepareLmBase(out_dir, {d_model, n_layer, n_head, n_ctx}, &base, &model_what))
    return 1;
  std::fprintf(stderr, "bench-llm: model %s: %s\n", base.c_str(), model_what.c_str());

  Shoald shoald;
  if (!shoal::bench::StartShoald(shoald)) return 1;
  auto d = shoald.Deploy(
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: lm}\nspec:\n"
      "  handler: inference\n  concurrency: 64\n  scale: {min: 1, max: 1}\n  inference:\n"
      "    threads: " +
      std::to_string(threads) + "\n    maxBatchSize: 64\n    precision: " + precision +
      "\n    source:\n      lm: {base: " + base + "}\n");
  if (d.exit_code != 0 || !shoald.WaitReady("lm", 1, 60000)) {
    std::fprintf(stderr, "bench-llm: deploy failed: %s\n%s\n", d.err.c_str(), shoald.Log().c_str());
    return 1;
  }
  const uint16_t anchor_port = FreePort();
  const std::string anchor_cmd = "cd " + kSource + " && exec " + shoal::bench::ProjectPython() +
                                 " bench/llm_anchor.py --base " + base + " --port " +
                                 std::to_string(anchor_port) + " --threads " +
                                 std::to_string(threads);
  std::fprintf(stderr, "bench-llm: %s\n", anchor_cmd.c_str());
  int pipe_fd[2];
  if (pipe(pipe_fd) != 0) return 1;
  const pid_t anchor = fork();
  if (anchor == 0) {
    setpgid(0, 0);
    dup2(pipe_fd[1], 1);
    close(pipe_fd[0]);
    execl("/bin/sh", "sh", "-c", anchor_cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(pipe_fd[1]);
  std::string line;
  char ch;
  while (read(pipe_fd[0], &ch, 1) == 1 && ch != '\n') line.push_back(ch);
  const Json ready = Json::parse(line, nullptr, false);
  auto stop_anchor = [&] {
    kill(-anchor, SIGTERM);
    waitpid(anchor, nullptr, 0);
  };
  if (!ready.is_object() || !ready.contains("ready")) {
    std::fprintf(stderr, "bench-llm: the anchor did not start: %s\n", line.c_str());
    stop_anchor();
    return 1;
  }
  std::fprintf(stderr, "bench-llm: anchor ready, greedy tokens equal the reference's: %s\n",
               ready.value("probe_equal", false) ? "yes" : "NO");

  struct Figures {
    std::vector<double> shoal[3], anchor[3];  // decode, ttft, prefill
  };
  std::map<int, Figures> by_streams;
  int failed = 0;
  for (int run = 0; run < runs; ++run) {
    for (int streams : stream_counts) {
      for (int who = 0; who < 2; ++who) {
        const RunFigures f = who == 0 ? RunStreams(shoald.port(), "/fn/lm/v1/completions", "lm",
                                                   streams, per_stream, max_tokens, prompt_bytes)
                                      : RunStreams(anchor_port, "/v1/completions", "lm", streams,
                                                   per_stream, max_tokens, prompt_bytes);
        failed += f.failed;
        auto& v = who == 0 ? by_streams[streams].shoal : by_streams[streams].anchor;
        v[0].push_back(f.decode_tps);
        v[1].push_back(f.ttft_ms);
        v[2].push_back(f.prefill_tps);
        std::fprintf(stderr,
                     "bench-llm: run %d, %d streams, %s: decode %.0f tok/s, TTFT %.1f ms, "
                     "prefill %.0f tok/s\n",
                     run + 1, streams, who == 0 ? "shoal" : "transformers", f.decode_tps, f.ttft_ms,
                     f.prefill_tps);
      }
    }
  }
  stop_anchor();
  std::printf(
      "bench-llm: %s, Shoal %s, %d threads each, %d requests per stream, %d-byte prompts, %d new "
      "tokens "
      "(greedy), %d runs interleaved; anchor: transformers GPT2LMHeadModel.generate behind a "
      "threaded HTTP server (bench/llm_anchor.py)\n",
      model_what.c_str(), precision.c_str(), threads, per_stream, prompt_bytes, max_tokens, runs);
  std::printf("%-8s %-18s %12s %14s %8s %22s\n", "streams", "figure", "shoal", "transformers",
              "ratio", "ratio min/median/max");
  const char* names[3] = {"decode tokens/s", "TTFT ms", "prefill tokens/s"};
  double result = NAN;
  for (int streams : stream_counts) {
    const Figures& f = by_streams[streams];
    for (int k = 0; k < 3; ++k) {
      std::vector<double> ratios;
      for (size_t r = 0; r < f.shoal[k].size(); ++r) {
        // TTFT: lower is better, so the ratio is the anchor's over Shoal's.
        ratios.push_back(k == 1 ? f.anchor[k][r] / f.shoal[k][r] : f.shoal[k][r] / f.anchor[k][r]);
      }
      const auto s = SpreadOf(ratios);
      std::printf("%-8d %-18s %12.1f %14.1f %7.2fx %8.2f/%.2f/%.2f\n", streams, names[k],
                  Median(f.shoal[k]), Median(f.anchor[k]), s.median, s.min, s.median, s.max);
      if (k == 0 && streams == stream_counts.back()) result = s.median;
    }
  }
  std::printf("(TTFT's ratio is transformers' / Shoal's: above 1 means Shoal answers sooner)\n");
  if (failed) std::printf("bench-llm: %d requests failed\n", failed);
  std::printf("RESULT llm ratio=%.2f\n", result);
  return failed ? 1 : 0;
}
