// bench-llm-autoscale: autoscaling a language model on a BurstGPT-shaped stream, live. One seeded
// trace (burstgpt_trace.h: Gamma-spaced bursts of Zipf size, Zipf prompt and response lengths
// scaled onto the 128-byte context) is replayed open-loop against a real shoald serving the lm
// function (spec.inference.source.lm, streamed OpenAI completions), once per policy, a fresh
// shoald each time, same arrivals and lengths:
//   kpa          Knative's KPA with its defaults on requests in flight (the anchor)
//   kpa-tokens   KPA on tokens in flight (metric tokensInFlight, target --token-target)
//   learned      the learned policy on tokens in flight (the same target)
// Time runs 10x faster than in bench-autoscale, as in bench-autoscale-live: KPA's 60 s stable
// window is 6 s, the keep-alive minute 6 s, decisions every 200 ms; the learned policy reads its
// table with timeScale 0.1. Per policy: requests, failed, instances started (cold starts),
// requests that waited for one, instance-seconds (shoald's own account), TTFT p50/p99 (from the
// request's due time to its first streamed event, so queueing counts) and tokens/s (completion
// tokens over the replay's length). Ratios are policy / kpa in the same run; lower is better.
// RESULT llm-autoscale ratio = learned / kpa instance-seconds (median over runs).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "bench_shoald.h"
#include "burstgpt_trace.h"
#include "lm_base.h"
#include "run_stats.h"
#include "sse_stream.h"
#include "tests/support/shoald_fixture.h"
#include "trace_replay.h"

using namespace shoal::testing;
using shoal::bench::LmRequest;
using shoal::bench::Percentile;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

namespace {

struct Settings {
  std::string base;
  int concurrency = 8;  // sequences per instance (the engine's batch)
  int max_scale = 4;
  double token_target = 256;
};

struct Row {
  std::string policy;
  uint64_t requests = 0, failed = 0, starts = 0, cold = 0;
  uint64_t token_decisions = 0, peak_tokens = 0;  // decisions that saw tokens in flight
  double inst_s = 0, ttft_p50 = 0, ttft_p99 = 0, tokens_per_s = 0;
};

std::string Manifest(const Settings& s, const std::string& policy) {
  std::string m =
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: lm}\nspec:\n"
      "  handler: inference\n  concurrency: " +
      std::to_string(s.concurrency) +
      "\n  keepAlive: 6s\n  inference:\n    threads: 1\n    maxBatchSize: " +
      std::to_string(s.concurrency) + "\n    source:\n      lm: {base: " + s.base +
      "}\n  autoscaling:\n    maxScale: " + std::to_string(s.max_scale) + "\n";
  const std::string tokens = "    metric: tokensInFlight\n    target: " +
                             std::to_string(static_cast<int>(s.token_target)) + "\n";
  if (policy == "kpa") {
    m += "    policy: kpa\n    params: {stableWindow: 6s, panicWindow: 600ms, scaleToZeroGrace: "
         "3s}\n";
  } else if (policy == "kpa-tokens") {
    m += "    policy: kpa\n" + tokens +
         "    params: {stableWindow: 6s, panicWindow: 600ms, scaleToZeroGrace: 3s}\n";
  } else {
    m += "    policy: learned\n" + tokens +
         "    params: {scaleDownDelay: 3s, excessKeepAlive: 1s, timeScale: 0.1}\n";
  }
  return m;
}

bool RunPolicy(const Settings& s, const std::string& policy, const std::vector<LmRequest>& reqs,
               double seconds, Row* row) {
  Shoald shoald;
  Shoald::Options options;
  options.extra_yaml = "autoscale_interval_ms: 200\n";
  if (!shoal::bench::StartShoald(shoald, options)) return false;
  auto d = shoald.Deploy(Manifest(s, policy));
  if (d.exit_code != 0) {
    std::fprintf(stderr, "deploy (%s) failed: %s\n", policy.c_str(), d.err.c_str());
    return false;
  }
  static const std::string kText =
      "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
      "age of foolishness, it was the epoch of belief, it was the epoch of incredulity. ";
  std::vector<shoal::bench::Answer> out(reqs.size());
  std::vector<double> ttft(reqs.size(), 0);
  shoal::bench::ReplayTrace(
      reqs.size(), seconds, policy, 48, [&](size_t i) { return reqs[i].t; },
      [&](size_t i, Clock::time_point due) {
        const LmRequest& r = reqs[i];
        const Json body = {{"model", "lm"},
                           {"prompt", kText.substr(i % 64, static_cast<size_t>(r.prompt_bytes))},
                           {"max_tokens", r.max_tokens},
                           {"temperature", 0},
                           {"stream", true},
                           {"stream_options", {{"include_usage", true}}}};
        const auto sent = Clock::now();
        out[i] = shoal::bench::Stream(shoald.port(), "/fn/lm/v1/completions", body.dump());
        ttft[i] =
            std::chrono::duration<double, std::milli>(sent - due).count() + out[i].ttft_s * 1e3;
      });

  auto list = Json::parse(shoald.Api("GET", "/v1/functions").body, nullptr, false);
  Json st = Json::object();
  for (const Json& f : list.value("functions", Json::array())) {
    if (f.value("name", "") == "lm") st = f.value("status", Json::object());
  }
  row->policy = policy;
  std::vector<double> lat;
  double tokens = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    ++row->requests;
    if (!out[i].ok) {
      ++row->failed;
      continue;
    }
    lat.push_back(ttft[i]);
    tokens += out[i].completion_tokens;
  }
  // What shoald's decisions saw of the instances' load reports (their log lines name the
  // tokens in flight when there are any).
  const std::string log = shoald.Log();
  for (size_t at = log.find(" tokens in flight"); at != std::string::npos;
       at = log.find(" tokens in flight", at + 1)) {
    size_t start = at;
    while (start > 0 && std::isdigit(static_cast<unsigned char>(log[start - 1]))) --start;
    if (start < at) {
      ++row->token_decisions;
      row->peak_tokens =
          std::max<uint64_t>(row->peak_tokens, std::stoull(log.substr(start, at - start)));
    }
  }
  row->starts = st.value("cold_starts", 0ull);
  row->cold = st.value("cold_requests", 0ull);
  row->inst_s = st.value("instance_seconds", 0.0);
  row->ttft_p50 = Percentile(lat, 0.5);
  row->ttft_p99 = Percentile(lat, 0.99);
  row->tokens_per_s = tokens / seconds;
  return true;
}

std::vector<double> Stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return {v.front(), med, v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 60, burst_gap = 2, within_gap = 0.15;
  uint64_t seed = 42;
  int runs = 3;
  Settings s;
  shoal::bench::Args args(
      "bench-llm-autoscale [--seconds S] [--seed S] [--runs N] [--burst-gap S] [--within-gap S] "
      "[--token-target T] [--concurrency C] [--max-scale M] [--base model.safetensors]");
  args.Option("--seconds", &seconds)
      .Option("--seed", &seed)
      .Option("--runs", &runs)
      .Option("--burst-gap", &burst_gap)
      .Option("--within-gap", &within_gap)
      .Option("--token-target", &s.token_target)
      .Option("--concurrency", &s.concurrency)
      .Option("--max-scale", &s.max_scale)
      .Option("--base", &s.base);
  if (!args.Parse(argc, argv)) return 2;
  if (runs < 1 || !(seconds > 0) || !(s.token_target > 0)) {
    std::fprintf(stderr, "bench-llm-autoscale: --runs >= 1, --seconds > 0, --token-target > 0\n");
    return 1;
  }
  const std::string out_dir = std::filesystem::absolute("bench-llm-autoscale").string();
  std::filesystem::create_directories(out_dir);
  std::string model_what;
  if (!shoal::bench::PrepareLmBase(out_dir, {}, &s.base, &model_what)) return 1;
  shoal::bench::BurstGptShape shape;
  shape.burst_gap_s = burst_gap;
  shape.within_gap_s = within_gap;
  const std::vector<LmRequest> reqs = shoal::bench::BurstGptTrace(shape, seconds, seed);
  double prompt = 0, response = 0;
  for (const LmRequest& r : reqs) prompt += r.prompt_bytes, response += r.max_tokens;
  std::printf(
      "bench-llm-autoscale: real shoald, %s, seed %llu, %.0f s per policy (time 10x faster than "
      "bench-autoscale), %zu requests (BurstGPT-shaped: bursts every %.1f s on average, requests "
      "%.2f s apart in a burst; mean prompt %.1f bytes, mean max_tokens %.1f), concurrency %d per "
      "instance, max %d instances, token target %.0f per instance, %d run(s)\n",
      model_what.c_str(), static_cast<unsigned long long>(seed), seconds, reqs.size(), burst_gap,
      within_gap, prompt / std::max<size_t>(1, reqs.size()),
      response / std::max<size_t>(1, reqs.size()), s.concurrency, s.max_scale, s.token_target,
      runs);
  std::printf("ratios x* are policy / kpa on the same replay in the same run; lower is better\n");
  auto ratio = [](double a, double b) { return b > 0 ? a / b : (a > 0 ? INFINITY : 1.0); };
  std::vector<double> l_inst, l_cold, l_p99, l_p50, k_inst, k_cold, k_p99;
  uint64_t failed = 0;
  for (int run = 0; run < runs; ++run) {
    std::vector<Row> rows;
    for (const char* policy : {"kpa", "kpa-tokens", "learned"}) {
      Row r;
      if (!RunPolicy(s, policy, reqs, seconds, &r)) return 1;
      rows.push_back(r);
      failed += r.failed;
    }
    const Row& base = rows[0];
    std::printf("\nrun %d of %d\n", run + 1, runs);
    std::printf("%-11s %8s %6s %6s %5s %8s %9s %9s %7s %6s %6s %7s\n", "policy", "requests",
                "failed", "starts", "cold", "inst-s", "TTFT p50", "TTFT p99", "tok/s", "xcold",
                "xinst", "xp99");
    for (const Row& r : rows) {
      const double xc = ratio(std::max<double>(1, r.cold), std::max<double>(1, base.cold));
      const double xi = ratio(r.inst_s, base.inst_s), xp = ratio(r.ttft_p99, base.ttft_p99);
      std::printf("%-11s %8llu %6llu %6llu %5llu %8.1f %9.1f %9.1f %7.1f %6.2f %6.2f %7.2f\n",
                  r.policy.c_str(), static_cast<unsigned long long>(r.requests),
                  static_cast<unsigned long long>(r.failed),
                  static_cast<unsigned long long>(r.starts),
                  static_cast<unsigned long long>(r.cold), r.inst_s, r.ttft_p50, r.ttft_p99,
                  r.tokens_per_s, xc, xi, xp);
      std::printf("%-11s   (%llu decisions saw tokens in flight, the most %llu)\n", "",
                  static_cast<unsigned long long>(r.token_decisions),
                  static_cast<unsigned long long>(r.peak_tokens));
      if (r.policy == "learned") {
        l_cold.push_back(xc), l_inst.push_back(xi), l_p99.push_back(xp);
        l_p50.push_back(ratio(r.ttft_p50, base.ttft_p50));
      }
      if (r.policy == "kpa-tokens") k_cold.push_back(xc), k_inst.push_back(xi), k_p99.push_back(xp);
    }
    std::fflush(stdout);
  }
  const auto li = Stats(l_inst), lc = Stats(l_cold), lp = Stats(l_p99), l5 = Stats(l_p50),
             ki = Stats(k_inst), kc = Stats(k_cold), kp = Stats(k_p99);
  std::printf("\nover %d run(s), median [min, max]:\n", runs);
  std::printf(
      "  learned (tokens) / kpa: instance-seconds %.3fx [%.3f, %.3f], cold requests %.3fx "
      "[%.3f, %.3f], TTFT p50 %.3fx [%.3f, %.3f], TTFT p99 %.3fx [%.3f, %.3f]\n",
      li[1], li[0], li[2], lc[1], lc[0], lc[2], l5[1], l5[0], l5[2], lp[1], lp[0], lp[2]);
  std::printf(
      "  kpa-tokens / kpa: instance-seconds %.3fx [%.3f, %.3f], cold requests %.3fx [%.3f, %.3f], "
      "TTFT p99 %.3fx [%.3f, %.3f]\n",
      ki[1], ki[0], ki[2], kc[1], kc[0], kc[2], kp[1], kp[0], kp[2]);
  std::printf("  failed requests: %llu\n", static_cast<unsigned long long>(failed));
  std::printf("RESULT llm-autoscale-cold ratio=%.3f\n", lc[1]);
  std::printf("RESULT llm-autoscale-p99 ratio=%.3f\n", lp[1]);
  std::printf("RESULT llm-autoscale ratio=%.3f\n", li[1]);
  return failed == 0 ? 0 : 1;
}
