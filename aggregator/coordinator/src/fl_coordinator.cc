#include "shoal/aggregator/fl_coordinator.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "shoal/aggregator/fold.h"
#include "shoal/common/log.h"
#include "shoal/common/payload.h"
#include "shoal/model/architectures.h"
#include "shoal/model/safetensors.h"
#include "shoal/model/update_format.h"
#include "shoal/v1/fl.pb.h"

namespace shoal {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kKeptModels = 4;  // safetensors of the last versions kept for download

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

std::string RandomToken() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string t;
  for (int i = 0; i < 32; ++i) t += hex[rd() & 15];
  return t;
}

bool IsSync(const std::string& a) { return a == "fedavg" || a == "fedavgm" || a == "fedadam"; }

double Param(const FlJobSpec& s, const char* name, double def) {
  auto it = s.algorithm_params.find(name);
  return it == s.algorithm_params.end() ? def : it->second;
}

Status ValidateAlgorithm(const FlJobSpec& s) {
  static const std::map<std::string, std::vector<std::string>> kParams = {
      {"fedavg", {}},
      {"fedavgm", {"beta", "eta"}},
      {"fedadam", {"eta", "beta1", "beta2", "tau"}},
      {"fedasync", {"alpha", "a"}},
      {"fedbuff", {"k", "eta", "a"}},
      {"fedcompass", {"alpha", "a", "q_min", "lambda", "momentum"}},
  };
  auto it = kParams.find(s.algorithm);
  if (it == kParams.end()) {
    return InvalidArgument("spec.algorithm.name: '" + s.algorithm +
                           "' is not run by this node's coordinator yet (fedavg, fedavgm, "
                           "fedadam, fedasync, fedbuff, fedcompass)");
  }
  for (const auto& [k, v] : s.algorithm_params) {
    if (std::find(it->second.begin(), it->second.end(), k) == it->second.end()) {
      return InvalidArgument("spec.algorithm.params." + k + ": not a parameter of " + s.algorithm);
    }
    if (!std::isfinite(v) || v < 0) {
      return InvalidArgument("spec.algorithm.params." + k + ": must be a finite number >= 0");
    }
  }
  if (s.algorithm == "fedbuff" && Param(s, "k", 10) < 1) {
    return InvalidArgument("spec.algorithm.params.k: must be >= 1");
  }
  if (s.clients == 0) return InvalidArgument("spec.clients.expected: must be >= 1");
  if (s.algorithm == "fedcompass" && Param(s, "q_min", 20) > s.local_steps) {
    return InvalidArgument("spec.algorithm.params.q_min: must be <= spec.training.localSteps (Q_max)");
  }
  return {};
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
  s.join_tokens = j.value("join_tokens", std::vector<std::string>{});
  s.generation = j.value("generation", uint64_t{1});
  s.manifest = j.value("manifest", "");
  return s;
}

Status WriteFileAtomic(const std::string& path, const void* data, size_t n) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Internal("cannot write " + tmp);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
    out.flush();
    if (!out) return Internal("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Internal("rename " + tmp + ": " + ec.message());
  return {};
}

}  // namespace

struct FlCoordinator::JobState {
  struct Client {
    std::string id, name, token;
    uint64_t submitted_round = UINT64_MAX;  // sync: the round it already sent an update to
    uint64_t updates = 0;
  };
  struct Ticket {
    uint64_t round = 0;
    std::string client;
    uint64_t buffer = 0;  // the update, held with kCoordinatorSlot until its version commits
    uint64_t base_version = 0;
    float coefficient = 0;
    uint32_t instance = 0;
    bool acked = false;
  };
  struct Partial {
    uint64_t offset = 0;  // float32[num_params] in the pool, held by shoald
    std::vector<uint64_t> tickets;  // acked updates folded into it
  };
  struct Round {
    std::map<uint32_t, Partial> partials;  // by leaf instance
    uint32_t admitted = 0, acked = 0, inflight = 0;
    double weight = 0;
    std::map<uint64_t, double> weight_by_base;  // Σ c_k per base version (FedBuff's Δ)
    bool closed = false;
    // FedCompass: a round is one client's first update (applied alone), an arrival group, or
    // the general buffer of late updates (merged into the next group's commit).
    std::string single_client;
    int group = -1;
    uint64_t merge_round = 0;  // the general buffer committed together with this round
    bool merged = false;       // this round is committed as part of another
  };
  struct CompassClient {
    double speed = 0;  // seconds per local step
    bool has_speed = false;
    double start = 0;  // when it fetched its task
    uint32_t steps = 0;
    int group = -1;
    bool has_task = false;  // an assignment waits to be handed out
    uint64_t task_version = 0;
    bool training = false;
  };
  struct CompassGroup {
    double t_expected = 0, t_latest = 0;
    std::set<std::string> members, arrived;
    uint64_t round = 0;
  };
  struct VersionInfo {
    uint64_t version = 0;
    std::optional<double> accuracy, loss;
    uint32_t updates = 0;
    double elapsed_s = 0;
  };

  std::mutex mu;
  FlJobSpec spec;
  model::ModelSpec mspec;
  std::vector<float> weights;
  std::vector<float> opt_m, opt_v;  // FedAvgM momentum / FedAdam moments
  uint64_t version = 0;
  std::map<uint64_t, std::vector<float>> history;   // recent versions (FedBuff's w_τ)
  std::map<uint64_t, std::string> models;            // safetensors of recent versions
  std::map<std::string, Client> clients;
  uint32_t next_client = 0;
  std::map<uint64_t, Round> rounds;
  uint64_t open_round = 1;
  std::map<uint64_t, Ticket> tickets;
  BufferPool* pool = nullptr;
  std::vector<VersionInfo> versions;
  uint64_t updates_total = 0;
  Clock::time_point start = Clock::now();
  double elapsed_before = 0;  // from the checkpoint this run resumed
  bool done = false;
  bool deleted = false;
  double best_accuracy = 0;
  uint32_t leaf_id = 0;
  // FedCompass scheduler state.
  std::map<std::string, CompassClient> compass;
  std::map<int, CompassGroup> groups;
  int next_group = 0;
  uint64_t general_round = 0;

  bool Compass() const { return spec.algorithm == "fedcompass"; }
  uint64_t NewRound() { return open_round++; }
  // Joins the client to an arrival group or creates one (FL-ALGORITHMS.md, FedCompass).
  void Assign(const std::string& id, double now) {
    CompassClient& c = compass[id];
    const double qmax = spec.local_steps;
    const double qmin = Param(spec, "q_min", 20);
    const double lambda = Param(spec, "lambda", 1.5);
    const double speed = c.has_speed ? c.speed : 0;
    int best = -1;
    double best_q = -1;
    if (speed > 0) {
      for (const auto& [gid, g] : groups) {
        const double q = std::floor((g.t_expected - now) / speed);
        if (q >= qmin && q <= qmax && q > best_q) {
          best = gid;
          best_q = q;
        }
      }
    }
    if (best < 0) {
      double q = -1;
      if (speed > 0) {
        for (const auto& [gid, g] : groups) {
          if (now >= g.t_latest) continue;
          double fastest = 0;
          for (const auto& m : g.members) {
            const auto& mc = compass[m];
            if (mc.has_speed && (fastest == 0 || mc.speed < fastest)) fastest = mc.speed;
          }
          const double next_arrival = g.t_latest + fastest * qmax;
          const double cand = std::floor((next_arrival - now) / speed);
          if (cand <= qmax && cand > q) q = cand;
        }
      }
      if (q < 0) q = qmax;
      if (q < qmin) q = qmin;
      best = next_group++;
      CompassGroup& g = groups[best];
      g.t_expected = now + q * speed;
      g.t_latest = now + q * speed * lambda;
      g.round = NewRound();
      best_q = q;
    }
    CompassGroup& g = groups[best];
    g.members.insert(id);
    c.group = best;
    c.steps = static_cast<uint32_t>(best_q);
    c.has_task = true;
    c.task_version = version;
  }

  double Elapsed() const { return elapsed_before + Seconds(start); }
  uint32_t Needed() const {
    if (spec.algorithm == "fedasync") return 1;
    if (spec.algorithm == "fedbuff") return static_cast<uint32_t>(Param(spec, "k", 10));
    return spec.quorum > 0 ? spec.quorum : spec.clients;
  }
  void CacheModel() {
    model::Model m(mspec);
    m.values = weights;
    auto bytes = model::ModelToSafetensors(
        m, {{std::string(model::kMetadataJob), spec.name},
            {std::string(model::kMetadataVersion), std::to_string(version)}});
    models[version] = std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    while (models.size() > kKeptModels) models.erase(models.begin());
  }
};

FlCoordinator::FlCoordinator(const NodeConfig& config) : config_(config) {
  committer_ = std::thread([this] { CommitLoop(); });
}

FlCoordinator::~FlCoordinator() {
  {
    std::lock_guard lock(commit_mu_);
    stopping_ = true;
  }
  commit_cv_.notify_all();
  committer_.join();
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
  std::lock_guard lock(mu_);
  std::vector<FunctionSpec> out;
  for (const auto& [name, job] : jobs_) {
    if (job->deleted) continue;
    FunctionSpec f;
    f.id = job->leaf_id;
    f.name = LeafFunction(name);
    f.tenant = job->spec.tenant;
    f.handler.builtin = "fl-leaf";
    f.handler.env["SHOAL_FL_ARCH"] = job->spec.architecture;
    f.handler.env["SHOAL_FL_HIDDEN"] = std::to_string(job->spec.hidden);
    f.concurrency = std::max(1u, job->spec.max_fan_in);
    f.min_scale = 1;
    f.max_scale = std::max(1u, job->spec.max_leaves);
    f.timeout_s = config_.default_timeout_s;
    f.keep_alive_s = config_.default_keep_alive_s;
    f.max_body_bytes = config_.max_body_bytes;
    f.generation = job->spec.generation;
    out.push_back(std::move(f));
  }
  return out;
}

// ---- jobs -----------------------------------------------------------------------------------

Status FlCoordinator::DeployJob(const FlJobSpec& in) {
  SHOAL_RETURN_IF_ERROR(ValidateAlgorithm(in));
  model::ArchitectureOptions opts;
  opts.hidden = {in.hidden};
  auto mspec = model::ArchitectureSpec(in.architecture, opts);
  if (!mspec.ok()) {
    return InvalidArgument("spec.model.architecture: " + mspec.status().message());
  }
  auto job = std::make_shared<JobState>();
  job->spec = in;
  job->mspec = *mspec;
  if (!in.initial_model.empty()) {
    std::ifstream f(in.initial_model, std::ios::binary);
    if (!f) return InvalidArgument("spec.model.initial: cannot read " + in.initial_model);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto m = model::ModelFromSafetensors(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
        job->mspec);
    if (!m.ok()) return InvalidArgument("spec.model.initial: " + m.status().message());
    job->weights = std::move(m->values);
  } else {
    job->weights = model::InitModel(job->mspec, in.seed).values;
  }
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
      FlJobSpec updated = in;
      updated.generation = it->second->spec.generation + 1;
      it->second->spec = updated;
      Persist(*it->second);
    } else {
      job->spec.generation = 1;
      job->leaf_id = next_leaf_id_--;
      job->history[0] = job->weights;
      job->versions.push_back({0, std::nullopt, std::nullopt, 0, 0});
      job->CacheModel();
      std::error_code ec;
      std::filesystem::create_directories(config_.state_dir + "/jobs/" + in.name, ec);
      Persist(*job);
      jobs_[in.name] = job;
      spdlog::info("fl job {}: {} on {} ({} parameters), {} clients expected, leaves: function "
                   "{} (fan-in {}, up to {})",
                   in.name, in.algorithm, in.architecture, job->mspec.num_params(), in.clients,
                   LeafFunction(in.name), in.max_fan_in, in.max_leaves);
    }
  }
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
      for (auto& [id, r] : job->rounds) {
        for (auto& [inst, p] : r.partials) (void)job->pool->Release(p.offset, kShoaldSlot);
      }
    }
    job->tickets.clear();
    job->rounds.clear();
  }
  std::error_code ec;
  std::filesystem::remove_all(config_.state_dir + "/jobs/" + name, ec);
  spdlog::info("fl job {} deleted", name);
  if (on_change_) on_change_();
  return {};
}

std::vector<std::string> FlCoordinator::ListJobs() {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, job] : jobs_) out.push_back(name);
  return out;
}

Result<std::string> FlCoordinator::JobStatusJson(const std::string& name) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  std::lock_guard jl(job->mu);
  Json versions = Json::array();
  for (const auto& v : job->versions) {
    versions.push_back({{"version", v.version},
                        {"accuracy", v.accuracy ? Json(*v.accuracy) : Json(nullptr)},
                        {"loss", v.loss ? Json(*v.loss) : Json(nullptr)},
                        {"updates", v.updates},
                        {"elapsed_s", v.elapsed_s}});
  }
  Json j = {{"name", name},
            {"algorithm", job->spec.algorithm},
            {"state", job->done ? "done" : "running"},
            {"version", job->version},
            {"round", job->open_round},
            {"clients", {{"expected", job->spec.clients}, {"joined", job->clients.size()}}},
            {"updates_total", job->updates_total},
            {"elapsed_s", job->Elapsed()},
            {"target_accuracy", job->spec.target_accuracy},
            {"best_accuracy", job->best_accuracy},
            {"leaf_function", LeafFunction(name)},
            // What `shoal fl model --format onnx` and the inference handler rebuild the graph
            // from: the architecture and its size (inputs and classes are the defaults).
            {"model",
             {{"architecture", job->spec.architecture},
              {"hidden", job->spec.hidden},
              {"params", job->mspec.num_params()}}},
            {"versions", versions}};
  return j.dump() + "\n";
}

Result<JoinResult> FlCoordinator::Join(const std::string& name, const std::string& client_name,
                                       const std::string& join_token) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  std::lock_guard jl(job->mu);
  const auto& tokens = job->spec.join_tokens;
  if (!tokens.empty() && std::find(tokens.begin(), tokens.end(), join_token) == tokens.end()) {
    return PermissionDenied("job '" + name + "' needs a valid join token");
  }
  JobState::Client c;
  c.id = "c" + std::to_string(job->next_client++);
  c.name = client_name.empty() ? c.id : client_name;
  c.token = RandomToken();
  job->clients[c.id] = c;
  Persist(*job);
  return JoinResult{c.id, c.token};
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
  if (IsSync(job->spec.algorithm) && it->second.submitted_round != UINT64_MAX &&
      job->rounds.count(it->second.submitted_round) != 0) {
    // Its update for this round is in; the next task comes with the next version.
    t.kind = TaskResult::Kind::kWait;
    t.retry_after_ms = 200;
    return t;
  }
  if (job->Compass()) {
    JobState::CompassClient& c = job->compass[client_id];
    if (!c.training && c.steps == 0) {
      c.steps = job->spec.local_steps;  // start: everyone trains Q_max from the initial model
      c.has_task = true;
      c.task_version = job->version;
    }
    if (!c.has_task) {
      t.kind = TaskResult::Kind::kWait;
      t.retry_after_ms = 100;
      return t;
    }
    c.has_task = false;
    c.training = true;
    c.start = job->Elapsed();
    t.kind = TaskResult::Kind::kTrain;
    t.model_version = std::max(c.task_version, job->version);
    t.local_steps = c.steps;
    t.learning_rate = job->spec.learning_rate;
    t.batch_size = job->spec.batch_size;
    return t;
  }
  t.kind = TaskResult::Kind::kTrain;
  t.model_version = job->version;
  t.local_steps = job->spec.local_steps;
  t.learning_rate = job->spec.learning_rate;
  t.batch_size = job->spec.batch_size;
  return t;
}

Result<ModelBlob> FlCoordinator::Model(const std::string& name, std::optional<uint64_t> version) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' not found");
  std::lock_guard jl(job->mu);
  const uint64_t v = version.value_or(job->version);
  auto it = job->models.find(v);
  if (it == job->models.end()) {
    return NotFound("model version " + std::to_string(v) + " of job '" + name +
                    "' is not kept (current " + std::to_string(job->version) + ")");
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
    Persist(*job);
    return {};
  }
  return NotFound("version " + std::to_string(r.version) + " of job '" + name + "' unknown");
}

// ---- the update path ------------------------------------------------------------------------

Result<FlAdmission> FlCoordinator::Admit(std::string_view name, BufferPool& pool,
                                         std::span<const std::byte> body, uint64_t buffer) {
  auto job = Find(std::string(name));
  if (!job) return NotFound("FL job '" + std::string(name) + "' not found");
  // Only the header is read here (on a gateway loop); the leaf validates the tensors.
  if (body.size() < model::kUpdatePrefixBytes ||
      std::memcmp(body.data(), model::kUpdateMagic, 4) != 0) {
    return InvalidArgument("not an update: the body must start with \"SHU1\"");
  }
  uint32_t hlen;
  std::memcpy(&hlen, body.data() + 4, 4);
  if (hlen > body.size() - model::kUpdatePrefixBytes || hlen > (1u << 20)) {
    return InvalidArgument("update header length " + std::to_string(hlen) + " runs past the body");
  }
  shoal::v1::UpdateHeader h;
  if (!h.ParseFromArray(body.data() + model::kUpdatePrefixBytes, static_cast<int>(hlen))) {
    return InvalidArgument("update header does not parse as a shoal.v1.UpdateHeader");
  }
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
  if (h.base_version() > job->version) {
    return InvalidArgument("base version " + std::to_string(h.base_version()) +
                           " is newer than the current version " + std::to_string(job->version));
  }
  const uint64_t staleness = job->version - h.base_version();
  const bool sync = IsSync(job->spec.algorithm);
  if (sync && staleness != 0) {
    return AlreadyExists("stale update: trained from version " + std::to_string(h.base_version()) +
                         ", the round is for version " + std::to_string(job->version));
  }
  if (staleness > job->spec.staleness_limit || !job->history.count(h.base_version())) {
    return AlreadyExists("stale update: base version " + std::to_string(h.base_version()) +
                         " is older than the staleness limit (current " +
                         std::to_string(job->version) + ", limit " +
                         std::to_string(job->spec.staleness_limit) + ")");
  }
  if (sync && client.submitted_round == job->open_round) {
    return AlreadyExists("client '" + client.id + "' already sent an update for this round");
  }
  if (Status st = pool.Retain(buffer, kCoordinatorSlot); !st.ok()) {
    return Internal("cannot hold the update buffer: " + st.message());
  }
  job->pool = &pool;
  float coefficient = 1.0f;
  if (sync) coefficient = static_cast<float>(h.num_samples());
  if (job->spec.algorithm == "fedbuff") {
    coefficient = static_cast<float>(1.0 / std::sqrt(1.0 + static_cast<double>(staleness)));
  }
  uint64_t round_id = job->open_round;
  if (job->Compass()) {
    const double now = job->Elapsed();
    JobState::CompassClient& c = job->compass[client.id];
    const double measured = (now - c.start) / std::max<uint32_t>(1, c.steps);
    const double m = Param(job->spec, "momentum", 0.9);
    c.speed = c.has_speed ? (1 - m) * c.speed + m * measured : measured;
    c.has_speed = true;
    c.training = false;
    coefficient = static_cast<float>(Param(job->spec, "alpha", 0.9) *
                                     std::pow(1.0 + static_cast<double>(staleness),
                                              -Param(job->spec, "a", 0.5)) /
                                     job->spec.clients);
    auto git = job->groups.find(c.group);
    if (c.group < 0) {
      // First arrival: applied alone at once, then the client gets a group.
      round_id = job->NewRound();
      job->rounds[round_id].single_client = client.id;
      job->rounds[round_id].closed = true;
    } else if (git != job->groups.end() && now <= git->second.t_latest) {
      JobState::CompassGroup& g = git->second;
      round_id = g.round;
      g.arrived.insert(client.id);
      job->rounds[round_id].group = c.group;
      if (g.arrived.size() == g.members.size()) {
        // The last member: the group aggregates with the general buffer.
        JobState::Round& gr = job->rounds[round_id];
        gr.closed = true;
        if (job->general_round != 0) {
          gr.merge_round = job->general_round;
          job->rounds[job->general_round].closed = true;
          job->rounds[job->general_round].merged = true;
          job->general_round = 0;
        }
      }
    } else {
      // Late (or its group already aggregated at its timer): general buffer, and a new
      // assignment at once from the current model.
      if (git != job->groups.end()) git->second.members.erase(client.id);
      if (job->general_round == 0) job->general_round = job->NewRound();
      round_id = job->general_round;
      c.group = -1;
      job->Assign(client.id, now);
    }
  }
  JobState::Round& round = job->rounds[round_id];
  JobState::Ticket t;
  t.round = round_id;
  t.client = client.id;
  t.buffer = buffer;
  t.base_version = h.base_version();
  t.coefficient = coefficient;
  ++round.admitted;
  ++round.inflight;
  client.submitted_round = round_id;
  if (!job->Compass() && round.admitted >= job->Needed()) {
    // The round takes no more updates; later ones go to the next round.
    round.closed = true;
    ++job->open_round;
  }
  std::lock_guard lock(mu_);
  const uint64_t id = next_ticket_++;
  job->tickets[id] = t;
  by_ticket_[id] = job;
  return FlAdmission{id, coefficient};
}

Result<uint64_t> FlCoordinator::PartialFor(uint64_t ticket, uint32_t instance) {
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
  JobState::Round& round = job->rounds[tit->second.round];
  auto pit = round.partials.find(instance);
  if (pit != round.partials.end()) return pit->second.offset;
  const size_t bytes = job->mspec.num_params() * sizeof(float);
  auto off = job->pool->Allocate(bytes, kShoaldSlot);
  if (!off.ok()) return off.status();
  std::memset(job->pool->Data(*off).data(), 0, bytes);
  round.partials[instance].offset = *off;
  return *off;
}

void FlCoordinator::Completed(uint64_t ticket, int http_status) {
  std::shared_ptr<JobState> job;
  {
    std::lock_guard lock(mu_);
    auto it = by_ticket_.find(ticket);
    if (it == by_ticket_.end()) return;
    job = it->second;
    by_ticket_.erase(it);
  }
  bool commit = false;
  {
    std::lock_guard jl(job->mu);
    auto tit = job->tickets.find(ticket);
    if (tit == job->tickets.end()) return;
    JobState::Ticket& t = tit->second;
    JobState::Round& round = job->rounds[t.round];
    --round.inflight;
    if (http_status >= 200 && http_status < 300) {
      t.acked = true;
      ++round.acked;
      round.weight += t.coefficient;
      round.weight_by_base[t.base_version] += t.coefficient;
      round.partials[t.instance].tickets.push_back(ticket);
      ++job->clients[t.client].updates;
      ++job->updates_total;
    } else {
      // Not counted: the client gets the error and may send it again.
      if (job->clients[t.client].submitted_round == t.round) {
        job->clients[t.client].submitted_round = UINT64_MAX;
      }
      auto pit = round.partials.find(t.instance);
      if (http_status == 502 && pit != round.partials.end()) {
        // The leaf died, maybe halfway through folding this update into its partial sum:
        // rebuild that partial from the acknowledged updates it held (still in the pool).
        const size_t n = job->mspec.num_params();
        float* acc = reinterpret_cast<float*>(job->pool->Data(pit->second.offset).data());
        std::fill(acc, acc + n, 0.0f);
        for (uint64_t tid : pit->second.tickets) {
          const JobState::Ticket& done = job->tickets[tid];
          PayloadView pv = ReadPayload(job->pool->Data(done.buffer));
          auto view = model::ParseUpdate(pv.body, job->mspec);
          if (!view.ok()) continue;
          for (const auto& tv : view->tensors) {
            aggregator::Fold(acc + job->mspec.offset(tv.index), tv.data,
                             static_cast<aggregator::DType>(tv.dtype), tv.numel, done.coefficient);
          }
        }
        spdlog::warn("fl job {}: leaf {:#x} failed; partial sum rebuilt from {} acknowledged "
                     "update(s)",
                     job->spec.name, t.instance, pit->second.tickets.size());
      }
      (void)job->pool->Release(t.buffer, kCoordinatorSlot);
      job->tickets.erase(tit);
    }
    commit = round.closed && round.inflight == 0;
  }
  if (commit) {
    {
      std::lock_guard lock(commit_mu_);
      commit_queue_.push_back(job);
    }
    commit_cv_.notify_one();
  }
}

// ---- commits --------------------------------------------------------------------------------

void FlCoordinator::CommitLoop() {
  for (;;) {
    std::shared_ptr<JobState> job;
    {
      std::unique_lock lock(commit_mu_);
      // FedCompass groups have timers (their latest arrival time): look every 50 ms.
      commit_cv_.wait_for(lock, std::chrono::milliseconds(50),
                          [this] { return stopping_ || !commit_queue_.empty(); });
      if (stopping_) return;
      if (!commit_queue_.empty()) {
        job = commit_queue_.front();
        commit_queue_.pop_front();
      }
    }
    if (!job) {
      std::vector<std::shared_ptr<JobState>> compass_jobs;
      {
        std::lock_guard lock(mu_);
        for (auto& [name, j] : jobs_) {
          if (j->Compass()) compass_jobs.push_back(j);
        }
      }
      for (auto& j : compass_jobs) {
        std::lock_guard jl(j->mu);
        const double now = j->Elapsed();
        std::vector<int> expired;
        for (auto& [gid, g] : j->groups) {
          if (now > g.t_latest) expired.push_back(gid);
        }
        for (int gid : expired) {
          JobState::CompassGroup& g = j->groups[gid];
          if (!g.arrived.empty()) {
            JobState::Round& gr = j->rounds[g.round];
            gr.group = gid;
            gr.closed = true;
            if (j->general_round != 0) {
              gr.merge_round = j->general_round;
              j->rounds[j->general_round].closed = true;
              j->rounds[j->general_round].merged = true;
              j->general_round = 0;
            }
            job = j;
          } else {
            j->rounds.erase(g.round);
            j->groups.erase(gid);  // its members arrive late: general buffer
          }
        }
      }
      if (!job) continue;
    }
    std::lock_guard jl(job->mu);
    if (job->deleted) continue;
    // Commit every closed round whose updates have all answered, oldest first.
    for (auto rit = job->rounds.begin(); rit != job->rounds.end();) {
      JobState::Round& round = rit->second;
      JobState::Round* partner =
          round.merge_round != 0 && job->rounds.count(round.merge_round)
              ? &job->rounds[round.merge_round]
              : nullptr;
      if (!round.closed || round.inflight != 0 || round.merged ||
          (partner != nullptr && partner->inflight != 0)) {
        if (!job->Compass() && !round.closed) break;
        ++rit;
        continue;
      }
      if (partner != nullptr) {
        // One commit for the group and the general buffer: move the buffer's partial sums in.
        for (auto& [inst, p] : partner->partials) {
          auto& mine = round.partials[inst | 0x80000000u];
          mine = p;
        }
        round.acked += partner->acked;
        round.weight += partner->weight;
        for (auto& [b, w] : partner->weight_by_base) round.weight_by_base[b] += w;
        job->rounds.erase(round.merge_round);
        round.merge_round = 0;
      }
      const auto t0 = Clock::now();
      const size_t n = job->mspec.num_params();
      if (round.acked > 0) {
        // The top of the hierarchy: add the leaves' partial sums, then the final step.
        std::vector<float> sum(n, 0.0f);
        for (auto& [inst, p] : round.partials) {
          aggregator::Fold(sum.data(), job->pool->Data(p.offset).data(), aggregator::DType::kF32,
                           n, 1.0f);
        }
        const std::string& a = job->spec.algorithm;
        std::vector<float>& w = job->weights;
        const float inv = static_cast<float>(1.0 / round.weight);
        if (a == "fedavg") {
          for (size_t i = 0; i < n; ++i) w[i] = sum[i] * inv;
        } else if (a == "fedavgm") {
          const float beta = static_cast<float>(Param(job->spec, "beta", 0.9));
          const float eta = static_cast<float>(Param(job->spec, "eta", 1.0));
          job->opt_m.resize(n, 0.0f);
          for (size_t i = 0; i < n; ++i) {
            const float delta = sum[i] * inv - w[i];
            job->opt_m[i] = beta * job->opt_m[i] + delta;
            w[i] += eta * job->opt_m[i];
          }
        } else if (a == "fedadam") {
          const float eta = static_cast<float>(Param(job->spec, "eta", 0.1));
          const float b1 = static_cast<float>(Param(job->spec, "beta1", 0.9));
          const float b2 = static_cast<float>(Param(job->spec, "beta2", 0.99));
          const float tau = static_cast<float>(Param(job->spec, "tau", 1e-3));
          job->opt_m.resize(n, 0.0f);
          job->opt_v.resize(n, 0.0f);
          for (size_t i = 0; i < n; ++i) {
            const float delta = sum[i] * inv - w[i];
            job->opt_m[i] = b1 * job->opt_m[i] + (1 - b1) * delta;
            job->opt_v[i] = b2 * job->opt_v[i] + (1 - b2) * delta * delta;
            w[i] += eta * job->opt_m[i] / (std::sqrt(job->opt_v[i]) + tau);
          }
        } else if (a == "fedasync") {
          // One update per round: w <- (1 - α s(u)) w + α s(u) w_k, s(u) = (1+u)^-a.
          const uint64_t base = round.weight_by_base.begin()->first;
          const double u = static_cast<double>(job->version - base);
          const float alpha_t = static_cast<float>(Param(job->spec, "alpha", 0.9) *
                                                   std::pow(1.0 + u, -Param(job->spec, "a", 0.5)));
          for (size_t i = 0; i < n; ++i) w[i] = (1 - alpha_t) * w[i] + alpha_t * sum[i] * inv;
        } else if (a == "fedcompass") {
          // w <- (1 - Σ α_k) w + Σ α_k w_k, α_k = α s(u_k) / N.
          const float keep = static_cast<float>(1.0 - round.weight);
          for (size_t i = 0; i < n; ++i) w[i] = keep * w[i] + sum[i];
        } else if (a == "fedbuff") {
          // Σ s_k Δ_k = Σ s_k w_k − Σ_τ (Σ_{τ_k=τ} s_k) w_τ; w <- w + η_g / K · that.
          for (const auto& [base, s] : round.weight_by_base) {
            const std::vector<float>& wb = job->history[base];
            aggregator::Fold(sum.data(), wb.data(), aggregator::DType::kF32, n,
                             static_cast<float>(-s));
          }
          const float scale = static_cast<float>(Param(job->spec, "eta", 1.0) / round.acked);
          aggregator::Fold(w.data(), sum.data(), aggregator::DType::kF32, n, scale);
        }
        ++job->version;
        job->history[job->version] = w;
        while (job->history.size() > job->spec.staleness_limit + 1) {
          job->history.erase(job->history.begin());
        }
        job->CacheModel();
        job->versions.push_back({job->version, std::nullopt, std::nullopt, round.acked,
                                 job->Elapsed()});
        if (job->spec.rounds > 0 && job->version >= job->spec.rounds) job->done = true;
        spdlog::info("fl job {}: version {} committed from {} update(s) over {} leaf partial "
                     "sum(s) in {:.2f} ms{}",
                     job->spec.name, job->version, round.acked, round.partials.size(),
                     Seconds(t0) * 1e3, job->done ? " (last)" : "");
      }
      // The version is durable: the updates and partial sums it includes go back to the pool.
      for (auto& [inst, p] : round.partials) {
        for (uint64_t tid : p.tickets) {
          (void)job->pool->Release(job->tickets[tid].buffer, kCoordinatorSlot);
          job->tickets.erase(tid);
        }
        (void)job->pool->Release(p.offset, kShoaldSlot);
      }
      if (job->Compass()) {
        const double now = job->Elapsed();
        if (!round.single_client.empty()) {
          job->Assign(round.single_client, now);
        } else if (round.group >= 0 && job->groups.count(round.group)) {
          // Reassign the members that arrived, fastest first.
          std::vector<std::string> arrived(job->groups[round.group].arrived.begin(),
                                           job->groups[round.group].arrived.end());
          std::sort(arrived.begin(), arrived.end(), [&](const auto& x, const auto& y) {
            return job->compass[x].speed < job->compass[y].speed;
          });
          job->groups.erase(round.group);
          for (const auto& id : arrived) {
            job->compass[id].group = -1;
            job->Assign(id, now);
          }
        }
      }
      rit = job->rounds.erase(rit);
      Persist(*job);
    }
  }
}

void FlCoordinator::Persist(JobState& job) {
  const std::string dir = config_.state_dir + "/jobs/" + job.spec.name;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  Json clients = Json::array();
  for (const auto& [id, c] : job.clients) {
    clients.push_back({{"id", c.id}, {"name", c.name}, {"token", c.token}, {"updates", c.updates}});
  }
  Json versions = Json::array();
  for (const auto& v : job.versions) {
    versions.push_back({{"version", v.version},
                        {"accuracy", v.accuracy ? Json(*v.accuracy) : Json(nullptr)},
                        {"loss", v.loss ? Json(*v.loss) : Json(nullptr)},
                        {"updates", v.updates},
                        {"elapsed_s", v.elapsed_s}});
  }
  Json state = {{"spec", SpecToJson(job.spec)},  {"version", job.version},
                {"clients", clients},            {"next_client", job.next_client},
                {"versions", versions},          {"updates_total", job.updates_total},
                {"elapsed_s", job.Elapsed()},    {"done", job.done},
                {"best_accuracy", job.best_accuracy}, {"leaf_id", job.leaf_id}};
  // The model first, then the state that names its version: a crash between the two leaves
  // a newer model than the state says, never an older one.
  auto it = job.models.find(job.version);
  if (it != job.models.end()) {
    if (Status st = WriteFileAtomic(dir + "/model.safetensors", it->second.data(), it->second.size());
        !st.ok()) {
      spdlog::error("fl job {}: checkpoint: {}", job.spec.name, st.ToString());
    }
  }
  const std::string text = state.dump();
  if (Status st = WriteFileAtomic(dir + "/state.json", text.data(), text.size()); !st.ok()) {
    spdlog::error("fl job {}: checkpoint: {}", job.spec.name, st.ToString());
  }
}

Status FlCoordinator::Restore() {
  const std::string root = config_.state_dir + "/jobs";
  std::error_code ec;
  if (!std::filesystem::exists(root, ec)) return {};
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const std::string dir = entry.path().string();
    std::ifstream sf(dir + "/state.json");
    if (!sf) continue;
    Json state = Json::parse(sf, nullptr, false);
    if (state.is_discarded()) return Internal("corrupt FL job state: " + dir + "/state.json");
    auto job = std::make_shared<JobState>();
    job->spec = SpecFromJson(state["spec"]);
    model::ArchitectureOptions opts;
    opts.hidden = {job->spec.hidden};
    auto mspec = model::ArchitectureSpec(job->spec.architecture, opts);
    if (!mspec.ok()) return mspec.status();
    job->mspec = *mspec;
    std::ifstream mf(dir + "/model.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(mf)), std::istreambuf_iterator<char>());
    auto m = model::ModelFromSafetensors(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
        job->mspec);
    if (!m.ok()) return Internal("FL job checkpoint " + dir + ": " + m.status().message());
    job->weights = std::move(m->values);
    job->version = state.value("version", uint64_t{0});
    job->history[job->version] = job->weights;
    job->models[job->version] = bytes;
    for (const auto& c : state["clients"]) {
      JobState::Client cl;
      cl.id = c.value("id", "");
      cl.name = c.value("name", "");
      cl.token = c.value("token", "");
      cl.updates = c.value("updates", uint64_t{0});
      job->clients[cl.id] = cl;
    }
    job->next_client = state.value("next_client", 0u);
    for (const auto& v : state["versions"]) {
      JobState::VersionInfo vi;
      vi.version = v.value("version", uint64_t{0});
      if (v["accuracy"].is_number()) vi.accuracy = v["accuracy"].get<double>();
      if (v["loss"].is_number()) vi.loss = v["loss"].get<double>();
      vi.updates = v.value("updates", 0u);
      vi.elapsed_s = v.value("elapsed_s", 0.0);
      job->versions.push_back(vi);
    }
    job->updates_total = state.value("updates_total", uint64_t{0});
    job->elapsed_before = state.value("elapsed_s", 0.0);
    job->done = state.value("done", false);
    job->best_accuracy = state.value("best_accuracy", 0.0);
    job->leaf_id = state.value("leaf_id", 4095u);
    // Updates acknowledged but not yet committed were in the old process's memory: their
    // clients were answered 202, so the round restarts from the last committed version and
    // clients resend (see the note in the README on what a restart keeps).
    job->open_round = job->version + 1;
    std::lock_guard lock(mu_);
    next_leaf_id_ = std::min(next_leaf_id_, job->leaf_id - 1);
    spdlog::info("fl job {}: resumed at version {} ({} clients, {} updates so far)",
                 job->spec.name, job->version, job->clients.size(), job->updates_total);
    jobs_[job->spec.name] = job;
  }
  return {};
}

}  // namespace shoal
