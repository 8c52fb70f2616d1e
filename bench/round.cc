// bench-round: 64 ResNet-18-sized updates (11.69 M float32 parameters, 46.8 MB each) through
// the whole path — HTTP -> the job's pool -> leaf aggregator instances folding eagerly -> the
// top (coordinator) adding the leaves' partial sums -> FedAvg's step -> checkpoint -> committed
// version — flat (one leaf) and hierarchical (up to four leaves). The figure is the time from
// the first update byte written by the senders to the committed model (the fold overlaps the
// receive, so the round starts at the first byte). The bound is the larger of two lower bounds
// measured in the same run: the same bytes (same request heads and bodies) over the same number
// of plain loopback TCP connections into a receiver that does nothing with them (best of 3), and
// reading every update once at the machine's memory bandwidth (STREAM, bench/stream_bandwidth.h,
// all threads). Ratio = figure / bound; lower is better. Last byte -> commit (the tail after
// the senders finish) is a secondary column with its own bound (issue 11): 3 x the time to fold
// one update (read the update, read and write the sum: 12 B per f32 element) and to merge the
// leaves' partial sums (8 B per element per leaf) at the same STREAM bandwidth.
//
//   bench-round [--updates N (64)] [--senders C (8)] [--rounds R (3)] [--pool dpdk|prefault]
//               [--shoald PATH]
// The last of R rounds is the figure: by default the third, a job's steady state (the second's
// updates land in never-used pool memory, the third's on the first's pages). A CPU table follows:
// what the senders, shoald and its instances spent in the measured round (utime + stime) beside the
// anchor's CPU and the fold's at memory bandwidth, whose sum over the vCPUs is the floor on a
// machine the anchor keeps busy.
// --pool dpdk runs the rounds again on a shoald with `pool: dpdk` (hugepages); --pool prefault
// on a Boost pool that `pool_prefault: true` allocated and mapped whole at creation (no
// first-touch fault or page zeroing while the updates arrive); each prints its table with the
// ratio to the Boost rounds. --shoald runs another shoald (and the shoal-fn beside it), e.g. an
// earlier build's copy, for a before/after in the same conditions. On stderr, each measured
// round's first byte, last byte and commit on CLOCK_MONOTONIC (perf record -k mono's clock), to
// profile the round alone (perf report --time).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "bench_shoald.h"
#include "proc_tree.h"
#include "shoal/common/file_io.h"
#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/update_format.h"
#include "shoal/v1/fl.pb.h"
#include "stream_bandwidth.h"
#include "tcp_sink.h"
#include "tests/support/hugepages_for_test.h"
#include "tests/support/shoald_fixture.h"
#include "update_sender.h"
#include "update_template.h"

using namespace shoal;
using namespace shoal::testing;
using shoal::bench::Now;
using shoal::bench::UpdatePrefix;
using Json = nlohmann::json;

namespace {

constexpr uint64_t kHidden = 14704;  // 784-14704-10 MLP: 11,689,690 parameters
std::string g_shoald;                // --shoald; empty: this build's
int g_rounds = 3;                    // --rounds; the last is the figure

// CPU time of a process and of its descendants (shoald; its zygotes and instances), from
// /proc/<pid>/stat's utime + stime (clock ticks), in ms; `n` counts the descendants.
struct TreeCpu {
  double root_ms = 0, descendants_ms = 0;
  int n = 0;
};
TreeCpu TreeCpuMs(pid_t root) {
  const auto procs = shoal::bench::ReadProcs();
  const std::vector<pid_t> tree = shoal::bench::Descendants(procs, root);
  TreeCpu cpu;
  for (const pid_t pid : tree) {
    auto it = procs.find(pid);
    if (it == procs.end()) continue;
    if (pid == root) {
      cpu.root_ms = it->second.cpu_ms;
    } else {
      cpu.descendants_ms += it->second.cpu_ms;
      ++cpu.n;
    }
  }
  return cpu;
}

// This process's CPU time (every thread, ended ones too), ms.
double SelfCpuMs() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

// The plain-TCP bound: `updates` requests of prefix_bytes + area (with the same head) over
// `senders` loopback connections, each sender waiting for its response before the next request,
// as the Shoal senders do. Seconds from the first byte written to the last response read, best
// of `reps` after one warm-up.
// *cpu_ms: this process's CPU (the senders' and the receiver's threads) in the best rep.
double TcpSeconds(int updates, int senders, size_t prefix_bytes, const std::vector<std::byte>& area,
                  const std::string& auth, int reps, int* failures, double* cpu_ms) {
  const std::string prefix(prefix_bytes, '\0');
  shoal::bench::TcpSink sink(prefix.size() + area.size(), senders);
  std::vector<int> fds;
  for (int s = 0; s < senders; ++s) fds.push_back(shoal::bench::ConnectLoopback(sink.port()));
  const std::string head =
      shoal::bench::PostHead("/v1/jobs/round/updates", prefix.size() + area.size(), auth);
  double best = 1e30;
  for (int rep = 0; rep <= reps; ++rep) {
    std::vector<double> first(senders, 1e30), done(senders, 0);
    const double cpu0 = SelfCpuMs();
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    for (int s = 0; s < senders; ++s) {
      threads.emplace_back([&, s] {
        for (int k = s; k < updates; k += senders) {
          if (k == s) first[s] = Now();
          if (!shoal::bench::WriteUpdate(fds[s], head, prefix, area) ||
              shoal::bench::ReadResponse(fds[s]) != 200) {
            ++bad;
          }
        }
        done[s] = Now();
      });
    }
    for (auto& t : threads) t.join();
    const double s =
        *std::max_element(done.begin(), done.end()) - *std::min_element(first.begin(), first.end());
    const double cpu = SelfCpuMs() - cpu0;
    if (rep > 0 && s < best) {
      best = s;
      *cpu_ms = cpu;
    }
    *failures += bad;
    std::fprintf(stderr, "bench-round: plain TCP, rep %d: first byte %.6f, done %.6f\n", rep,
                 *std::min_element(first.begin(), first.end()),
                 *std::max_element(done.begin(), done.end()));
  }
  for (int fd : fds) close(fd);
  return best;
}

struct RoundResult {
  int leaves = 0;
  double receive_s = 0;     // first byte written .. last byte written
  double round_s = 0;       // first byte written .. committed version seen (the last round)
  double tail_s = 0;        // last byte written .. committed version seen (the last round)
  double cold_round_s = 0;  // first byte .. commit in the first round
  int leaves_used = 0;
  int failures = 0;
  uint32_t counted = 0;
  // CPU over the measured round (its start .. its commit seen), ms: this process (the
  // senders), shoald, its descendants (the zygote and the leaf instances).
  double cpu_senders_ms = 0, cpu_shoald_ms = 0, cpu_instances_ms = 0;
};

// auth and prefix_bytes return the request's bearer header and the prefix length, for the TCP
// bound's requests to have the same length.
// The job's pool: every update, two partial sums per leaf, some room.
// Two rounds of updates: a round's updates stay held (and logged) until the checkpoint behind
// its commit is written, and the next round's arrive meanwhile (on a fast pool they do: a
// pool of one round's size refused the second round with 503 while the first's 64 were held).
uint64_t PoolBytes(size_t area_bytes, int updates, int leaves) {
  return (area_bytes + 4096) * (2 * updates + 2 * leaves + 8);
}

RoundResult RunRound(int leaves, int updates, int senders, const std::vector<std::byte>& area,
                     const v1::UpdateHeader& header, std::string* auth_out, size_t* prefix_bytes,
                     const std::string& pool, const std::string& extra_yaml = {}) {
  RoundResult res;
  res.leaves = leaves;
  Shoald shoald;
  Shoald::Options opt;
  opt.pool = pool;
  opt.binary = g_shoald;
  opt.extra_yaml = extra_yaml;
  opt.pool_bytes = PoolBytes(area.size(), updates, leaves);
  opt.max_body_bytes = uint64_t{128} << 20;
  if (!shoal::bench::StartShoald(shoald, opt)) {
    res.failures = updates;
    return res;
  }
  const std::string job = "round";
  // At most `senders` updates are in flight: one leaf takes them all (flat), or each of the
  // leaves takes its share and the instance manager starts more as they queue (hierarchical).
  const int fan_in = std::max(1, (senders + leaves - 1) / leaves);
  auto d = shoald.Deploy("apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + job +
                         "\nspec:\n  algorithm: {name: fedavg}\n  model: {architecture: mlp, "
                         "hidden: " +
                         std::to_string(kHidden) +
                         "}\n  clients: {expected: " + std::to_string(updates) +
                         "}\n  stop: {rounds: " + std::to_string(g_rounds) +
                         "}\n"
                         "  aggregation: {maxFanIn: " +
                         std::to_string(fan_in) + ", maxLeaves: " + std::to_string(leaves) + "}\n");
  if (d.exit_code != 0) {
    std::fprintf(stderr, "deploy: %s\n", d.err.c_str());
    res.failures = updates;
    return res;
  }
  shoald.WaitReady("fl." + job, 1, 30000);
  std::vector<std::pair<std::string, std::string>> ids;  // client id, token
  for (int k = 0; k < updates; ++k) {
    auto r =
        shoald.Api("POST", "/v1/jobs/" + job + "/join", "{}", {"Content-Type: application/json"});
    Json j = Json::parse(r.body, nullptr, false);
    ids.emplace_back(j.value("client_id", ""), j.value("token", ""));
  }
  // --rounds rounds (3): the first starts the leaves it needs; the last is the figure. The second
  // round's updates land in pool memory never used before (the first's are held until the
  // checkpoint behind its commit is written); from the third on they reuse the first's pages.
  for (int round = 0; round < g_rounds; ++round) {
    // Each client's prefix (magic, header, padding): the template header with its client id,
    // token and base version; the tensor table's offsets are relative to the tensor area,
    // which all share.
    const std::vector<std::string> prefixes = shoal::bench::RoundPrefixes(header, job, ids, round);
    std::vector<double> first_write(senders, 1e30), last_write(senders, 0);
    std::atomic<int> failures{0}, senders_done{0};
    const TreeCpu cpu0 = TreeCpuMs(shoald.pid());
    const double self0 = SelfCpuMs();
    TreeCpu cpu1;
    double self1 = 0;
    const double t0 = Now();
    std::vector<std::thread> threads;
    const std::string auth = shoald.AuthHeader();
    *auth_out = auth;
    *prefix_bytes = prefixes[0].size();
    for (int s = 0; s < senders; ++s) {
      threads.emplace_back([&, s] {
        int fd = shoal::bench::ConnectLoopback(shoald.port());
        for (int k = s; k < updates; k += senders) {
          const auto p = shoal::bench::PostUpdate(fd, job, prefixes[k], area, auth);
          if (k == s) first_write[s] = p.write_start;
          last_write[s] = p.write_end;
          if (p.status != 202) {
            // Said once per sender: a refusal closes the connection, so its later updates fail.
            if (failures++ == 0 || k == s) {
              std::fprintf(stderr, "bench-round: update %d: %s, HTTP %d %s\n", k,
                           p.sent ? "sent" : "not sent whole", p.status,
                           p.body.substr(0, 200).c_str());
            }
          }
        }
        close(fd);
        ++senders_done;
      });
    }
    // Poll for the committed version: GET /v1/jobs/<job> on one kept-alive connection to the
    // gateway (the control API's listener opens a connection and a thread per call: polled
    // every 0.5 ms that cost ~0.3 s of CPU per round, taken from the round on 2 vCPUs). Every
    // 10 ms while the senders write (the commit waits for all `updates`), every 0.5 ms after.
    double committed = 0;
    uint32_t counted = 0;
    const int poll_fd = shoal::bench::ConnectLoopback(shoald.port());
    const std::string poll_head =
        "GET /v1/jobs/" + job + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + "\r\n\r\n";
    std::string body;
    for (;;) {
      const bool sent = ::write(poll_fd, poll_head.data(), poll_head.size()) ==
                        static_cast<ssize_t>(poll_head.size());
      const int status = sent ? shoal::bench::ReadResponse(poll_fd, &body) : 0;
      if (status != 200) {
        std::fprintf(stderr, "bench-round: GET /v1/jobs/%s: HTTP %d %s\n", job.c_str(), status,
                     body.substr(0, 200).c_str());
        break;
      }
      Json st = Json::parse(body, nullptr, false);
      if (st.value("version", 0) >= round + 1) {
        committed = Now();
        self1 = SelfCpuMs();
        cpu1 = TreeCpuMs(shoald.pid());
        counted = st["versions"][round + 1].value("updates", 0u);
        break;
      }
      if (Now() - t0 > 300) break;
      std::this_thread::sleep_for(senders_done.load() == senders
                                      ? std::chrono::microseconds(500)
                                      : std::chrono::microseconds(10000));
    }
    close(poll_fd);
    for (auto& t : threads) t.join();
    const double first = *std::min_element(first_write.begin(), first_write.end());
    const double last = *std::max_element(last_write.begin(), last_write.end());
    res.receive_s = last - first;
    if (round == 0) res.cold_round_s = committed - first;
    res.round_s = committed - first;
    res.tail_s = committed - last;
    res.counted = counted;
    res.failures += failures;
    res.cpu_senders_ms = self1 - self0;
    res.cpu_shoald_ms = cpu1.root_ms - cpu0.root_ms;
    res.cpu_instances_ms = cpu1.descendants_ms - cpu0.descendants_ms;
    std::fprintf(stderr,
                 "bench-round: %d leaf instance(s) at most, round %d: first byte %.6f, last byte "
                 "%.6f, commit %.6f (CLOCK_MONOTONIC s)\n",
                 leaves, round + 1, first, last, committed);
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
  signal(SIGPIPE, SIG_IGN);  // a connection the server closed is a failure to count, not an exit
  int updates = 64, senders = 8;
  std::string also;  // the rounds again on another pool, with the ratio to the Boost ones
  shoal::bench::Args args(
      "bench-round [--updates N] [--senders C] [--rounds R] [--pool dpdk|prefault] [--shoald "
      "PATH]");
  args.Option("--updates", &updates)
      .Option("--senders", &senders)
      .Option("--pool", &also)
      .Option("--shoald", &g_shoald)
      .Option("--rounds", &g_rounds);
  if (!args.Parse(argc, argv)) return 2;
  if (!also.empty() && also != "dpdk" && also != "prefault") {
    std::fprintf(stderr,
                 "bench-round: --pool %s: want dpdk or prefault (boost is always measured)\n",
                 also.c_str());
    return 2;
  }
  if (updates < 1 || senders < 1 || g_rounds < 2) {
    std::fprintf(stderr, "bench-round: --updates and --senders must be >= 1, --rounds >= 2\n");
    return 2;
  }
  const model::ModelSpec spec = model::MlpSpec(784, {kHidden}, 10);
  const size_t n = spec.num_params();
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::string stream_how;
  const size_t stream_n = shoal::bench::StreamElements(n, &stream_how);
  std::fprintf(stderr, "bench-round: STREAM on %u threads, %s\n", threads, stream_how.c_str());
  const shoal::bench::StreamResult stream = shoal::bench::MeasureStream(stream_n, threads, 5);
  if (stream.rows.empty()) {
    std::fprintf(stderr, "bench-round: cannot allocate STREAM's arrays\n");
    return 1;
  }
  model::Model m = model::InitModel(spec, 1);
  shoal::bench::UpdateTemplate tmpl = shoal::bench::MakeUpdateTemplate(m);
  const v1::UpdateHeader& header = tmpl.header;
  const std::vector<std::byte>& area = tmpl.area;
  const double total_bytes = static_cast<double>(area.size()) * updates;
  const double memory_bound = total_bytes / (stream.best.gbps * 1e9);
  std::vector<RoundResult> results;
  std::string auth;
  size_t prefix_bytes = 0;
  for (int leaves : {1, 4}) {
    std::fprintf(stderr, "bench-round: %d updates, %d leaf instance(s) at most...\n", updates,
                 leaves);
    results.push_back(
        RunRound(leaves, updates, senders, area, header, &auth, &prefix_bytes, "boost"));
  }
  // The second pool's rounds (dpdk: hugepages; prefault: Boost, allocated whole at creation).
  std::vector<RoundResult> dpdk;
  std::string dpdk_skip;
  if (also == "dpdk") {
    dpdk_skip = ShortOfHugepages(HugepagesFor(PoolBytes(area.size(), updates, 4)),
                                 "bench-round's dpdk shoald");
  }
  for (int leaves : {1, 4}) {
    if (also.empty() || !dpdk_skip.empty()) break;
    std::fprintf(stderr, "bench-round: pool %s, %d leaf instance(s) at most...\n", also.c_str(),
                 leaves);
    std::string a;
    size_t pb = 0;
    dpdk.push_back(also == "dpdk"
                       ? RunRound(leaves, updates, senders, area, header, &a, &pb, "dpdk")
                       : RunRound(leaves, updates, senders, area, header, &a, &pb, "boost",
                                  "pool_prefault: true\n"));
  }
  // The TCP bound after shoald is gone, with a request head of the same length.
  int tcp_failures = 0;
  std::fprintf(stderr, "bench-round: the same bytes over %d plain TCP connections...\n", senders);
  double tcp_cpu_ms = 0;
  const double tcp_bound =
      TcpSeconds(updates, senders, prefix_bytes, area, auth, 3, &tcp_failures, &tcp_cpu_ms);
  const double bound = std::max(tcp_bound, memory_bound);
  std::printf(
      "bench-round: %d updates of %zu f32 parameters (%.1f MB each, %.2f GB in all) over "
      "HTTP from %d connections, FedAvg, one round; lower is better\n",
      updates, n, static_cast<double>(area.size()) / 1e6, total_bytes / 1e9, senders);
  std::printf(
      "bound = max(plain loopback TCP, same bytes, %d connections: %.1f ms (%.2f GB/s); "
      "bytes / memory bandwidth (STREAM %s, %u threads, %.2f GB/s): %.1f ms) = %.1f ms\n",
      senders, tcp_bound * 1e3, total_bytes / tcp_bound / 1e9, stream.best.Name().c_str(), threads,
      stream.best.gbps, memory_bound * 1e3, bound * 1e3);
  // The tail's bound: what must follow the last byte even with the fold hidden behind the
  // receive: fold that last update, then merge the leaves' sums, both at memory bandwidth.
  const double elements = static_cast<double>(area.size()) / sizeof(float);
  const double fold_one_s = 12.0 * elements / (stream.best.gbps * 1e9);
  auto merge_s = [&](const RoundResult& r) {
    return 8.0 * elements * std::max(1, r.leaves_used) / (stream.best.gbps * 1e9);
  };
  auto tail_bound = [&](const RoundResult& r) { return 3 * (fold_one_s + merge_s(r)); };
  std::printf(
      "tail bound = 3 x (fold one update, 12 B/element: %.2f ms + merge the leaves' sums, "
      "8 B/element per leaf: %.2f ms per leaf) at %.2f GB/s; tail ratio = last byte->commit / "
      "tail bound (target <= 1)\n",
      fold_one_s * 1e3, 8.0 * elements / (stream.best.gbps * 1e9) * 1e3, stream.best.gbps);
  std::printf("%-26s %11s %19s %12s %18s %14s %11s %17s %8s %9s\n", "tree", "receive ms",
              "first byte->commit", "ratio/bound", "last byte->commit", "tail bound", "tail ratio",
              "1st round (first)", "counted", "failures");
  for (const auto& r : results) {
    std::printf("%-26s %11.1f %16.1f ms %12.3f %15.1f ms %11.1f ms %11.3f %14.1f ms %8u %9d\n",
                (r.leaves == 1 ? std::string("flat (1 leaf)")
                               : "hierarchical (" + std::to_string(r.leaves_used) + " leaves)")
                    .c_str(),
                r.receive_s * 1e3, r.round_s * 1e3, r.round_s / bound, r.tail_s * 1e3,
                tail_bound(r) * 1e3, r.tail_s / tail_bound(r), r.cold_round_s * 1e3, r.counted,
                r.failures);
  }
  // Where the CPUs went: with every vCPU busy (the anchor keeps them so), the round can end no
  // sooner than (the anchor's CPU + the fold's at memory bandwidth) / vCPUs. The fold's CPU:
  // 12 B per element per update (read the update, read and write the sum) at one thread's
  // share of STREAM's bandwidth.
  const double fold_cpu_ms = 12.0 * elements * updates / (stream.best.gbps * 1e9 / threads) * 1e3;
  const double floor_ms = (tcp_cpu_ms + fold_cpu_ms) / threads;
  std::printf(
      "CPU, ms (utime + stime over the measured round: this process's senders, shoald, its "
      "zygote and instances); floor = (anchor CPU %.0f + fold at STREAM bandwidth %.0f) / %u "
      "vCPUs = %.1f ms = %.3f x bound\n",
      tcp_cpu_ms, fold_cpu_ms, threads, floor_ms, floor_ms / 1e3 / bound);
  std::printf("%-26s %9s %9s %10s %9s %14s %13s\n", "tree", "senders", "shoald", "instances",
              "total", "wall x vCPUs", "over floor");
  std::printf("%-26s %9.0f %9s %10s %9.0f %14.0f %13s\n", "plain TCP (anchor)", tcp_cpu_ms, "-",
              "-", tcp_cpu_ms, tcp_bound * 1e3 * threads, "-");
  auto cpu_rows = [&](const std::vector<RoundResult>& rs, const char* pool) {
    for (const RoundResult& r : rs) {
      const double total = r.cpu_senders_ms + r.cpu_shoald_ms + r.cpu_instances_ms;
      const std::string tree =
          (r.leaves == 1 ? std::string("flat") : "hier (" + std::to_string(r.leaves_used) + ")") +
          pool;
      std::printf("%-26s %9.0f %9.0f %10.0f %9.0f %14.0f %13.0f\n", tree.c_str(), r.cpu_senders_ms,
                  r.cpu_shoald_ms, r.cpu_instances_ms, total, r.round_s * 1e3 * threads,
                  total - tcp_cpu_ms - fold_cpu_ms);
    }
  };
  cpu_rows(results, "");
  cpu_rows(dpdk, (", " + also).c_str());
  int dpdk_failures = 0;
  // The second pool's rows and RESULT names: round_dpdk* for --pool dpdk, round_prefault* for
  // --pool prefault.
  const std::string col = also;
  if (!dpdk.empty()) {
    std::printf(
        "pool %s, the same rounds; boost/%s = Boost's first byte->commit over %s's (> 1: %s "
        "faster)\n",
        col == "dpdk" ? "dpdk (hugepages)" : "prefault (Boost, pool_prefault: true)", col.c_str(),
        col.c_str(), col.c_str());
    std::printf("%-26s %11s %19s %12s %11s %18s %11s %8s %9s\n", "tree", "receive ms",
                "first byte->commit", "ratio/bound", ("boost/" + col).c_str(), "last byte->commit",
                "tail ratio", "counted", "failures");
    for (size_t i = 0; i < dpdk.size(); ++i) {
      const RoundResult& r = dpdk[i];
      dpdk_failures += r.failures;
      std::printf("%-26s %11.1f %16.1f ms %12.3f %11.3f %15.1f ms %11.3f %8u %9d\n",
                  (r.leaves == 1 ? std::string("flat (1 leaf)")
                                 : "hierarchical (" + std::to_string(r.leaves_used) + " leaves)")
                      .c_str(),
                  r.receive_s * 1e3, r.round_s * 1e3, r.round_s / bound,
                  results[i].round_s / r.round_s, r.tail_s * 1e3, r.tail_s / tail_bound(r),
                  r.counted, r.failures);
    }
  }
  if (!dpdk_skip.empty()) std::printf("pool %s: skipped: %s\n", col.c_str(), dpdk_skip.c_str());
  if (tcp_failures != 0) std::printf("plain TCP: %d request(s) failed\n", tcp_failures);
  const RoundResult& h = results.back();
  std::printf("RESULT round ratio=%.3f\n", h.round_s / bound);
  if (dpdk.size() == 2) {
    std::printf("RESULT round_%s ratio=%.3f\n", col.c_str(), dpdk.back().round_s / bound);
    std::printf("RESULT round_%s_vs_boost ratio=%.3f\n", col.c_str(),
                h.round_s / dpdk.back().round_s);
  }
  std::printf("RESULT round_tail ratio=%.3f\n", h.tail_s / tail_bound(h));
  if (dpdk.size() == 2) {
    std::printf("RESULT round_tail_%s ratio=%.3f\n", col.c_str(),
                dpdk.back().tail_s / tail_bound(dpdk.back()));
  }
  return h.failures == 0 && results.front().failures == 0 && tcp_failures == 0 && dpdk_failures == 0
             ? 0
             : 1;
}
