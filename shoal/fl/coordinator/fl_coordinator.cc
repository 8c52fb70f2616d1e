#include "shoal/fl/coordinator/fl_coordinator.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "shoal/common/stop_signal.h"
#include "shoal/fl/coordinator/fl_members.h"
#include "shoal/fl/coordinator/job_state.h"
#include "shoal/fl/kernels/fold_pool.h"
#include "shoal/fl/lora/lora_spec.h"
#include "shoal/fl/privacy/dp_spec_check.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/interfaces/fl_leaf_env.h"
#include "shoal/v1/fl.pb.h"

namespace shoal {
using namespace coordinator_internal;  // NOLINT(google-build-using-namespace): this library's own

namespace {

std::string RandomToken() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string t;
  for (int i = 0; i < 32; ++i) t += hex[rd() & 15];
  return t;
}

double Param(const FlJobSpec& s, const char* name, double def) {
  auto it = s.algorithm_params.find(name);
  return it == s.algorithm_params.end() ? def : it->second;
}

// The algorithms a job may name, and their parameters: each spec.algorithm.params name (as users
// write it) with the algorithm that takes it and the library field it sets. Every default is the
// library's (written once, in algorithms.h).
constexpr const char* kAlgorithms[] = {"fedavg",  "fedavgm", "fedadam",   "fedasync",
                                       "fedbuff", "fedfix",  "fedcompass"};
struct AlgorithmParam {
  const char* algorithm;
  const char* name;
  void (*set)(agg::AlgorithmParams& p, double v);
};
using Params = agg::AlgorithmParams;
constexpr AlgorithmParam kAlgorithmParams[] = {
    {"fedavgm", "beta", [](Params& p, double v) { p.fedavgm.beta = v; }},
    {"fedavgm", "eta", [](Params& p, double v) { p.fedavgm.eta = v; }},
    {"fedadam", "eta", [](Params& p, double v) { p.fedadam.eta = v; }},
    {"fedadam", "beta1", [](Params& p, double v) { p.fedadam.beta1 = v; }},
    {"fedadam", "beta2", [](Params& p, double v) { p.fedadam.beta2 = v; }},
    {"fedadam", "tau", [](Params& p, double v) { p.fedadam.tau = v; }},
    {"fedasync", "alpha", [](Params& p, double v) { p.fedasync.alpha = v; }},
    {"fedasync", "a", [](Params& p, double v) { p.fedasync.staleness_exponent = v; }},
    {"fedbuff", "k", [](Params& p, double v) { p.fedbuff.buffer_size = static_cast<uint32_t>(v); }},
    {"fedbuff", "eta", [](Params& p, double v) { p.fedbuff.eta_g = v; }},
    {"fedbuff", "a", [](Params& p, double v) { p.fedbuff.staleness_exponent = v; }},
    {"fedfix", "period", [](Params& p, double v) { p.fedfix.period_s = v; }},
    {"fedfix", "total_samples", [](Params& p, double v) { p.fedfix.total_samples = v; }},
    {"fedcompass", "alpha", [](Params& p, double v) { p.fedcompass.alpha = v; }},
    {"fedcompass", "a", [](Params& p, double v) { p.fedcompass.staleness_exponent = v; }},
    {"fedcompass", "q_min",
     [](Params& p, double v) { p.fedcompass.q_min = static_cast<uint32_t>(v); }},
    {"fedcompass", "lambda", [](Params& p, double v) { p.fedcompass.latest_time_factor = v; }},
    {"fedcompass", "momentum", [](Params& p, double v) { p.fedcompass.speed_momentum = v; }},
};

bool TakesParam(const std::string& algorithm, const std::string& name) {
  return std::any_of(
      std::begin(kAlgorithmParams), std::end(kAlgorithmParams),
      [&](const AlgorithmParam& a) { return algorithm == a.algorithm && name == a.name; });
}

// Every parameter the spec gives lands in each field of that name (the algorithm reads its own).
agg::AlgorithmParams LibraryParams(const FlJobSpec& s) {
  agg::AlgorithmParams p;
  for (const AlgorithmParam& a : kAlgorithmParams) {
    if (auto it = s.algorithm_params.find(a.name); it != s.algorithm_params.end()) {
      a.set(p, it->second);
    }
  }
  p.fedcompass.num_clients = s.clients;
  p.fedcompass.q_max = s.local_steps;
  return p;
}

Result<std::unique_ptr<agg::AggregationAlgorithm>> MakeJobAlgorithm(const FlJobSpec& s) {
  if (std::find(std::begin(kAlgorithms), std::end(kAlgorithms), s.algorithm) ==
      std::end(kAlgorithms)) {
    std::string names;
    for (const char* a : kAlgorithms) names.append(names.empty() ? "" : ", ").append(a);
    return InvalidArgument("spec.algorithm.name: '" + s.algorithm + "' is not an algorithm (" +
                           names + ")");
  }
  for (const auto& [k, v] : s.algorithm_params) {
    if (!TakesParam(s.algorithm, k)) {
      return InvalidArgument("spec.algorithm.params." + k + ": not a parameter of " + s.algorithm);
    }
    if (!std::isfinite(v) || v < 0) {
      return InvalidArgument("spec.algorithm.params." + k + ": must be a finite number >= 0");
    }
  }
  if (s.clients == 0) return InvalidArgument("spec.clients.expected: must be >= 1");
  if (s.algorithm == "fedcompass" && Param(s, "q_min", 20) > s.local_steps) {
    return InvalidArgument(
        "spec.algorithm.params.q_min: must be <= spec.training.localSteps (Q_max)");
  }
  auto algo = agg::MakeAlgorithm(s.algorithm, LibraryParams(s));
  if (!algo.ok()) return InvalidArgument("spec.algorithm.params: " + algo.status().message());
  return algo;
}

}  // namespace

namespace coordinator_internal {

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

model::ArchitectureOptions JobArchitecture(const FlJobSpec& s) {
  model::ArchitectureOptions o;
  o.hidden = {s.hidden};
  o.inputs = s.dataset == "digits" ? 64 : 784;
  return o;
}

agg::ClientId NumericId(const std::string& id) {
  return id.size() > 1 ? std::strtoull(id.c_str() + 1, nullptr, 10) : 0;
}

Result<uint64_t> ZeroedPartial(BufferPool& pool, size_t bytes) {
  auto off = pool.Allocate(bytes, kShoaldSlot);
  if (!off.ok()) return off.status();
  std::memset(pool.Data(*off).data(), 0, bytes);
  return *off;
}

FunctionSpec LeafSpec(const FlJobSpec& spec, uint32_t id, std::string name,
                      const NodeConfig& config) {
  FunctionSpec f;
  f.id = id;
  f.name = std::move(name);
  f.tenant = spec.tenant;
  f.handler.builtin = "fl-leaf";
  f.handler.env[fl_leaf_env::kArchitecture] = spec.architecture;
  f.handler.env[fl_leaf_env::kHidden] = std::to_string(spec.hidden);
  if (!spec.onnx_model.empty()) f.handler.env[fl_leaf_env::kOnnx] = spec.onnx_model;
  if (spec.lora.enabled()) {
    // Read again for each spec (the header only): a leaf started without it names the reason.
    if (auto base = lora::ReadBaseConfig(spec.lora.base); base.ok()) {
      f.handler.env[fl_leaf_env::kLoraShape] =
          std::to_string(base->d_model) + "," + std::to_string(base->n_layer);
    }
    f.handler.env[fl_leaf_env::kLoraRank] = std::to_string(spec.lora.rank);
    f.handler.env[fl_leaf_env::kLoraTargets] = lora::JoinTargets(spec.lora.targets);
    f.handler.env[fl_leaf_env::kLoraMethod] = spec.lora.method;
  }
  f.handler.env[fl_leaf_env::kInputs] = std::to_string(JobArchitecture(spec).inputs);
  f.handler.env[fl_leaf_env::kAggregationDevice] = spec.aggregation_device;  // its fold device
  f.handler.env[fl_leaf_env::kWireFormats] = fl_leaf_env::WireFormatsValue(spec.wire_formats);
  // A robust job's leaves validate and answer; the rule runs at the top (robust_commit.h).
  // So are a DP job's: each update is clipped at the top before the noised sum (dp_commit.h).
  // A secure job's leaves fold masked u32 inputs (shoal/fl/secagg).
  f.handler.env[fl_leaf_env::kFold] = spec.privacy.secure_aggregation.enabled            ? "u32"
                                      : spec.robust.enabled() || spec.privacy.dp.enabled ? "none"
                                                                                         : "sum";
  f.concurrency = std::max(1u, spec.max_fan_in);
  f.min_scale = 1;
  f.max_scale = std::max(1u, spec.max_leaves);
  f.timeout_s = config.default_timeout_s;
  f.keep_alive_s = config.default_keep_alive_s;
  f.max_body_bytes = config.max_body_bytes;
  f.generation = spec.generation;
  return f;
}

Status InitJob(FlCoordinator::JobState& job) {
  auto algo = MakeJobAlgorithm(job.spec);
  if (!algo.ok()) return algo.status();
  job.algo = std::move(*algo);
  // Only Δ-based algorithms read old versions; the others keep none (a model can be large).
  if (job.algo->needs_base_versions()) {
    job.store = std::make_unique<agg::VersionStore>(job.spec.staleness_limit);
  }
  if (job.spec.algorithm == "fedcompass") {
    job.scheduler = std::make_unique<agg::FedCompassScheduler>(LibraryParams(job.spec).fedcompass);
  }
  const FlJobSpec& s = job.spec;
  const uint32_t min_round =
      s.round_deadline_s > 0 ? std::max(1u, s.quorum) : (s.quorum > 0 ? s.quorum : s.clients);
  SHOAL_RETURN_IF_ERROR(CheckRobustSpec(s, job.algo->synchronous(), min_round));
  SHOAL_RETURN_IF_ERROR(privacy::CheckDpSpec(s, job.algo->synchronous()));
  if (s.durability.partial_sums() && !job.partial_writer) {
    job.partial_writer = std::make_unique<PartialCheckpointWriter>();
  }
  if (s.privacy.dp.enabled) {
    auto dp = MakeDpState(s);
    if (!dp.ok()) return dp.status();
    job.dp = std::move(*dp);
  }
  return InitSecureAggregation(job);
}

}  // namespace coordinator_internal

FlCoordinator::FlCoordinator(const NodeConfig& config)
    : config_(config),
      writer_(std::make_unique<CheckpointWriter>(
          std::chrono::milliseconds(config.fl_checkpoint_delay_ms))),
      merge_pool_(std::make_unique<agg::FoldPool>()),
      robust_(std::make_unique<RobustCommitter>()) {
  members_ = std::make_unique<FlMembers>(config);
  if (config.fl_checkpoint_delay_ms > 0) {
    spdlog::warn(
        "fl: checkpoints are written {} ms behind their commits "
        "(fl_checkpoint_delay_ms, for tests)",
        config.fl_checkpoint_delay_ms);
  }
  committer_ = std::thread([this] { CommitLoop(); });
}

FlCoordinator::~FlCoordinator() {
  SignalStop(commit_mu_, stopping_, commit_cv_);
  committer_.join();
  writer_.reset();  // writes what is queued while the jobs' pools are still there
}

std::shared_ptr<FlCoordinator::JobState> FlCoordinator::Find(const std::string& job) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(job);
  return it == jobs_.end() || it->second->deleted ? nullptr : it->second;
}

std::string FlCoordinator::LeafFunction(std::string_view job) { return "fl." + std::string(job); }

std::vector<FunctionSpec> FlCoordinator::LeafSpecs() {
  std::vector<FunctionSpec> out;
  {
    std::lock_guard lock(mu_);
    for (const auto& [name, job] : jobs_) {
      if (job->deleted) continue;
      out.push_back(LeafSpec(job->spec, job->leaf_id, LeafFunction(name), config_));
    }
  }
  // Cluster mode: the leaves of the jobs this node folds for tops elsewhere.
  for (auto& f : members_->LeafSpecs([this](std::string_view job) { return LeafFunction(job); })) {
    out.push_back(std::move(f));
  }
  return out;
}

// ---- jobs -----------------------------------------------------------------------------------

Status FlCoordinator::DeployJob(const FlJobSpec& in) {
  auto job = std::make_shared<JobState>();
  job->spec = in;
  SHOAL_RETURN_IF_ERROR(InitJob(*job));
  std::vector<float> onnx_values;
  auto mspec = JobModelSpec(in, &onnx_values);
  if (!mspec.ok()) return mspec.status();
  job->mspec = *mspec;
  if (!onnx_values.empty() && in.initial_model.empty()) {
    job->state.weights = std::move(onnx_values);  // the ONNX file's values start the job
  } else if (!in.initial_model.empty()) {
    std::ifstream f(in.initial_model, std::ios::binary);
    if (!f) return InvalidArgument("spec.model.initial: cannot read " + in.initial_model);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto m = model::ModelFromSafetensors(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
        job->mspec);
    if (!m.ok()) return InvalidArgument("spec.model.initial: " + m.status().message());
    job->state.weights = std::move(m->values);
  } else {
    job->state.weights = model::InitModel(job->mspec, in.seed).values;
  }
  uint64_t durable = 0;  // the deployed job is on disk before the deploy answers
  for (;;) {
    // Lock order: a job's mu, then mu_ (AdmitHeader and Recover take them so). A re-deploy
    // locks the running job first and then checks under mu_ that it is still the one deployed;
    // taking mu_ first deadlocked against an admission of the job's updates.
    std::shared_ptr<JobState> running = Find(in.name);
    std::unique_lock<std::mutex> jl;
    if (running) jl = std::unique_lock(running->mu);
    std::lock_guard lock(mu_);
    auto it = jobs_.find(in.name);
    const bool deployed = it != jobs_.end() && !it->second->deleted;
    if (deployed && it->second != running) continue;  // deployed since Find: look again
    if (deployed) {
      // A re-deploy keeps the job's progress; only limits and stop conditions change.
      if (it->second->spec.algorithm != in.algorithm ||
          it->second->spec.architecture != in.architecture ||
          it->second->spec.hidden != in.hidden) {
        return InvalidArgument("spec.algorithm/spec.model: job '" + in.name +
                               "' exists with another algorithm or model; delete it first");
      }
      if (it->second->spec.robust.enabled() != in.robust.enabled()) {  // rule changes are fine
        return InvalidArgument("spec.aggregation.robust: job '" + in.name + "' exists " +
                               (in.robust.enabled() ? "without" : "with") +
                               " a robust rule (its rounds are kept differently); delete it first");
      }
      if (it->second->spec.privacy.dp.enabled != in.privacy.dp.enabled) {
        return InvalidArgument("spec.privacy.dp: job '" + in.name + "' exists " +
                               (in.privacy.dp.enabled ? "without" : "with") +
                               " differential privacy (its spend is accounted from the first "
                               "version); delete it first");
      }
      FlJobSpec updated = in;
      updated.generation = it->second->spec.generation + 1;
      it->second->spec = updated;
      durable = Persist(it->second, /*with_model=*/false);
    } else {
      job->spec.generation = 1;
      job->leaf_id = next_leaf_id_--;
      job->KeepVersion();
      job->AddVersion({0, std::nullopt, std::nullopt, 0, 0});
      job->CacheModel();
      job->dir = JobsRoot() + "/" + in.name;
      std::error_code ec;
      std::filesystem::create_directories(job->dir, ec);
      std::filesystem::remove(job->dir + "/updates.log", ec);
      std::filesystem::remove(ClientLog::Path(job->dir), ec);
      SHOAL_RETURN_IF_ERROR(job->log.Open(job->dir));
      SHOAL_RETURN_IF_ERROR(job->client_log.Open(job->dir));
      job->algo->Start(job->Elapsed());
      if (job->spec.round_deadline_s > 0) job->round_deadline = job->spec.round_deadline_s;
      durable = Persist(job);
      jobs_[in.name] = job;
      spdlog::info(
          "fl job {}: {} on {} ({} parameters), {} clients expected, leaves: function "
          "{} (fan-in {}, up to {})",
          in.name, in.algorithm, in.architecture, job->mspec.num_params(), in.clients,
          LeafFunction(in.name), in.max_fan_in, in.max_leaves);
    }
    break;
  }
  writer_->Wait(durable);
  if (auto job = Find(in.name)) {
    (void)job->FlushClientLog();  // logged
    PrepareSpareModel(*job);
  }
  if (on_change_) on_change_();
  return {};
}

Status FlCoordinator::DeleteJob(const std::string& name) { return RemoveJob(name, false); }

Status FlCoordinator::DropJob(const std::string& name) { return RemoveJob(name, true); }

Status FlCoordinator::RemoveJob(const std::string& name, bool keep_checkpoint) {
  std::shared_ptr<JobState> job;
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(name);
    if (it == jobs_.end() || it->second->deleted)
      return NotFound("FL job '" + name + "' not found");
    job = it->second;
    job->deleted = true;
    jobs_.erase(it);
  }
  {
    std::lock_guard jl(job->mu);
    // Buffers still held for uncommitted updates go back to the pool.
    if (job->pool != nullptr) {
      for (auto& [id, t] : job->tickets) {
        job->ReleaseBuffer(t.buffer, kCoordinatorSlot, "an uncommitted update");
      }
      for (const auto& u : job->undurable) {
        for (uint64_t b : u.buffers) job->ReleaseBuffer(b, kCoordinatorSlot, "an undurable update");
      }
      for (uint64_t off : job->warm_partials) {
        job->ReleaseBuffer(off, kShoaldSlot, "a warm partial sum");
      }
      if (job->sink != 0) job->ReleaseBuffer(job->sink, kShoaldSlot, "the leaves' sink");
      job->sink = 0;
      for (auto& [id, r] : job->rounds) {
        for (auto& [inst, p] : r.partials) {
          if (p.offset != 0) {
            job->ReleaseBuffer(p.offset, kShoaldSlot, "an open round's partial sum");
          }
        }
      }
    }
    job->tickets.clear();
    job->rounds.clear();
    job->undurable.clear();
    job->warm_partials.clear();
  }
  writer_->Flush();  // no queued checkpoint of the job writes its directory again
  if (keep_checkpoint) {
    spdlog::info("fl job {} stopped here (its checkpoint stays for the node that runs it now)",
                 name);
  } else {
    std::error_code ec;
    std::filesystem::remove_all(JobsRoot() + "/" + name, ec);
    spdlog::info("fl job {} deleted", name);
  }
  if (on_change_) on_change_();
  return {};
}

Result<TaskResult> FlCoordinator::Task(const std::string& name, const std::string& client_id,
                                       const std::string& token) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  std::lock_guard jl(job->mu);
  auto it = job->clients.find(client_id);
  if (it == job->clients.end()) return NotFound("unknown client '" + client_id + "'");
  if (it->second.token != token)
    return PermissionDenied("bad token for client '" + client_id + "'");
  TaskResult t;
  if (job->done) {
    t.kind = TaskResult::Kind::kDone;
    return t;
  }
  if (job->Sync() && it->second.submitted_round != UINT64_MAX &&
      (job->rounds.count(it->second.submitted_round) != 0 ||
       job->committing_round == it->second.submitted_round)) {
    // Its update for this round is in; the next task comes with the next version.
    t.kind = TaskResult::Kind::kWait;
    t.retry_after_ms = 200;
    return t;
  }
  t.kind = TaskResult::Kind::kTrain;
  t.model_version = job->version();
  t.local_steps = job->spec.local_steps;
  t.learning_rate = job->spec.learning_rate;
  t.batch_size = job->spec.batch_size;
  if (job->Compass()) {
    JobState::CompassTask& c = job->compass_tasks[client_id];
    if (!c.started) {
      // Start: every client trains Q_max steps from the initial model; the scheduler's clock
      // starts with the first fetch.
      job->scheduler->Start(job->Elapsed());
      c.started = true;
      c.ready = true;
      c.steps = job->spec.local_steps;
      c.version = job->version();
    }
    if (!c.ready) {
      t.kind = TaskResult::Kind::kWait;
      t.retry_after_ms = 100;
      return t;
    }
    c.ready = false;
    t.model_version = std::max(c.version, job->version());
    t.local_steps = c.steps;
  }
  return t;
}

std::vector<std::string> FlCoordinator::ListJobs() {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, job] : jobs_) out.push_back(name);
  return out;
}

Result<std::string> FlCoordinator::JobNamespace(const std::string& name) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  std::lock_guard jl(job->mu);
  return job->spec.tenant;
}

Result<JoinResult> FlCoordinator::Join(const std::string& name, const std::string& client_name,
                                       const std::string& join_token) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  JobState::Client c;
  {
    std::lock_guard jl(job->mu);
    const auto& tokens = job->spec.join_tokens;
    if (!tokens.empty() && std::find(tokens.begin(), tokens.end(), join_token) == tokens.end()) {
      return PermissionDenied("job '" + name + "' needs a valid join token");
    }
    c.id = "c" + std::to_string(job->next_client++);
    c.name = client_name.empty() ? c.id : client_name;
    c.token = RandomToken();
    job->QueueJoin(c);
  }
  // The client's token is on disk before the client has it (a restart still knows it): one
  // line appended to clients.log, the same few bytes whatever the number of clients (the whole
  // table in state.json, rewritten on each join, made a join storm quadratic); written without
  // the job's lock, and the client is in the table once it is (an id whose line could not be
  // written is not used again).
  if (Status st = job->FlushClientLog(); !st.ok()) {
    return Unavailable("job '" + name + "' cannot record a join now: " + st.message());
  }
  std::lock_guard jl(job->mu);
  job->clients.emplace(c.id, c);
  return JoinResult{c.id, c.token};
}

Result<ModelBlob> FlCoordinator::Model(const std::string& name, std::optional<uint64_t> version) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  std::lock_guard jl(job->mu);
  const uint64_t v = version.value_or(job->version());
  std::shared_ptr<std::string> bytes = job->models.Find(v);
  if (!bytes) {
    return NotFound("model version " + std::to_string(v) + " of job '" + name +
                    "' is not kept (current " + std::to_string(job->version()) + ")");
  }
  return ModelBlob{v, std::move(bytes)};
}

Status FlCoordinator::Evaluate(const std::string& name, const EvalReport& r) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  std::unique_lock jl(job->mu);
  bool flush = false;
  auto it = job->clients.find(r.client_id);
  if (it == job->clients.end()) return NotFound("unknown client '" + r.client_id + "'");
  if (it->second.token != r.token)
    return PermissionDenied("bad token for client '" + r.client_id + "'");
  if (!(r.accuracy >= 0 && r.accuracy <= 1) || !std::isfinite(r.loss)) {
    return InvalidArgument("accuracy must be in [0,1] and loss finite");
  }
  for (auto& v : job->versions) {
    if (v.version != r.version) continue;
    v.accuracy = r.accuracy;
    v.loss = r.loss;
    job->best_accuracy = std::max(job->best_accuracy, r.accuracy);
    if (job->spec.target_accuracy > 0 && r.accuracy >= job->spec.target_accuracy && !job->done) {
      job->done = true;
      spdlog::info("fl job {}: version {} reached accuracy {:.4f} (target {}): done", name,
                   r.version, r.accuracy, job->spec.target_accuracy);
    }
    Persist(job, /*with_model=*/false);
    flush = true;
    break;
  }
  if (!flush) {
    return NotFound("version " + std::to_string(r.version) + " of job '" + name + "' unknown");
  }
  jl.unlock();
  (void)job->FlushClientLog();  // logged
  if (on_status_) on_status_(name);
  return {};
}

}  // namespace shoal
