#include "shoal/aggregator/fl_coordinator.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "job_state.h"
#include "shoal/aggregator/fl_members.h"
#include "shoal/aggregator/fold_pool.h"
#include "shoal/v1/fl.pb.h"

namespace shoal {

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

// The manifest's spec.algorithm.params (names as users write them) mapped onto the library's
// parameter structs; every default is the library's (written once, in algorithms.h).
const std::map<std::string, std::vector<std::string>>& KnownParams() {
  static const std::map<std::string, std::vector<std::string>> kParams = {
      {"fedavg", {}},
      {"fedavgm", {"beta", "eta"}},
      {"fedadam", {"eta", "beta1", "beta2", "tau"}},
      {"fedasync", {"alpha", "a"}},
      {"fedbuff", {"k", "eta", "a"}},
      {"fedfix", {"period", "total_samples"}},
      {"fedcompass", {"alpha", "a", "q_min", "lambda", "momentum"}},
  };
  return kParams;
}

agg::AlgorithmParams LibraryParams(const FlJobSpec& s) {
  agg::AlgorithmParams p;
  p.fedavgm.beta = Param(s, "beta", p.fedavgm.beta);
  p.fedavgm.eta = Param(s, "eta", p.fedavgm.eta);
  p.fedadam.eta = Param(s, "eta", p.fedadam.eta);
  p.fedadam.beta1 = Param(s, "beta1", p.fedadam.beta1);
  p.fedadam.beta2 = Param(s, "beta2", p.fedadam.beta2);
  p.fedadam.tau = Param(s, "tau", p.fedadam.tau);
  p.fedasync.alpha = Param(s, "alpha", p.fedasync.alpha);
  p.fedasync.staleness_exponent = Param(s, "a", p.fedasync.staleness_exponent);
  p.fedbuff.buffer_size = static_cast<uint32_t>(Param(s, "k", p.fedbuff.buffer_size));
  p.fedbuff.eta_g = Param(s, "eta", p.fedbuff.eta_g);
  p.fedbuff.staleness_exponent = Param(s, "a", p.fedbuff.staleness_exponent);
  p.fedfix.period_s = Param(s, "period", p.fedfix.period_s);
  p.fedfix.total_samples = Param(s, "total_samples", p.fedfix.total_samples);
  p.fedcompass.alpha = Param(s, "alpha", p.fedcompass.alpha);
  p.fedcompass.staleness_exponent = Param(s, "a", p.fedcompass.staleness_exponent);
  p.fedcompass.num_clients = s.clients;
  p.fedcompass.q_max = s.local_steps;
  p.fedcompass.q_min = static_cast<uint32_t>(Param(s, "q_min", p.fedcompass.q_min));
  p.fedcompass.latest_time_factor = Param(s, "lambda", p.fedcompass.latest_time_factor);
  p.fedcompass.speed_momentum = Param(s, "momentum", p.fedcompass.speed_momentum);
  return p;
}

Result<std::unique_ptr<agg::AggregationAlgorithm>> MakeJobAlgorithm(const FlJobSpec& s) {
  auto known = KnownParams().find(s.algorithm);
  if (known == KnownParams().end()) {
    return InvalidArgument("spec.algorithm.name: '" + s.algorithm +
                           "' is not an algorithm (fedavg, fedavgm, fedadam, fedasync, fedbuff, "
                           "fedfix, fedcompass)");
  }
  for (const auto& [k, v] : s.algorithm_params) {
    if (std::find(known->second.begin(), known->second.end(), k) == known->second.end()) {
      return InvalidArgument("spec.algorithm.params." + k + ": not a parameter of " + s.algorithm);
    }
    if (!std::isfinite(v) || v < 0) {
      return InvalidArgument("spec.algorithm.params." + k + ": must be a finite number >= 0");
    }
  }
  if (s.clients == 0) return InvalidArgument("spec.clients.expected: must be >= 1");
  if (s.algorithm == "fedcompass" && Param(s, "q_min", 20) > s.local_steps) {
    return InvalidArgument("spec.algorithm.params.q_min: must be <= spec.training.localSteps (Q_max)");
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

FunctionSpec LeafSpec(const FlJobSpec& spec, uint32_t id, std::string name,
                      const NodeConfig& config) {
  FunctionSpec f;
  f.id = id;
  f.name = std::move(name);
  f.tenant = spec.tenant;
  f.handler.builtin = "fl-leaf";
  f.handler.env["SHOAL_FL_ARCH"] = spec.architecture;
  f.handler.env["SHOAL_FL_HIDDEN"] = std::to_string(spec.hidden);
  f.handler.env["SHOAL_FL_INPUTS"] = std::to_string(JobArchitecture(spec).inputs);
  f.handler.env["SHOAL_FL_AGG_DEVICE"] = spec.aggregation_device;  // the leaf's fold device
  // A robust job's leaves validate and answer; the rule runs at the top (robust_commit.h).
  f.handler.env["SHOAL_FL_FOLD"] = spec.robust.enabled() ? "none" : "sum";
  f.concurrency = std::max(1u, spec.max_fan_in);
  f.min_scale = 1;
  f.max_scale = std::max(1u, spec.max_leaves);
  f.timeout_s = config.default_timeout_s;
  f.keep_alive_s = config.default_keep_alive_s;
  f.max_body_bytes = config.max_body_bytes;
  f.generation = spec.generation;
  return f;
}

Json SpecToJson(const FlJobSpec& s) {
  return Json{{"name", s.name},
              {"tenant", s.tenant},
              {"algorithm", s.algorithm},
              {"algorithm_params", s.algorithm_params},
              {"architecture", s.architecture},
              {"hidden", s.hidden},
              {"initial_model", s.initial_model},
              {"seed", s.seed},
              {"dataset", s.dataset},
              {"clients", s.clients},
              {"quorum", s.quorum},
              {"rounds", s.rounds},
              {"target_accuracy", s.target_accuracy},
              {"round_deadline_s", s.round_deadline_s},
              {"local_steps", s.local_steps},
              {"learning_rate", s.learning_rate},
              {"batch_size", s.batch_size},
              {"staleness_limit", s.staleness_limit},
              {"max_fan_in", s.max_fan_in},
              {"max_leaves", s.max_leaves},
              {"robust",
               {{"rule", s.robust.rule},
                {"beta", s.robust.beta},
                {"f", s.robust.f},
                {"m", s.robust.m},
                {"rank", s.robust.rank},
                {"clip_norm", s.robust.clip_norm},
                {"clip_median", s.robust.clip_median}}},
              {"join_tokens", s.join_tokens},
              {"generation", s.generation},
              {"manifest", s.manifest}};
}

FlJobSpec SpecFromJson(const Json& j) {
  FlJobSpec s;
  s.name = j.value("name", "");
  s.tenant = j.value("tenant", "default");
  s.algorithm = j.value("algorithm", "fedavg");
  s.algorithm_params = j.value("algorithm_params", std::map<std::string, double>{});
  s.architecture = j.value("architecture", "mlp");
  s.hidden = j.value("hidden", 128u);
  s.initial_model = j.value("initial_model", "");
  s.seed = j.value("seed", uint64_t{1});
  s.dataset = j.value("dataset", "fashion-mnist");
  s.clients = j.value("clients", 1u);
  s.quorum = j.value("quorum", 0u);
  s.rounds = j.value("rounds", 0u);
  s.target_accuracy = j.value("target_accuracy", 0.0);
  s.round_deadline_s = j.value("round_deadline_s", 0.0);
  s.local_steps = j.value("local_steps", 100u);
  s.learning_rate = j.value("learning_rate", 0.1);
  s.batch_size = j.value("batch_size", 32u);
  s.staleness_limit = j.value("staleness_limit", 20u);
  s.max_fan_in = j.value("max_fan_in", 8u);
  s.max_leaves = j.value("max_leaves", 4u);
  if (j.contains("robust") && j["robust"].is_object()) {
    const Json& r = j["robust"];
    s.robust.rule = r.value("rule", std::string("none"));
    s.robust.beta = r.value("beta", s.robust.beta);
    s.robust.f = r.value("f", s.robust.f);
    s.robust.m = r.value("m", s.robust.m);
    s.robust.rank = r.value("rank", s.robust.rank);
    s.robust.clip_norm = r.value("clip_norm", 0.0);
    s.robust.clip_median = r.value("clip_median", false);
  }
  s.join_tokens = j.value("join_tokens", std::vector<std::string>{});
  s.generation = j.value("generation", uint64_t{1});
  s.manifest = j.value("manifest", "");
  return s;
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
  const uint32_t min_round = s.round_deadline_s > 0 ? std::max(1u, s.quorum)
                                                    : (s.quorum > 0 ? s.quorum : s.clients);
  return CheckRobustSpec(s, job.algo->synchronous(), min_round);
}

}  // namespace coordinator_internal

namespace {

// Off the commit's critical path (the job's lock is not held while the pages are touched): a
// warm blob for the next version's model bytes, so that CacheModel neither allocates nor
// faults in 11 k fresh pages per ResNet-sized commit.
void PrepareSpareModel(FlCoordinator::JobState& job) {
  size_t bytes;
  {
    std::lock_guard jl(job.mu);
    if (job.deleted || !job.spare_models.empty() || job.models.empty()) return;
    bytes = job.models.rbegin()->second->size();
  }
  auto blob = std::make_shared<std::string>();
  blob->resize(bytes + 64);  // zero-filled: every page touched (the next header may be longer)
  blob->resize(bytes);       // the capacity stays
  std::lock_guard jl(job.mu);
  if (job.spare_models.empty()) job.spare_models.push_back(std::move(blob));
}

// Also behind the commits: zeroes `reuse` (partial sums of committed rounds, held with
// kShoaldSlot) and, up to the job's want, newly allocated ones, without the job's lock, then
// offers them to PartialFor.
void PrepareWarmPartials(FlCoordinator::JobState& job, std::vector<uint64_t> reuse) {
  size_t bytes;
  BufferPool* pool;
  {
    std::lock_guard jl(job.mu);
    pool = job.pool;
    if (pool == nullptr) return;
    bytes = job.mspec.num_params() * sizeof(float);
    if (job.deleted) {
      for (uint64_t off : reuse) (void)pool->Release(off, kShoaldSlot);
      return;
    }
    while (job.warm_partials.size() > job.WarmPartialsWanted()) {  // a job that is done
      (void)pool->Release(job.warm_partials.back(), kShoaldSlot);
      job.warm_partials.pop_back();
    }
    while (job.warm_partials.size() + reuse.size() < job.WarmPartialsWanted()) {
      auto off = pool->Allocate(bytes, kShoaldSlot);
      if (!off.ok()) break;  // a full pool: PartialFor allocates when it must
      reuse.push_back(*off);
    }
  }
  if (reuse.empty()) return;
  for (uint64_t off : reuse) std::memset(pool->Data(off).data(), 0, bytes);
  std::lock_guard jl(job.mu);
  for (uint64_t off : reuse) {
    if (job.deleted || job.warm_partials.size() >= job.WarmPartialsWanted()) {
      (void)pool->Release(off, kShoaldSlot);
    } else {
      job.warm_partials.push_back(off);
    }
  }
}

}  // namespace

FlCoordinator::FlCoordinator(const NodeConfig& config)
    : config_(config),
      writer_(std::make_unique<CheckpointWriter>(
          std::chrono::milliseconds(config.fl_checkpoint_delay_ms))),
      merge_pool_(std::make_unique<agg::FoldPool>()),
      robust_(std::make_unique<RobustCommitter>()) {
  members_ = std::make_unique<FlMembers>(config);
  if (config.fl_checkpoint_delay_ms > 0) {
    spdlog::warn("fl: checkpoints are written {} ms behind their commits "
                 "(fl_checkpoint_delay_ms, for tests)",
                 config.fl_checkpoint_delay_ms);
  }
  committer_ = std::thread([this] { CommitLoop(); });
}

FlCoordinator::~FlCoordinator() {
  {
    std::lock_guard lock(commit_mu_);
    stopping_ = true;
  }
  commit_cv_.notify_all();
  committer_.join();
  writer_.reset();  // writes what is queued while the jobs' pools are still there
}

std::shared_ptr<FlCoordinator::JobState> FlCoordinator::Find(const std::string& job) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(job);
  return it == jobs_.end() || it->second->deleted ? nullptr : it->second;
}

std::string FlCoordinator::LeafFunction(std::string_view job) {
  return "fl." + std::string(job);
}

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
  auto mspec = model::ArchitectureSpec(in.architecture, JobArchitecture(in));
  if (!mspec.ok()) {
    return InvalidArgument("spec.model.architecture: " + mspec.status().message());
  }
  job->mspec = *mspec;
  if (!in.initial_model.empty()) {
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
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(in.name);
    if (it != jobs_.end() && !it->second->deleted) {
      // A re-deploy keeps the job's progress; only limits and stop conditions change.
      std::lock_guard jl(it->second->mu);
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
      SHOAL_RETURN_IF_ERROR(job->OpenLog());
      job->algo->Start(job->Elapsed());
      if (job->spec.round_deadline_s > 0) job->round_deadline = job->spec.round_deadline_s;
      durable = Persist(job);
      jobs_[in.name] = job;
      spdlog::info("fl job {}: {} on {} ({} parameters), {} clients expected, leaves: function "
                   "{} (fan-in {}, up to {})",
                   in.name, in.algorithm, in.architecture, job->mspec.num_params(), in.clients,
                   LeafFunction(in.name), in.max_fan_in, in.max_leaves);
    }
  }
  writer_->Wait(durable);
  if (auto job = Find(in.name)) PrepareSpareModel(*job);
  if (on_change_) on_change_();
  return {};
}

Status FlCoordinator::DeleteJob(const std::string& name) {
  std::shared_ptr<JobState> job;
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(name);
    if (it == jobs_.end() || it->second->deleted) return NotFound("FL job '" + name + "' not found");
    job = it->second;
    job->deleted = true;
    jobs_.erase(it);
  }
  {
    std::lock_guard jl(job->mu);
    // Buffers still held for uncommitted updates go back to the pool.
    if (job->pool != nullptr) {
      for (auto& [id, t] : job->tickets) (void)job->pool->Release(t.buffer, kCoordinatorSlot);
      for (const auto& u : job->undurable) {
        for (uint64_t b : u.buffers) (void)job->pool->Release(b, kCoordinatorSlot);
      }
      for (uint64_t off : job->warm_partials) (void)job->pool->Release(off, kShoaldSlot);
      for (auto& [id, r] : job->rounds) {
        for (auto& [inst, p] : r.partials) {
          if (p.offset != 0) (void)job->pool->Release(p.offset, kShoaldSlot);
        }
      }
    }
    job->tickets.clear();
    job->rounds.clear();
    job->undurable.clear();
    job->warm_partials.clear();
  }
  writer_->Flush();  // no queued checkpoint of the job writes its directory again
  std::error_code ec;
  std::filesystem::remove_all(JobsRoot() + "/" + name, ec);
  spdlog::info("fl job {} deleted", name);
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
  if (it->second.token != token) return PermissionDenied("bad token for client '" + client_id + "'");
  TaskResult t;
  if (job->done) {
    t.kind = TaskResult::Kind::kDone;
    return t;
  }
  if (job->Sync() && it->second.submitted_round != UINT64_MAX &&
      job->rounds.count(it->second.submitted_round) != 0) {
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
  uint64_t durable;
  {
    std::lock_guard jl(job->mu);
    const auto& tokens = job->spec.join_tokens;
    if (!tokens.empty() && std::find(tokens.begin(), tokens.end(), join_token) == tokens.end()) {
      return PermissionDenied("job '" + name + "' needs a valid join token");
    }
    c.id = "c" + std::to_string(job->next_client++);
    c.name = client_name.empty() ? c.id : client_name;
    c.token = RandomToken();
    job->clients[c.id] = c;
    durable = Persist(job, /*with_model=*/false);
  }
  // The client's token is on disk before the client has it (a restart still knows it).
  writer_->Wait(durable);
  return JoinResult{c.id, c.token};
}

Result<ModelBlob> FlCoordinator::Model(const std::string& name, std::optional<uint64_t> version) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  std::lock_guard jl(job->mu);
  const uint64_t v = version.value_or(job->version());
  auto it = job->models.find(v);
  if (it == job->models.end()) {
    return NotFound("model version " + std::to_string(v) + " of job '" + name +
                    "' is not kept (current " + std::to_string(job->version()) + ")");
  }
  return ModelBlob{v, it->second};
}

Status FlCoordinator::Evaluate(const std::string& name, const EvalReport& r) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  std::lock_guard jl(job->mu);
  auto it = job->clients.find(r.client_id);
  if (it == job->clients.end()) return NotFound("unknown client '" + r.client_id + "'");
  if (it->second.token != r.token) return PermissionDenied("bad token for client '" + r.client_id + "'");
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
    return {};
  }
  return NotFound("version " + std::to_string(r.version) + " of job '" + name + "' unknown");
}

// ---- the update path ------------------------------------------------------------------------

Result<FlAdmission> FlCoordinator::Admit(std::string_view name, BufferPool& pool,
                                         std::span<const std::byte> body, uint64_t buffer) {
  auto job = Find(std::string(name));
  if (!job) {
    if (members_->Has(name)) return members_->Admit(name, pool, body, buffer, {});
    return NotFound("FL job '" + std::string(name) + "' not found");
  }
  // Only the header is read here (on a gateway loop); the leaf validates the tensors.
  shoal::v1::UpdateHeader h;
  SHOAL_RETURN_IF_ERROR(ParseUpdateHead(body, &h, nullptr));
  auto t = AdmitHeader(job, name, h, &pool, buffer, {});
  if (!t.ok()) return t.status();
  return FlAdmission{t->ticket, static_cast<float>(t->coefficient)};
}

Result<FlCoordinator::HeaderAdmission> FlCoordinator::AdmitHeader(
    const std::shared_ptr<JobState>& job, std::string_view name, const shoal::v1::UpdateHeader& h,
    BufferPool* pool, uint64_t buffer, const std::string& node) {
  std::lock_guard jl(job->mu);
  if (h.job() != name) {
    return InvalidArgument("update is for job '" + h.job().substr(0, 64) + "', not '" +
                           std::string(name) + "'");
  }
  auto cit = job->clients.find(h.client_id());
  if (cit == job->clients.end()) return NotFound("unknown client '" + h.client_id().substr(0, 64) + "'");
  JobState::Client& client = cit->second;
  if (client.token != h.token()) return PermissionDenied("bad token for client '" + client.id + "'");
  if (job->done) return AlreadyExists("job '" + std::string(name) + "' is done");
  if (h.num_samples() == 0) return InvalidArgument("num_samples must be > 0");
  const uint64_t version = job->version();
  if (h.base_version() > version) {
    return InvalidArgument("base version " + std::to_string(h.base_version()) +
                           " is newer than the current version " + std::to_string(version));
  }
  const uint64_t staleness = version - h.base_version();
  const bool sync = job->Sync();
  if (sync && staleness != 0) {
    return AlreadyExists("stale update: trained from version " + std::to_string(h.base_version()) +
                         ", the round is for version " + std::to_string(version));
  }
  if (staleness > job->spec.staleness_limit ||
      (job->store && !job->store->Get(h.base_version()).ok())) {
    return AlreadyExists("stale update: base version " + std::to_string(h.base_version()) +
                         " is older than the staleness limit (current " +
                         std::to_string(version) + ", limit " +
                         std::to_string(job->spec.staleness_limit) + ")");
  }
  if (sync && client.submitted_round == job->open_round) {
    return AlreadyExists("client '" + client.id + "' already sent an update for this round");
  }
  const double now = job->Elapsed();
  std::optional<agg::CompassDecision> decision;
  if (job->Compass()) {
    auto d = job->scheduler->OnArrival(NumericId(client.id), now);
    if (!d.ok()) return AlreadyExists(d.status().message());
    decision = std::move(*d);
  }
  if (pool != nullptr) {
    if (Status st = pool->Retain(buffer, kCoordinatorSlot); !st.ok()) {
      return Internal("cannot hold the update buffer: " + st.message());
    }
    job->pool = pool;
  }
  client.samples = h.num_samples();
  client.last_update_steps = h.local_steps();
  agg::UpdateMeta meta;
  meta.client_id = NumericId(client.id);
  meta.num_samples = static_cast<double>(h.num_samples());
  meta.base_version = h.base_version();
  // Staleness taken at commit (FedCompass): the leaf folds the u = 0 weight.
  meta.current_version = job->algo->staleness_at_commit() ? h.base_version() : version;
  meta.arrival_time = now;
  meta.total_samples = job->TotalSamples();
  const double coefficient = job->algo->Coefficient(meta);

  uint64_t round_id = job->open_round;
  if (decision) {
    switch (decision->action) {
      case agg::CompassAction::kApplyAlone:
        // First arrival: applied alone at once; the client's group assignment comes with it.
        round_id = job->NewRound();
        job->rounds[round_id].closed = true;
        job->rounds[round_id].assignments = decision->assignments;
        break;
      case agg::CompassAction::kBufferedInGroup:
        round_id = job->GroupRound(decision->group);
        break;
      case agg::CompassAction::kBufferedGeneral:
        // Late: the general buffer, and a new assignment at once from the current model.
        if (job->general_round == 0) job->general_round = job->NewRound();
        round_id = job->general_round;
        for (const auto& a : decision->assignments) job->SetTask(a);
        break;
      case agg::CompassAction::kAggregateGroup:
        round_id = job->GroupRound(decision->group);
        job->CloseGroup(*decision);
        break;
    }
  }
  JobState::Round& round = job->rounds[round_id];
  JobState::Ticket t;
  t.round = round_id;
  t.client = client.id;
  t.buffer = buffer;
  t.base_version = h.base_version();
  t.staleness = staleness;
  t.num_samples = h.num_samples();
  t.coefficient = coefficient;
  t.node = node;  // another node's update: folded there, into that node's one partial sum
  if (!node.empty()) t.partial = job->RemoteKey(node);
  ++round.admitted;
  ++round.inflight;
  client.submitted_round = round_id;
  if (!job->Compass()) {
    // The round takes no more updates once it is due; later ones go to the next round.
    const bool due = sync ? round.admitted >= job->Needed()
                          : job->algo->ShouldCommit(round.admitted, now) &&
                                job->algo->NextCommitTime() == std::nullopt;
    if (due) {
      round.closed = true;
      ++job->open_round;
      if (sync && job->spec.round_deadline_s > 0) {
        job->round_deadline = now + job->spec.round_deadline_s;
      }
    }
  }
  std::lock_guard lock(mu_);
  const uint64_t id = next_ticket_++;
  job->tickets[id] = t;
  by_ticket_[id] = job;
  return HeaderAdmission{id, round_id, coefficient};
}

Result<uint64_t> FlCoordinator::PartialFor(uint64_t ticket, uint32_t instance) {
  if (ticket & FlMembers::kTicketBit) return members_->PartialFor(ticket, instance);
  std::shared_ptr<JobState> job;
  {
    std::lock_guard lock(mu_);
    auto it = by_ticket_.find(ticket);
    if (it == by_ticket_.end()) return NotFound("ticket " + std::to_string(ticket) + " unknown");
    job = it->second;
  }
  std::lock_guard jl(job->mu);
  auto tit = job->tickets.find(ticket);
  if (tit == job->tickets.end()) return NotFound("ticket gone");
  tit->second.instance = instance;
  if (job->Robust()) {
    // No partial sum: the leaf validates only (offset 0, "none"); the update is listed under
    // the round's partial 0 once acknowledged.
    tit->second.partial = 0;
    return uint64_t{0};
  }
  const uint64_t key = job->PartialKey(instance, tit->second.base_version);
  tit->second.partial = key;
  JobState::Round& round = job->rounds[tit->second.round];
  auto pit = round.partials.find(key);
  if (pit != round.partials.end()) return pit->second.offset;
  uint64_t off;
  if (!job->warm_partials.empty()) {
    off = job->warm_partials.back();
    job->warm_partials.pop_back();
    Enqueue(job);  // the commit thread zeroes the next one
  } else {
    const size_t bytes = job->mspec.num_params() * sizeof(float);
    auto fresh = job->pool->Allocate(bytes, kShoaldSlot);
    if (!fresh.ok()) return fresh.status();
    off = *fresh;
    std::memset(job->pool->Data(off).data(), 0, bytes);
  }
  round.partials[key].offset = off;
  round.partials[key].base = tit->second.base_version;
  return off;
}

void FlCoordinator::Completed(uint64_t ticket, int http_status, bool leaf_answered) {
  if (ticket & FlMembers::kTicketBit) {
    members_->Completed(ticket, http_status, leaf_answered);
    return;
  }
  std::shared_ptr<JobState> job;
  {
    std::lock_guard lock(mu_);
    auto it = by_ticket_.find(ticket);
    if (it == by_ticket_.end()) return;
    job = it->second;
    by_ticket_.erase(it);
  }
  bool commit = false;
  bool gpu_fallback = false;
  {
    std::lock_guard jl(job->mu);
    auto tit = job->tickets.find(ticket);
    if (tit == job->tickets.end()) return;
    JobState::Ticket& t = tit->second;
    JobState::Round& round = job->rounds[t.round];
    const uint64_t t_round = t.round;
    const std::string t_node = t.node;
    --round.inflight;
    bool counted = false;
    if (http_status >= 200 && http_status < 300) {
      // Logged before the gateway answers 202 (it does once this returns).
      // (Another node's update is in that node's log: it acknowledged it.)
      if (t.node.empty()) {
        t.seq = job->next_seq++;
        if (Status st = job->AppendLog(t); !st.ok()) {
          spdlog::error("fl job {}: {}", job->spec.name, st.ToString());
        }
      }
      t.acked = true;
      counted = true;
      ++round.acked;
      round.partials[t.partial].tickets.push_back(ticket);
      if (!t.node.empty()) {
        round.partials[t.partial].node = t.node;
        ++job->remote_stats[t.node].updates;
      }
      JobState::Client& client = job->clients[t.client];
      ++client.updates;
      client.last_base_version = t.base_version;
      client.last_staleness = t.staleness;
      client.max_staleness = std::max(client.max_staleness, t.staleness);
      ++job->updates_total;
    }
    if (!counted) {
      // Not counted: the client gets the error and may send it again.
      if (job->clients[t.client].submitted_round == t.round) {
        job->clients[t.client].submitted_round = UINT64_MAX;
      }
      // Nor does it count toward closing its round: a round it closed by count opens again
      // (unless updates went to the next round meanwhile), so the update sent again joins it.
      --round.admitted;
      if (round.closed && !job->Compass() && !job->algo->NextCommitTime() &&
          job->open_round == t.round + 1) {
        auto next = job->rounds.find(job->open_round);
        const bool next_empty = next == job->rounds.end() || next->second.admitted == 0;
        const bool still_due = job->Sync()
                                   ? round.admitted >= job->Needed()
                                   : job->algo->ShouldCommit(round.admitted, job->Elapsed());
        if (next_empty && !still_due) {
          if (next != job->rounds.end()) job->rounds.erase(next);
          round.closed = false;
          job->open_round = t.round;
        }
      }
      auto pit = round.partials.find(t.partial);
      if (http_status == 502 && pit != round.partials.end() && t.node.empty()) {
        // The leaf died, or its GPU fold failed, maybe halfway through folding this update
        // into its partial sum. The partial is rebuilt from the acknowledged updates it holds
        // (still in the pool) when the round commits: a leaf that fell back to the CPU is
        // alive and may be folding the next update into it right now.
        pit->second.rebuild = true;
        if (leaf_answered) {
          ++job->gpu_fallbacks;
          gpu_fallback = true;
          spdlog::warn("fl job {}: leaf {:#x}'s GPU fold failed; it folds on the CPU from now "
                       "on, and its partial sum is rebuilt at commit",
                       job->spec.name, t.instance);
        } else {
          spdlog::warn("fl job {}: leaf {:#x} failed; its partial sum is rebuilt at commit",
                       job->spec.name, t.instance);
        }
      }
      if (t.node.empty()) (void)job->pool->Release(t.buffer, kCoordinatorSlot);
      job->tickets.erase(tit);
    }
    // (Cluster mode: a node's partial sum is fetched as soon as that node's updates of the
    // closed round have all answered, while the others still fold.)
    commit = round.closed && (round.inflight == 0 || job->NodeDone(t_round, t_node));
  }
  if (gpu_fallback && on_gpu_fallback_) on_gpu_fallback_(job->spec.name);
  if (commit) Enqueue(job);
}

void FlCoordinator::Enqueue(std::shared_ptr<JobState> job) {
  {
    std::lock_guard lock(commit_mu_);
    commit_queue_.push_back(std::move(job));
  }
  commit_cv_.notify_one();
}

// ---- commits --------------------------------------------------------------------------------

namespace {
const agg::VersionStore& NoVersions() {
  static const agg::VersionStore empty(0);
  return empty;
}
}  // namespace

void FlCoordinator::CommitLoop() {
  Clock::time_point last_timers = Clock::now();
  for (;;) {
    std::shared_ptr<JobState> job;
    {
      std::unique_lock lock(commit_mu_);
      // Timers (FedCompass T_l, FedFix ticks, round deadlines): look every 50 ms.
      commit_cv_.wait_for(lock, std::chrono::milliseconds(50),
                          [this] { return stopping_ || !commit_queue_.empty(); });
      if (stopping_) return;
      if (!commit_queue_.empty()) {
        job = commit_queue_.front();
        commit_queue_.pop_front();
      }
    }
    if (Seconds(last_timers) >= 0.05 || !job) {
      last_timers = Clock::now();
      Timers();
    }
    if (!job) continue;
    // Other nodes' partial sums of the rounds that are due, fetched without the job's lock.
    FetchRemotePartials(job);
    std::vector<uint64_t> reuse;  // partial sums of committed rounds, to zero for the next
    std::vector<uint64_t> committed_versions;  // for on_commit_, once the job's lock is released
    std::vector<std::pair<std::string, std::string>> suspects;  // for on_suspect_, likewise
    {
      std::lock_guard jl(job->mu);
      if (job->deleted) continue;
      // Commit every closed round whose updates have all answered, oldest first.
      for (auto rit = job->rounds.begin(); rit != job->rounds.end();) {
        JobState::Round& round = rit->second;
        JobState::Round* partner =
            round.merge_round != 0 && job->rounds.count(round.merge_round)
                ? &job->rounds[round.merge_round]
                : nullptr;
        if (round.closed && round.inflight == 0 && !job->RemoteReady(round)) {
          // Another node's partial sum did not come (FetchRemotePartials logged why): the round
          // waits, and is tried again shortly (Timers), or once that node's loss re-opens it.
          job->remote_retry_at = job->Elapsed() + 0.2;
          break;
        }
        if (!round.closed || round.inflight != 0 || round.merged ||
            (partner != nullptr && partner->inflight != 0)) {
          if (!job->Compass() && !round.closed) break;
          ++rit;
          continue;
        }
        if (partner != nullptr) {
          // One commit for the group and the general buffer: move the buffer's partial sums in.
          for (auto& [key, p] : partner->partials) round.partials[key | (uint64_t{1} << 63)] = p;
          round.acked += partner->acked;
          job->rounds.erase(round.merge_round);
          round.merge_round = 0;
        }
        const auto t0 = Clock::now();
        const size_t n = job->mspec.num_params();
        double merge_ms = 0, step_ms = 0, cache_ms = 0;
        const size_t seqs_partials = round.partials.size();
        bool committed = false;
        Status merged;
        if (round.acked > 0 && job->Robust()) {
          // The rule over the round's updates in the pool (robust_commit.h), then the step.
          merged = job->RobustTotal(round, *robust_, &suspects);
          merge_ms = Seconds(t0) * 1e3;
        } else if (round.acked > 0) {
          // The top of the hierarchy: add the leaves' partial sums, then the algorithm's step.
          job->total.Reset();
          for (auto& [inst, p] : round.partials) {
            if (p.rebuild && p.node.empty()) {
              // No leaf writes it now (every update of the round has answered): from scratch.
              float* acc = reinterpret_cast<float*>(job->pool->Data(p.offset).data());
              std::fill(acc, acc + n, 0.0f);
              const size_t refolded = job->Refold(acc, p.tickets);
              p.rebuild = false;
              spdlog::warn("fl job {}: partial sum rebuilt from {} acknowledged update(s)",
                           job->spec.name, refolded);
            }
            std::vector<std::pair<uint64_t, double>> folded;
            for (uint64_t tid : p.tickets) {
              const JobState::Ticket& t = job->tickets[tid];
              folded.emplace_back(t.base_version, t.coefficient);
            }
            // Another node's one partial sum of the round (fetched), or a leaf's here.
            const auto* leaf =
                !p.node.empty() ? p.sum.data()
                                : reinterpret_cast<const float*>(job->pool->Data(p.offset).data());
            const double scale = job->algo->staleness_at_commit()
                                     ? job->algo->CommitScale(job->version() - std::min(p.base, job->version()))
                                     : 1.0;
            if (Status st = job->total.MergeFolded({leaf, n}, folded, scale, merge_pool_.get()); !st.ok()) {
              spdlog::error("fl job {}: {}", job->spec.name, st.ToString());
            }
          }
          merge_ms = Seconds(t0) * 1e3;
        }
        if (round.acked > 0) {
          Status st = merged.ok() ? job->algo->Commit(job->total,
                                                      job->store ? *job->store : NoVersions(),
                                                      job->state)
                                  : merged;
          if (!st.ok()) {
            spdlog::error("fl job {}: commit of {} update(s) failed: {}", job->spec.name,
                          round.acked, st.ToString());
          } else {
            committed = true;
            step_ms = Seconds(t0) * 1e3 - merge_ms;
            job->KeepVersion();
            job->CacheModel();
            cache_ms = Seconds(t0) * 1e3 - merge_ms - step_ms;
            job->AddVersion({job->version(), std::nullopt, std::nullopt, round.acked,
                             job->Elapsed()});
            if (job->spec.rounds > 0 && job->version() >= job->spec.rounds) job->done = true;
          }
        }
        // The partial sums go back to the pool now; the updates once the checkpoint naming this
        // version is written (until then a crash re-folds them from the log: Durable).
        JobState::Undurable u;
        u.version = job->version();
        for (auto& [inst, p] : round.partials) {
          for (uint64_t tid : p.tickets) {
            const JobState::Ticket& t = job->tickets[tid];
            if (t.node.empty()) {  // another node's update is held (and logged) there
              u.buffers.push_back(t.buffer);
              u.records.push_back(JobState::RecordOf(t));
            }
            job->tickets.erase(tid);
          }
          // Its pages are warm: zeroed again behind the commit for the next round's leaves.
          if (!p.node.empty() && job->spare_sums.size() < 4) {
            job->spare_sums.push_back(std::move(p.sum));  // warm pages for the next fetch
          }
          if (p.offset == 0) continue;  // a robust job's (and other nodes') have none
          if (job->warm_partials.size() + reuse.size() < job->WarmPartialsWanted()) {
            reuse.push_back(p.offset);
          } else {
            (void)job->pool->Release(p.offset, kShoaldSlot);
          }
        }
        if (!u.records.empty()) job->undurable.push_back(std::move(u));
        if (committed) job->round_of_version[job->version()] = rit->first;
        for (const auto& a : round.assignments) job->SetTask(a);
        rit = job->rounds.erase(rit);
        if (job->Sync() && job->spec.round_deadline_s > 0) {
          job->round_deadline = job->Elapsed() + job->spec.round_deadline_s;
        }
        const double before_persist_ms = Seconds(t0) * 1e3;
        Persist(job);
        if (committed) {
          committed_versions.push_back(job->version());
          spdlog::info("fl job {}: version {} committed from {} update(s) over {} leaf partial "
                       "sum(s) in {:.2f} ms (top merge {:.1f}, {} step {:.1f}, model bytes {:.1f}, "
                       "checkpoint queued {:.1f}){}",
                       job->spec.name, job->version(), job->versions.back().updates,
                       job->total.count() == 0 ? 0 : seqs_partials, Seconds(t0) * 1e3, merge_ms,
                       job->spec.algorithm, step_ms, cache_ms, Seconds(t0) * 1e3 - before_persist_ms,
                       job->done ? " (last)" : "");
        }
      }
    }
    if (on_commit_) {
      for (uint64_t v : committed_versions) on_commit_(job->spec.name, v);
    }
    if (on_suspect_) {
      for (const auto& [client, rule] : suspects) on_suspect_(job->spec.name, client, rule);
    }
    PrepareWarmPartials(*job, std::move(reuse));
    PrepareSpareModel(*job);
  }
}

void FlCoordinator::Timers() {
  std::vector<std::shared_ptr<JobState>> jobs;
  {
    std::lock_guard lock(mu_);
    for (auto& [name, j] : jobs_) jobs.push_back(j);
  }
  for (auto& job : jobs) {
    bool due = false;
    {
      std::lock_guard jl(job->mu);
      if (job->deleted) continue;
      const double now = job->Elapsed();
      if (job->remote_retry_at > 0 && now >= job->remote_retry_at) {
        job->remote_retry_at = 0;
        due = true;
      }
      if (job->done) {
        if (due) Enqueue(job);
        continue;
      }
      if (job->Compass()) {
        for (const auto& d : job->scheduler->OnTimer(now)) {
          if (d.action == agg::CompassAction::kAggregateGroup) {
            job->CloseGroup(d);
            due = true;
          }
        }
      } else if (job->algo->NextCommitTime() && job->algo->ShouldCommit(0, now)) {
        // FedFix's tick: whatever arrived since the last one commits (nothing: no version).
        auto it = job->rounds.find(job->open_round);
        if (it != job->rounds.end() && it->second.admitted > 0) {
          it->second.closed = true;
          ++job->open_round;
          due = true;
        }
        job->algo->OnCommitted(now);
      } else if (job->Sync() && job->spec.round_deadline_s > 0 && now >= job->round_deadline) {
        auto it = job->rounds.find(job->open_round);
        const uint32_t have = it == job->rounds.end() ? 0 : it->second.admitted;
        const uint32_t quorum = std::max(1u, job->spec.quorum);
        if (have >= quorum) {
          spdlog::info("fl job {}: round {} reached its deadline with {} of {} update(s) "
                       "(quorum {}): committing",
                       job->spec.name, job->open_round, have, job->spec.clients, quorum);
          it->second.closed = true;
          ++job->open_round;
          due = true;
        } else {
          // Below quorum: the round stays open for another deadline (no update is dropped).
          spdlog::warn("fl job {}: round {} missed its deadline with {} of quorum {} "
                       "update(s): extended by {} s",
                       job->spec.name, job->open_round, have, quorum, job->spec.round_deadline_s);
        }
        job->round_deadline = now + job->spec.round_deadline_s;
      }
    }
    if (due) Enqueue(job);
  }
}

}  // namespace shoal
