// bench-round: 64 ResNet-18-sized updates (11.69 M float32 parameters, 46.8 MB each) through
// the whole path — HTTP -> the job's pool -> leaf aggregator instances folding eagerly -> the
// top (coordinator) adding the leaves' partial sums -> FedAvg's step -> checkpoint -> committed
// version — flat (one leaf) and hierarchical (up to four leaves). The figure is the time from
// the last update byte written by the senders to the committed model; the anchor is the
// bandwidth lower bound for reading every update once, bytes / STREAM-like triad bandwidth
// (all threads, measured in the same run). Lower is better.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "shoal/model/architectures.h"
#include "shoal/model/update_format.h"
#include "shoal/v1/fl.pb.h"
#include "shoald_fixture.h"
#include "update_sender.h"

using namespace shoal;
using namespace shoal::testing;
using shoal::bench::Now;
using Json = nlohmann::json;

namespace {

constexpr uint64_t kHidden = 14704;  // 784-14704-10 MLP: 11,689,690 parameters

// a = b + s * c over `threads` threads; GB/s counts the 3 arrays' bytes (STREAM's convention).
double TriadGBps(size_t n, unsigned threads) {
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 3.0f);
  double best = 1e9;
  for (int rep = 0; rep < 7; ++rep) {
    const double t0 = Now();
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        const size_t lo = n * t / threads, hi = n * (t + 1) / threads;
        for (size_t i = lo; i < hi; ++i) a[i] = b[i] + 3.0f * c[i];
      });
    }
    for (auto& t : ts) t.join();
    best = std::min(best, Now() - t0);
  }
  return 3.0 * 4.0 * static_cast<double>(n) / best / 1e9;
}

struct RoundResult {
  int leaves = 0;
  double receive_s = 0;  // first byte written .. last byte written
  double tail_s = 0;     // last byte written .. committed version seen (second round)
  double cold_tail_s = 0;  // the same in the first round
  int leaves_used = 0;
  int failures = 0;
  uint32_t counted = 0;
};

RoundResult RunRound(int leaves, int updates, int senders, const std::vector<std::byte>& area,
                     const v1::UpdateHeader& header) {
  RoundResult res;
  res.leaves = leaves;
  Shoald shoald;
  Shoald::Options opt;
  const uint64_t bytes = area.size() + 4096;
  opt.pool_bytes = bytes * (updates + 2 * leaves + 8);
  opt.max_body_bytes = uint64_t{128} << 20;
  if (!shoald.Start(opt)) {
    std::fprintf(stderr, "shoald did not start:\n%s", shoald.Log().c_str());
    res.failures = updates;
    return res;
  }
  const std::string job = "round";
  // At most `senders` updates are in flight: one leaf takes them all (flat), or each of the
  // leaves takes its share and the instance manager starts more as they queue (hierarchical).
  const int fan_in = std::max(1, (senders + leaves - 1) / leaves);
  auto d = shoald.Deploy("apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + job +
                         "\nspec:\n  algorithm: {name: fedavg}\n  model: {architecture: mlp, "
                         "hidden: " + std::to_string(kHidden) + "}\n  clients: {expected: " +
                         std::to_string(updates) + "}\n  stop: {rounds: 2}\n"
                         "  aggregation: {maxFanIn: " + std::to_string(fan_in) +
                         ", maxLeaves: " + std::to_string(leaves) + "}\n");
  if (d.exit_code != 0) {
    std::fprintf(stderr, "deploy: %s\n", d.err.c_str());
    res.failures = updates;
    return res;
  }
  shoald.WaitReady("fl." + job, 1, 30000);
  std::vector<std::pair<std::string, std::string>> ids;  // client id, token
  for (int k = 0; k < updates; ++k) {
    auto r = shoald.Api("POST", "/v1/jobs/" + job + "/join", "{}",
                  {"Content-Type: application/json"});
    Json j = Json::parse(r.body, nullptr, false);
    ids.emplace_back(j.value("client_id", ""), j.value("token", ""));
  }
  // Two rounds: the first starts the leaves it needs and touches the pool's pages; the second
  // is the figure (a job's steady state).
  for (int round = 0; round < 2; ++round) {
    // Each client's prefix (magic, header, padding): the template header with its client id,
    // token and base version; the tensor table's offsets are relative to the tensor area,
    // which all share.
    std::vector<std::string> prefixes;
    for (int k = 0; k < updates; ++k) {
      v1::UpdateHeader h = header;
      h.set_job(job);
      h.set_client_id(ids[k].first);
      h.set_token(ids[k].second);
      h.set_num_samples(100 + k);
      h.set_base_version(round);
      const std::string hb = h.SerializeAsString();
      const uint32_t hlen = static_cast<uint32_t>(hb.size());
      std::string prefix(model::TensorAreaOffset(hlen), '\0');
      std::memcpy(prefix.data(), model::kUpdateMagic, 4);
      std::memcpy(prefix.data() + 4, &hlen, 4);
      std::memcpy(prefix.data() + 8, hb.data(), hb.size());
      prefixes.push_back(std::move(prefix));
    }
    std::vector<double> last_write(senders, 0);
    std::atomic<int> failures{0};
    const double t0 = Now();
    std::vector<std::thread> threads;
    const std::string auth = shoald.AuthHeader();
    for (int s = 0; s < senders; ++s) {
      threads.emplace_back([&, s] {
        int fd = shoal::bench::ConnectLoopback(shoald.port());
        for (int k = s; k < updates; k += senders) {
          const std::string head = shoal::bench::PostHead("/v1/jobs/" + job + "/updates",
                                                          prefixes[k].size() + area.size(), auth);
          shoal::bench::WriteAll(fd, {{const_cast<char*>(head.data()), head.size()},
                                      {const_cast<char*>(prefixes[k].data()), prefixes[k].size()},
                                      {const_cast<std::byte*>(area.data()), area.size()}});
          last_write[s] = Now();
          if (shoal::bench::ReadResponse(fd) != 202) ++failures;
        }
        close(fd);
      });
    }
    // Poll for the committed version while the senders run.
    double committed = 0;
    uint32_t counted = 0;
    for (;;) {
      auto r = shoald.Api("GET", "/v1/jobs/" + job);
      Json st = Json::parse(r.body, nullptr, false);
      if (st.value("version", 0) >= round + 1) {
        committed = Now();
        counted = st["versions"][round + 1].value("updates", 0u);
        break;
      }
      if (Now() - t0 > 300) break;
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    for (auto& t : threads) t.join();
    const double last = *std::max_element(last_write.begin(), last_write.end());
    res.receive_s = last - t0;
    if (round == 0) res.cold_tail_s = committed - last;
    res.tail_s = committed - last;
    res.counted = counted;
    res.failures += failures;
    if (committed == 0) res.failures = updates;
    // How many leaves' partial sums the top added (from the commit's log line).
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::string log = shoald.Log();
    const auto at = log.rfind(" leaf partial sum(s)");
    if (at != std::string::npos) {
      res.leaves_used = std::atoi(log.c_str() + log.rfind(' ', at - 1) + 1);
    }
  }
  if (std::getenv("SHOAL_BENCH_LOG")) std::fprintf(stderr, "%s", shoald.Log().c_str());
  shoald.Stop();
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  int updates = 64, senders = 8;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--updates") updates = std::atoi(argv[++i]);
    if (std::string(argv[i]) == "--senders") senders = std::atoi(argv[++i]);
  }
  const model::ModelSpec spec = model::MlpSpec(784, {kHidden}, 10);
  const size_t n = spec.num_params();
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  const double triad = TriadGBps(n, threads);
  model::Model m = model::InitModel(spec, 1);
  std::vector<std::byte> area;
  v1::UpdateHeader header;
  {
    model::UpdateMeta meta;
    meta.job = "round";
    meta.client_id = "c0";
    meta.token = "x";
    meta.num_samples = 1;
    auto body = model::EncodeUpdate(meta, m, model::DType::kF32);
    uint32_t hlen;
    std::memcpy(&hlen, body->data() + 4, 4);
    header.ParseFromArray(body->data() + 8, static_cast<int>(hlen));
    area.assign(body->begin() + static_cast<ptrdiff_t>(model::TensorAreaOffset(hlen)), body->end());
  }
  const double total_bytes = static_cast<double>(area.size()) * updates;
  const double bound = total_bytes / (triad * 1e9);
  std::vector<RoundResult> results;
  for (int leaves : {1, 4}) {
    std::fprintf(stderr, "bench-round: %d updates, %d leaf instance(s) at most...\n", updates, leaves);
    results.push_back(RunRound(leaves, updates, senders, area, header));
  }
  std::printf("bench-round: %d updates of %zu f32 parameters (%.1f MB each, %.2f GB in all) over "
              "HTTP from %d connections, FedAvg, one round; triad %.2f GB/s on %u threads, bound "
              "= bytes / triad = %.1f ms; lower is better\n",
              updates, n, static_cast<double>(area.size()) / 1e6, total_bytes / 1e9, senders,
              triad, threads, bound * 1e3);
  std::printf("%-26s %11s %19s %12s %16s %8s %9s\n", "tree", "receive ms",
              "last byte->commit", "ratio/bound", "1st round tail", "counted", "failures");
  for (const auto& r : results) {
    std::printf("%-26s %11.1f %16.1f ms %12.3f %13.1f ms %8u %9d\n",
                (r.leaves == 1 ? std::string("flat (1 leaf)")
                               : "hierarchical (" + std::to_string(r.leaves_used) + " leaves)")
                    .c_str(), r.receive_s * 1e3,
                r.tail_s * 1e3, r.tail_s / bound, r.cold_tail_s * 1e3, r.counted, r.failures);
  }
  const RoundResult& h = results.back();
  std::printf("RESULT round ratio=%.3f\n", h.tail_s / bound);
  return h.failures == 0 && results.front().failures == 0 ? 0 : 1;
}
