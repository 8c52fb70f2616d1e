// shoal-client: simulated federated-learning clients for a shoald FL job. Loads the dataset
// once, splits it over --clients clients, draws each one's speed, and runs them all in this
// process (see fl_client_runner.h); client 0 also evaluates each new global model.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "shoal/common/command_line.h"
#include "shoal/fl/client/fl_client_runner.h"
#include "shoal/fl/client/fl_http_client.h"
#include "shoal/fl/client/oip_classifier.h"
#include "shoal/fl/wire/dtype.h"
#include "shoal/tools/flsim/attack.h"
#include "shoal/tools/flsim/dataset.h"
#include "shoal/tools/flsim/partition.h"
#include "shoal/tools/flsim/speeds.h"

namespace {

using namespace shoal;          // NOLINT(google-build-using-namespace)
using namespace shoal::client;  // NOLINT(google-build-using-namespace)

constexpr int kExitError = 1;
constexpr int kExitUnreachable = 2;

int Fail(const std::string& message, int code = kExitError) {
  std::cerr << "shoal-client: " << message << '\n';
  return code;
}

template <typename T>
T Quantile(std::vector<T> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

std::string Fmt(const char* format, double a, double b = 0, double c = 0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, format, a, b, c);
  return buf;
}

// --infer: the served model classifies the test split over OIP while (if --job names it) the
// FL job is still training; accuracy is printed per model version that answered.
int RunInfer(const std::string& server, const std::string& model, const std::string& job,
             const std::string& data_dir, bool standardise, int connections, int batch,
             double max_seconds) {
  auto loaded = LoadFashionMnist(data_dir, standardise);
  if (!loaded.ok()) return Fail(loaded.status().message());
  OipClassifyOptions o;
  o.server = server;
  o.model = model;
  o.connections = connections;
  o.batch = batch;
  o.max_seconds = max_seconds;
  o.log = &std::cout;
  std::unique_ptr<FlHttpClient> fl;
  if (!job.empty()) {
    fl = std::make_unique<FlHttpClient>(server, job);
    o.done = [&fl] {
      auto st = fl->JobStatus();
      return !st.ok() || st->state == "done";
    };
  }
  std::cout << "shoal-client: infer: classifying " << loaded->test.num_samples
            << " Fashion-MNIST test images through " << server << "/v2/models/" << model
            << "/infer (" << connections << " connections, " << batch << " images per request"
            << (job.empty() ? "" : ", until job '" + job + "' is done") << ")" << std::endl;
  auto r = ClassifyOverOip(o, loaded->test);
  if (!r.ok()) {
    return Fail(r.status().message(),
                r.status().code() == StatusCode::kUnavailable ? kExitUnreachable : kExitError);
  }
  // Versions in order; many of them are grouped into at most 16 rows of consecutive versions.
  std::vector<std::pair<uint64_t, VersionScore>> versions(r->by_version.begin(),
                                                          r->by_version.end());
  const size_t group = (versions.size() + 15) / 16;
  std::cout << "shoal-client: infer: accuracy per model version that answered (while "
            << (job.empty() ? "cycling" : "the job trained")
            << "):\n  version(s)    images  accuracy\n";
  for (size_t i = 0; i < versions.size(); i += group) {
    VersionScore sum;
    const size_t end = std::min(versions.size(), i + group);
    for (size_t k = i; k < end; ++k) {
      sum.images += versions[k].second.images;
      sum.correct += versions[k].second.correct;
    }
    std::string name = std::to_string(versions[i].first);
    if (end - i > 1) name += "-" + std::to_string(versions[end - 1].first);
    char line[96];
    std::snprintf(line, sizeof line, "  %-10s  %8llu  %8.4f\n", name.c_str(),
                  static_cast<unsigned long long>(sum.images), sum.accuracy());
    std::cout << line;
  }
  std::cout << "shoal-client: infer: final pass over the whole test split:\n";
  for (const auto& [v, score] : r->final_by_version) {
    std::cout << Fmt("  version %.0f: %.0f images, accuracy %.4f\n", double(v),
                     double(score.images), score.accuracy());
  }
  std::cout << "shoal-client: infer: " << r->requests << " requests (" << r->failed
            << " failed) in "
            << Fmt("%.1f s: %.0f req/s, p50 %.2f ms", r->seconds, double(r->requests) / r->seconds,
                   r->p50_ms)
            << Fmt(", p99 %.2f ms", r->p99_ms) << std::endl;
  if (r->failed > 0) return Fail("failed requests, the first: " + r->first_error);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shoal-client: simulated FL clients that train on a real dataset for a shoald job"};
  std::string server, job, data = "fashion-mnist", data_dir = kFashionMnistDir;
  std::string partition = "dirichlet:0.5", speeds = "lognormal:1.0", dtype_name = "f32";
  int clients = 16;
  uint64_t seed = 1;
  double time_scale = kDefaultTimeScale, max_seconds = 0;
  bool evaluator = true, standardise = false;
  size_t eval_samples = 10000;
  FlRunOptions run;
  app.add_option("--server", server, "shoald's URL, e.g. http://localhost:8080")->required();
  app.add_option("--job", job, "the FL job's name (with --infer: classify until it is done)");
  std::string infer_model;
  int infer_connections = 8, infer_batch = 8;
  app.add_option("--infer", infer_model,
                 "instead of training: classify the test split through this OIP model "
                 "(/v2/models/MODEL/infer) and print accuracy per model version");
  app.add_option("--infer-connections", infer_connections, "--infer: concurrent connections")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--infer-batch", infer_batch, "--infer: images per request")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--clients", clients, "simulated clients in this process")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--data", data, "fashion-mnist | digits | synthetic")->capture_default_str();
  app.add_option("--data-dir", data_dir,
                 "where the Fashion-MNIST IDX files are (digits: the digits.csv.gz file)")
      ->capture_default_str();
  app.add_option("--partition", partition, "iid | dirichlet:<alpha> | classes:<k>")
      ->capture_default_str();
  app.add_option("--speeds", speeds,
                 "seconds per local step: lognormal:<sigma>[,<median>] | exponential:<mean> | "
                 "normal:<mean>,<sd> | uniform[:<lo>,<hi>]")
      ->capture_default_str();
  app.add_option("--seed", seed, "seeds the partition, the speeds and the trainers")
      ->capture_default_str();
  app.add_option(
         "--dtype", dtype_name,
         "update tensors on the wire: f32 | bf16 | f16 | int8 | int4 (the job must take it)")
      ->capture_default_str();
  app.add_option("--time-scale", time_scale,
                 "simulated training time = local_steps x seconds per step x this")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--evaluator,!--no-evaluator", evaluator,
               "client 0 also evaluates each new global model on the test split (default on)");
  app.add_option("--eval-samples", eval_samples, "test samples the evaluator uses")
      ->capture_default_str();
  app.add_option("--max-seconds", max_seconds, "stop after this long; 0 = when the job is done")
      ->capture_default_str();
  app.add_option("--token", run.join_token, "the job's pre-shared client token, if it has one");
  app.add_option("--train-threads", run.train_threads,
                 "trainings computed at once; 0 = the machine's cores")
      ->capture_default_str();
  std::string attack = "none";
  app.add_option("--attack", attack,
                 "the attackers poison their updates: none | sign-flip | scale:<k> (e.g. "
                 "scale:-10) | noise:<sigma> (the delta replaced by Gaussian noise) | "
                 "label-flip (trained on labels C-1-y) | lie[:<z>] (\"a little is enough\": "
                 "the attackers pool their honest models of a round and all send mean - z std; "
                 "z defaults to the paper's z_max for --clients and --attackers)")
      ->capture_default_str();
  app.add_option("--attackers", run.attackers,
                 "how many clients attack (the last ones: client-<N-F> .. client-<N-1>)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--local-dp-clip", run.local_dp.clip,
                 "local differential privacy: clip each update's change from the global model "
                 "to this L2 norm before sending it (0 = off)")
      ->capture_default_str();
  app.add_option("--local-dp-noise", run.local_dp.noise_multiplier,
                 "local DP: add N(0, (noise * clip)^2) to each value of the clipped update "
                 "(needs --local-dp-clip)")
      ->capture_default_str();
  app.add_flag("--standardise", standardise,
               "shift and scale pixels by the train split's mean and stddev (default: pixels in "
               "[0,1]; the job's model then expects the same inputs)");
  shoal::SetExamples(&app,
                     {"shoal-client --server http://127.0.0.1:8080 --job fmnist --clients 16",
                      "shoal-client --server http://127.0.0.1:8080 --job digits --data digits "
                      "--partition iid --dtype bf16",
                      "shoal-client --server http://127.0.0.1:8080 --job fmnist --attack scale:-10 "
                      "--attackers 2",
                      "shoal-client --server http://127.0.0.1:8080 --infer fmnist --job fmnist"});
  if (auto rc = shoal::ParseCommandLine(app, argc, argv)) return *rc;
  if (!infer_model.empty()) {
    return RunInfer(server, infer_model, job, data_dir, standardise, infer_connections, infer_batch,
                    max_seconds > 0 ? max_seconds : 120);
  }
  if (job.empty()) return Fail("--job is required (or --infer MODEL)");

  auto pspec = ParsePartitionSpec(partition);
  if (!pspec.ok()) return Fail("--partition: " + pspec.status().message());
  auto sspec = ParseSpeedSpec(speeds);
  if (!sspec.ok()) return Fail("--speeds: " + sspec.status().message());
  auto dtype = model::UpdateDTypeFromName(dtype_name);
  if (!dtype) {
    return Fail("--dtype: '" + dtype_name + "' is not one of " +
                std::string(model::kUpdateDTypeNames));
  }
  auto aspec = ParseAttackSpec(attack);
  if (!aspec.ok()) return Fail("--attack: " + aspec.status().message());
  run.attack = *aspec;
  if (run.attack.kind != AttackSpec::Kind::kNone && run.attackers == 0) {
    return Fail("--attack " + attack + " needs --attackers F (how many clients attack)");
  }
  if (run.attackers > clients) {
    return Fail("--attackers: " + std::to_string(run.attackers) + " is more than --clients " +
                std::to_string(clients));
  }
  if (run.attack.kind == AttackSpec::Kind::kLie) {
    if (run.attackers < 2) {
      return Fail("--attack " + attack +
                  ": the attackers pool their honest models to estimate "
                  "mean and std, so it needs --attackers >= 2 (got " +
                  std::to_string(run.attackers) + ")");
    }
    if (run.attack.value == 0) {
      auto z = LieZ(clients, run.attackers);
      if (!z.ok()) return Fail("--attack " + attack + ": " + z.status().message());
      run.attack.value = *z;
    }
  }
  if (run.local_dp.noise_multiplier != 0 && run.local_dp.clip == 0) {
    return Fail("--local-dp-noise needs --local-dp-clip C (the norm the noise is scaled to)");
  }
  if (run.local_dp.clip != 0) {
    if (Status st = privacy::CheckLocalDp(run.local_dp, "--local-dp-"); !st.ok()) {
      return Fail(st.message());
    }
  }
  if (data != "fashion-mnist" && data != "digits" && data != "synthetic") {
    return Fail("--data: '" + data + "' is not one of fashion-mnist, digits, synthetic");
  }

  // Reach the job before the (seconds-long) dataset load, so a wrong URL or job fails fast.
  FlHttpClient probe(server, job);
  auto state = probe.JobStatus();
  if (!state.ok()) {
    const Status& st = state.status();
    if (st.code() == StatusCode::kUnavailable && st.message().starts_with("cannot reach")) {
      return Fail(st.message(), kExitUnreachable);
    }
    if (st.code() == StatusCode::kNotFound) {
      return Fail("job '" + job + "' not found at " + probe.server() + ": " + st.message());
    }
    return Fail("job '" + job + "': " + st.message());
  }
  std::cout << "shoal-client: server " << probe.server() << ", job " << job << " (state "
            << (state->state.empty() ? "?" : state->state) << ", version " << state->version
            << ")\n";

  DatasetSplit split;
  if (data == "fashion-mnist") {
    auto loaded = LoadFashionMnist(data_dir, standardise);
    if (!loaded.ok()) return Fail(loaded.status().message());
    split = std::move(*loaded);
  } else if (data == "digits") {
    auto loaded = LoadDigits(data_dir == kFashionMnistDir ? kDigitsCsv : data_dir);
    if (!loaded.ok()) return Fail(loaded.status().message());
    split = std::move(*loaded);
    if (standardise) Standardise(split);
  } else {
    // One draw split in two, so both halves come from the same clusters.
    Dataset all = MakeSyntheticDataset(7000, 784, 10, seed, 0.3F);
    std::vector<uint32_t> tr(6000), te(1000);
    for (uint32_t i = 0; i < 7000; ++i) (i < 6000 ? tr[i] : te[i - 6000]) = i;
    split.train = Subset(all, tr);
    split.test = Subset(all, te);
  }
  Dataset test;
  if (evaluator) {
    std::vector<uint32_t> idx(std::min(eval_samples, split.test.num_samples));
    for (uint32_t i = 0; i < idx.size(); ++i) idx[i] = i;
    test = Subset(split.test, idx);
  }

  FlClientPlan plan;
  auto parts = Partition(split.train.labels, split.train.num_classes, clients, *pspec, seed);
  if (!parts.ok()) return Fail("--partition: " + parts.status().message());
  plan.partitions = std::move(*parts);
  plan.step_seconds = SampleStepSeconds(*sspec, clients, seed + 1);

  std::vector<size_t> sizes;
  for (const auto& p : plan.partitions) sizes.push_back(p.size());
  std::cout << "shoal-client: data " << data << ": " << split.train.num_samples << " train, "
            << split.test.num_samples << " test"
            << (evaluator ? " (evaluating on " + std::to_string(test.num_samples) + ")" : "")
            << "\n";
  std::cout << "shoal-client: " << clients << " clients, partition " << ToString(*pspec)
            << " (seed " << seed << "): samples min " << Quantile(sizes, 0) << " median "
            << Quantile(sizes, 0.5) << " max " << Quantile(sizes, 1) << "\n  sizes:";
  for (size_t s : sizes) std::cout << ' ' << s;
  const double lo = Quantile(plan.step_seconds, 0), med = Quantile(plan.step_seconds, 0.5),
               hi = Quantile(plan.step_seconds, 1);
  std::cout << "\nshoal-client: speeds " << ToString(*sspec) << " (seed " << seed + 1
            << "): seconds per step min " << Fmt("%.4f", lo) << " median " << Fmt("%.4f", med)
            << " max " << Fmt("%.4f", hi) << "; time scale " << time_scale
            << Fmt(": 100 steps sleep %.2f / %.2f / %.2f s", 100 * lo * time_scale,
                   100 * med * time_scale, 100 * hi * time_scale)
            << "\n  step seconds:";
  for (double v : plan.step_seconds) std::cout << ' ' << Fmt("%.5f", v);
  std::cout << "\nshoal-client: updates as " << model::DTypeName(*dtype) << ", evaluator "
            << (evaluator ? "on (client 0)" : "off")
            << (max_seconds > 0 ? ", stopping after " + Fmt("%.0f", max_seconds) + " s" : "")
            << std::endl;
  if (run.attack.kind != AttackSpec::Kind::kNone) {
    std::cout << "shoal-client: attack " << ToString(run.attack) << " by " << run.attackers
              << " of " << clients << " clients: client-" << clients - run.attackers
              << " .. client-" << clients - 1;
    if (run.attack.kind == AttackSpec::Kind::kLie) {
      std::cout << " (colluding: each round's attackers pool their honest models and send mean "
                << Fmt("- %.4f std", run.attack.value)
                << (attack == "lie" ? Fmt("; z_max for n %.0f, f %.0f", clients, run.attackers)
                                    : std::string())
                << ")";
    }
    std::cout << std::endl;
  }

  run.server = server;
  run.job = job;
  run.wire_dtype = *dtype;
  run.time_scale = time_scale;
  run.evaluator = evaluator;
  run.max_seconds = max_seconds;
  run.seed = seed;
  run.log = &std::cout;
  auto summary = RunFlClients(run, split.train, test, plan);
  if (!summary.ok()) {
    if (summary.status().code() == StatusCode::kUnavailable) {
      return Fail(summary.status().message(), kExitUnreachable);
    }
    return Fail("no client could join: " + summary.status().message());
  }
  const FlRunSummary& s = *summary;
  std::cout << "shoal-client: "
            << (s.job_done    ? "job done"
                : s.timed_out ? "stopped at --max-seconds"
                              : "clients stopped")
            << Fmt(" after %.1f s: ", s.seconds) << s.updates_accepted << " updates accepted ("
            << s.updates_stale << " stale, " << s.updates_rejected << " rejected, "
            << s.update_retries << " retries), " << s.tasks_trained << " tasks trained, "
            << s.versions_seen << " versions seen (last " << s.last_version << "), "
            << s.model_downloads << " model downloads";
  if (s.clients_failed > 0) std::cout << ", " << s.clients_failed << " clients failed";
  std::cout << '\n';
  if (s.secure) {
    std::cout << "shoal-client: secure aggregation: " << s.secure_rounds
              << " masked updates sent in finished SecAgg+ rounds, " << s.secure_failed
              << " rounds this client could not finish\n";
  }
  if (run.attack.kind == AttackSpec::Kind::kLie) {
    std::cout << "shoal-client: lie: " << s.lie_colluded
              << " updates sent as the colluders' mean - " << Fmt("%.4f std", run.attack.value)
              << " ("
              << Fmt("%.2f", s.lie_colluded ? double(s.lie_pooled) / double(s.lie_colluded) : 0.0)
              << " attackers pooled per update), " << s.lie_alone
              << " sent honest (no other attacker met)\n";
  }
  if (s.evaluated) {
    std::cout << "shoal-client: final accuracy " << Fmt("%.4f", s.final_accuracy) << " loss "
              << Fmt("%.4f", s.final_loss) << " (version " << s.final_version << ", "
              << test.num_samples << " test samples)\n";
  }
  return s.clients_failed == clients ? kExitError : 0;
}
