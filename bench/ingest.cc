// bench-ingest: one 46.8 MB model update (11.69 M float32 parameters, ResNet-18-sized) uploaded
// over HTTP into the job's shared-memory pool through the real gateway, against a plain loopback
// TCP socket moving the same bytes (same request head, receiver reads into a pre-touched buffer
// and answers one small response) in the same run. Two HTTP paths: a function whose handler
// does nothing with the body (gateway -> pool -> instance -> response: the ingest itself), and
// the FL update route (also admitted by the coordinator and folded by a leaf before its 202).
// Times are the best of the repetitions (the machine is shared); higher GB/s is better. Beside
// the ratio to TCP, each path's time over the ingest's ("x ingest"): for the FL route that is
// issue 11's "the 202 within 1.3x of the bytes' arrival over HTTP into the pool". The whole
// measurement (fresh shoald, anchor) runs --runs times; the ratios' min/median/max follow, and
// the RESULT lines carry the medians.
//
//   bench-ingest [--reps N (7)] [--runs N (3)] [--pool dpdk|prefault] [--shoald PATH]
// --pool dpdk measures both HTTP paths again on a shoald with `pool: dpdk` (the pool in 2 MiB
// hugepages, 1024 of them reserved if missing, else the column says why it is skipped) and
// prints the DPDK column with its ratio to the Boost one (time Boost / time DPDK: > 1 is faster).
// --pool prefault does the same with a Boost pool that `pool_prefault: true` allocated and
// mapped whole at creation (no first-touch fault or page zeroing while a body arrives).
// --shoald runs another shoald (and the shoal-fn beside it), e.g. an earlier build's copy, for
// a before/after in the same conditions. --config adds a line to every shoald's config (e.g.
// "pool_warm_bytes: 0"), for a before/after of a setting with the same binaries.
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "run_stats.h"
#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/update_format.h"
#include "tcp_sink.h"
#include "tests/support/hugepages_for_test.h"
#include "tests/support/shoald_fixture.h"
#include "update_sender.h"

using namespace shoal;
using namespace shoal::testing;
using shoal::bench::Now;

namespace {

constexpr uint64_t kHidden = 14704;  // 784-14704-10 MLP: 11,689,690 parameters
std::string g_shoald;                // --shoald; empty: this build's
std::string g_config;                // --config: one more line of every shoald's config

// Seconds from the first byte written to the whole response read, best of `reps`.
template <typename Fn>
double Best(int reps, Fn&& once) {
  double best = 1e9;
  for (int i = 0; i < reps; ++i) best = std::min(best, once());
  return best;
}

struct Times {
  double http = 0, fl = 0;
  size_t body_bytes = 0;
  uint64_t params = 0;
  int bad = 0;
  bool ok = false;
};

// Both HTTP paths on a fresh shoald whose pools run on `pool` (boost|dpdk).
Times Measure(const std::string& pool, int reps, const std::vector<std::byte>** area_out,
              std::vector<std::string>* prefixes_out, const std::string& extra_yaml = {});

// One whole measurement: a fresh Boost shoald, the TCP anchor, and the dpdk shoald if asked.
struct RunFigures {
  Times boost, dpdk;
  double tcp = 0;
  std::string dpdk_skip;
};

RunFigures MeasureOnce(const std::string& also, int reps) {
  RunFigures f;
  const std::vector<std::byte>* area = nullptr;
  std::vector<std::string> prefixes;
  f.boost = Measure("boost", reps, &area, &prefixes);
  if (!f.boost.ok) return f;
  shoal::bench::TcpSink sink(f.boost.body_bytes);
  int tcp_fd = shoal::bench::ConnectLoopback(sink.port());
  f.tcp = Best(reps, [&] {
    const std::string head = shoal::bench::PostHead("/sink", f.boost.body_bytes);
    const double t0 = Now();
    shoal::bench::WriteAll(tcp_fd, {{const_cast<char*>(head.data()), head.size()},
                                    {const_cast<char*>(prefixes[0].data()), prefixes[0].size()},
                                    {const_cast<std::byte*>(area->data()), area->size()}});
    shoal::bench::ReadResponse(tcp_fd);
    return Now() - t0;
  });
  close(tcp_fd);
  if (also == "prefault") {
    f.dpdk = Measure("boost", reps, nullptr, nullptr, "pool_prefault: true\n");
    if (!f.dpdk.ok) f.dpdk_skip = "the pool_prefault shoald did not run (printed above)";
  }
  if (also == "dpdk") {
    const uint64_t pages = HugepagesFor(uint64_t{2} << 30);
    f.dpdk_skip = ShortOfHugepages(pages, "bench-ingest's dpdk shoald (one 2 GiB pool)");
    if (f.dpdk_skip.empty()) {
      f.dpdk = Measure("dpdk", reps, nullptr, nullptr);
      if (!f.dpdk.ok) f.dpdk_skip = "the dpdk shoald did not run (printed above)";
    }
  }
  return f;
}

void PrintSpread(const char* what, const std::vector<double>& v, const char* target) {
  const shoal::bench::Spread s = shoal::bench::SpreadOf(v);
  std::printf("%-44s %9.3f %9.3f %9.3f   %s\n", what, s.min, s.median, s.max, target);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 7, runs = 3;
  std::string also;
  shoal::bench::Args args(
      "bench-ingest [--reps N] [--runs N] [--pool dpdk|prefault] [--shoald PATH] "
      "[--config 'KEY: VALUE']");
  args.Option("--reps", &reps)
      .Option("--runs", &runs)
      .Option("--pool", &also)
      .Option("--shoald", &g_shoald)
      .Option("--config", &g_config);
  if (!args.Parse(argc, argv)) return 2;
  if (!g_config.empty()) {
    g_config += "\n";
    std::printf("every shoald's config also has: %s", g_config.c_str());
  }
  if (!also.empty() && also != "dpdk" && also != "prefault" && also != "boost") {
    std::fprintf(stderr,
                 "bench-ingest: --pool %s: want dpdk or prefault (boost is always measured)\n",
                 also.c_str());
    return 2;
  }
  if (reps < 1 || runs < 1) {
    std::fprintf(stderr, "bench-ingest: --reps and --runs must be >= 1\n");
    return 2;
  }
  // Per run: ingest = tcp / HTTP into the pool (higher is better); ingest_202 = the FL update's
  // 202 / HTTP into the pool (issue 11: <= 1.3, lower is better); the dpdk ratios if measured.
  std::vector<double> r_ingest, r_202, r_dpdk, r_dpdk_vs_boost, r_dpdk_202;
  int bad = 0;
  for (int run = 0; run < runs; ++run) {
    std::fprintf(stderr, "bench-ingest: run %d of %d...\n", run + 1, runs);
    const RunFigures f = MeasureOnce(also, reps);
    if (!f.boost.ok) return 1;
    const Times& boost = f.boost;
    const Times& dpdk = f.dpdk;
    bad += boost.bad + dpdk.bad;
    const double tcp = f.tcp;
    const double mb = static_cast<double>(boost.body_bytes) / 1e6;
    std::printf(
        "bench-ingest run %d/%d: one %.1f MB update (%llu parameters, f32), best of %d, "
        "loopback; higher GB/s is better; x ingest = time / HTTP into the pool (the 202's "
        "target: <= 1.3)\n",
        run + 1, runs, mb, static_cast<unsigned long long>(boost.params), reps);
    const bool with_dpdk = dpdk.ok;
    const std::string col = also == "prefault" ? "pref" : "dpdk";  // the second column's pool
    if (with_dpdk) {
      std::printf("%-44s %9s %9s %12s %10s %10s %9s %13s\n", "path", "ms", "GB/s", "ratio/tcp",
                  "x ingest", (col + " ms").c_str(), (col + " GB/s").c_str(),
                  ("boost/" + col).c_str());
    } else {
      std::printf("%-44s %9s %9s %12s %10s\n", "path", "ms", "GB/s", "ratio/tcp", "x ingest");
    }
    auto row = [&](const char* what, double s, double d) {
      std::printf("%-44s %9.2f %9.2f %12.3f %10.3f", what, s * 1e3, mb / 1e3 / s, tcp / s,
                  s / boost.http);
      if (with_dpdk && d > 0) std::printf(" %10.2f %9.2f %13.3f", d * 1e3, mb / 1e3 / d, s / d);
      std::printf("\n");
    };
    row("loopback TCP socket (anchor)", tcp, 0);
    row("HTTP -> gateway -> pool -> instance (ingest)", boost.http, dpdk.http);
    row("HTTP -> pool -> admitted + leaf fold -> 202", boost.fl, dpdk.fl);
    if (!f.dpdk_skip.empty()) {
      std::printf("%s: skipped: %s\n", col.c_str(), f.dpdk_skip.c_str());
    }
    r_ingest.push_back(tcp / boost.http);
    r_202.push_back(boost.fl / boost.http);
    if (with_dpdk) {
      r_dpdk.push_back(tcp / dpdk.http);
      r_dpdk_vs_boost.push_back(boost.http / dpdk.http);
      r_dpdk_202.push_back(dpdk.fl / dpdk.http);
    }
  }
  if (bad != 0) {
    // A failed update is timed as its error reply: no figure to carry. (A --shoald copy of a
    // build's bin without its lib/shoal/modules has no FL leaf: every update fails.)
    std::printf(
        "bench-ingest: %d request(s) did not succeed: no RESULT lines (with --shoald, copy the "
        "build's lib/shoal/modules beside its bin)\n",
        bad);
    return 1;
  }

  std::printf("over %d run(s), each a fresh shoald and anchor; RESULT lines carry the median\n",
              runs);
  std::printf("%-44s %9s %9s %9s   %s\n", "ratio", "min", "median", "max", "target");
  PrintSpread("ingest: tcp / HTTP into the pool", r_ingest, "higher is better");
  PrintSpread("ingest_202: the 202 / HTTP into the pool", r_202, "<= 1.3 (issue 11)");
  // The second pool's rows and RESULT names: ingest_dpdk* for --pool dpdk, ingest_prefault*
  // for --pool prefault.
  const std::string col = also == "prefault" ? "prefault" : "dpdk";
  if (!r_dpdk.empty()) {
    PrintSpread(("ingest_" + col + ": tcp / " + col + " HTTP into the pool").c_str(), r_dpdk,
                "higher is better");
    PrintSpread(("ingest_" + col + "_vs_boost: boost / " + col).c_str(), r_dpdk_vs_boost,
                ("> 1: " + col + " faster").c_str());
    PrintSpread((col + ": the 202 / HTTP into the pool").c_str(), r_dpdk_202, "<= 1.3 (issue 11)");
  }
  std::printf("RESULT ingest ratio=%.3f\n", shoal::bench::SpreadOf(r_ingest).median);
  // Only when every run measured the second pool, so that the medians pair the same runs.
  if (static_cast<int>(r_dpdk.size()) == runs) {
    std::printf("RESULT ingest_%s ratio=%.3f\n", col.c_str(),
                shoal::bench::SpreadOf(r_dpdk).median);
    std::printf("RESULT ingest_%s_vs_boost ratio=%.3f\n", col.c_str(),
                shoal::bench::SpreadOf(r_dpdk_vs_boost).median);
  }
  std::printf("RESULT ingest_202 ratio=%.3f\n", shoal::bench::SpreadOf(r_202).median);
  if (static_cast<int>(r_dpdk_202.size()) == runs) {
    std::printf("RESULT ingest_202_%s ratio=%.3f\n", col.c_str(),
                shoal::bench::SpreadOf(r_dpdk_202).median);
  }
  return 0;
}

namespace {

Times Measure(const std::string& pool, int reps, const std::vector<std::byte>** area_out,
              std::vector<std::string>* prefixes_out, const std::string& extra_yaml) {
  Times out;
  using Json = nlohmann::json;
  Shoald shoald;
  Shoald::Options opt;
  opt.pool = pool;
  opt.binary = g_shoald;
  opt.extra_yaml = extra_yaml + g_config;
  opt.pool_bytes = uint64_t{2} << 30;
  opt.max_body_bytes = uint64_t{128} << 20;
  if (!shoald.Start(opt)) {
    std::fprintf(stderr, "shoald (pool: %s) did not start:\n%s", pool.c_str(),
                 shoald.Log().c_str());
    return out;
  }
  auto d1 = shoald.Deploy(
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: sink\nspec:\n"
      "  handler: {builtin: sleep}\n  scale: {min: 1}\n");
  auto d2 = shoald.Deploy(
      "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: ingest\nspec:\n"
      "  algorithm: {name: fedavg}\n  model: {architecture: mlp, hidden: " +
      std::to_string(kHidden) +
      "}\n  clients: {expected: 1000}\n"
      "  aggregation: {maxFanIn: 1, maxLeaves: 1}\n");
  if (d1.exit_code != 0 || d2.exit_code != 0) {
    std::fprintf(stderr, "deploy: %s %s\n", d1.err.c_str(), d2.err.c_str());
    return out;
  }
  shoald.WaitReady("sink", 1);
  shoald.WaitReady("fl.ingest", 1, 30000);

  // One update per repetition (FedAvg takes one update per client per round). The tensor area
  // is the same for every update and every run (kept for the TCP anchor).
  static std::vector<std::byte> area;
  const model::ModelSpec spec = model::MlpSpec(784, {kHidden}, 10);
  model::Model m = model::InitModel(spec, 1);
  std::vector<std::string> prefixes;
  for (int i = 0; i < reps; ++i) {
    auto r = shoald.Api("POST", "/v1/jobs/ingest/join", "{}", {"Content-Type: application/json"});
    Json j = Json::parse(r.body, nullptr, false);
    model::UpdateMeta meta;
    meta.job = "ingest";
    meta.client_id = j.value("client_id", "");
    meta.token = j.value("token", "");
    meta.num_samples = 100;
    auto body = model::EncodeUpdate(meta, m, model::DType::kF32);
    if (!body.ok()) return out;
    uint32_t hlen;
    std::memcpy(&hlen, body->data() + 4, 4);
    const size_t a = model::TensorAreaOffset(hlen);
    prefixes.emplace_back(reinterpret_cast<const char*>(body->data()), a);
    if (area.empty()) area.assign(body->begin() + static_cast<ptrdiff_t>(a), body->end());
  }
  out.body_bytes = prefixes[0].size() + area.size();
  out.params = spec.num_params();

  auto send = [&](uint16_t port, const std::string& path, const std::string& prefix, int* status) {
    int fd = shoal::bench::ConnectLoopback(port);
    const std::string head =
        shoal::bench::PostHead(path, prefix.size() + area.size(), shoald.AuthHeader());
    const double t0 = Now();
    shoal::bench::WriteAll(fd, {{const_cast<char*>(head.data()), head.size()},
                                {const_cast<char*>(prefix.data()), prefix.size()},
                                {area.data(), area.size()}});
    *status = shoal::bench::ReadResponse(fd);
    const double t = Now() - t0;
    close(fd);
    return t;
  };
  out.http = Best(reps, [&] {
    int st = 0;
    const double t = send(shoald.port(), "/fn/sink?ms=0", prefixes[0], &st);
    out.bad += st != 200;
    return t;
  });
  int next = 0;
  out.fl = Best(reps, [&] {
    int st = 0;
    const double t = send(shoald.port(), "/v1/jobs/ingest/updates", prefixes[next++], &st);
    out.bad += st != 202;
    return t;
  });
  if (area_out != nullptr) *area_out = &area;
  if (prefixes_out != nullptr) *prefixes_out = prefixes;
  out.ok = true;
  return out;
}

}  // namespace
