#include "shoal/fl/client/fl_client_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <semaphore>
#include <thread>

#include "shoal/fl/client/fl_http_client.h"
#include "shoal/fl/client/model_cache.h"
#include "shoal/fl/client/secagg_client.h"
#include "shoal/fl/wire/update_format.h"
#include "shoal/tools/flsim/lie_board.h"
#include "shoal/tools/flsim/mlp_trainer.h"

namespace shoal::client {
namespace {

using Clock = std::chrono::steady_clock;

// Exponential back-off for requests that got no answer or a 503 without Retry-After.
class Backoff {
 public:
  uint32_t NextMs() {
    const uint32_t d = delay_ms_;
    delay_ms_ = std::min<uint32_t>(delay_ms_ * 2, 5000);
    return d;
  }
  void Reset() { delay_ms_ = 100; }

 private:
  uint32_t delay_ms_ = 100;
};

class Simulation {
 public:
  Simulation(const FlRunOptions& o, const Dataset& train, const Dataset& test,
             const FlClientPlan& plan)
      : o_(o),
        train_(train),
        test_(test),
        plan_(plan),
        n_(static_cast<int>(plan.partitions.size())),
        train_slots_(o.train_threads > 0
                         ? o.train_threads
                         : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))) {
    // label-flip: each attacker trains on a copy of its own samples with the labels flipped.
    if (o.attack.kind == AttackSpec::Kind::kLabelFlip) {
      flipped_.resize(plan.partitions.size());
      for (int k = std::max(0, n_ - o.attackers); k < n_; ++k) {
        Dataset& d = flipped_[static_cast<size_t>(k)];
        d = Subset(train, plan.partitions[static_cast<size_t>(k)]);
        FlipLabels(d.labels, d.num_classes);
        flipped_indices_.resize(plan.partitions.size());
        auto& idx = flipped_indices_[static_cast<size_t>(k)];
        idx.resize(d.num_samples);
        for (uint32_t i = 0; i < idx.size(); ++i) idx[i] = i;
      }
    }
    if (o.attack.kind == AttackSpec::Kind::kLie) {
      lie_.emplace(o.attackers, o.attack.value, std::chrono::milliseconds(o.lie_wait_ms));
    }
  }

  Result<FlRunSummary> Run();

 private:
  void ClientLoop(int k);
  void Watch();
  void Evaluate(FlHttpClient& http, uint64_t version);
  bool PostUpdateWithRetry(FlHttpClient& http, int k, const std::string& body);
  // One SecAgg+ round around the update; false when the run stopped meanwhile.
  bool SecureRound(FlHttpClient& http, int k, const JoinResult& id, model::UpdateMeta meta,
                   const model::Model& update);

  // Sleeps unless stopped first; false when stopped.
  bool SleepFor(std::chrono::milliseconds d) {
    std::unique_lock lock(stop_mu_);
    return !stop_cv_.wait_for(lock, d, [&] { return stop_; });
  }
  bool SleepUntil(Clock::time_point t) {
    std::unique_lock lock(stop_mu_);
    return !stop_cv_.wait_until(lock, t, [&] { return stop_; });
  }
  bool stopped() {
    std::lock_guard lock(stop_mu_);
    return stop_;
  }
  // A client thread has ended (done, stopped or failed); the watcher wakes when all have.
  void ClientOut() {
    std::lock_guard lock(stop_mu_);
    ++clients_out_;
    stop_cv_.notify_all();
  }
  bool AllClientsOut() {
    std::lock_guard lock(stop_mu_);
    return clients_out_ >= n_;
  }
  void Stop() {
    {
      std::lock_guard lock(stop_mu_);
      stop_ = true;
      stop_cv_.notify_all();
    }
    if (lie_) lie_->Stop();
  }
  void Log(const std::string& line) {
    if (o_.log == nullptr) return;
    std::lock_guard lock(log_mu_);
    *o_.log << line << '\n';
    o_.log->flush();
  }
  double Elapsed() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

  const FlRunOptions& o_;
  const Dataset& train_;
  std::vector<Dataset> flipped_;  // label-flip: the attackers' own samples, labels flipped
  std::vector<std::vector<uint32_t>> flipped_indices_;
  std::optional<LieBoard> lie_;  // lie: the attackers' pool
  const Dataset& test_;
  const FlClientPlan& plan_;
  const int n_;
  const Clock::time_point t0_ = Clock::now();

  ModelCache cache_;
  std::counting_semaphore<1024> train_slots_;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  int clients_out_ = 0;
  std::mutex log_mu_;

  // Client 0's identity, which the evaluator reports under.
  std::mutex eval_mu_;
  std::optional<JoinResult> evaluator_id_;

  std::atomic<int> clients_told_done_{0};
  std::atomic<int> clients_joined_{0};
  std::atomic<int> clients_failed_{0};
  std::atomic<uint64_t> accepted_{0}, stale_{0}, rejected_{0}, retries_{0}, trained_{0};
  std::atomic<uint64_t> lie_colluded_{0}, lie_pooled_{0}, lie_alone_{0};
  std::mutex err_mu_;
  std::optional<Status> first_join_error_;

  std::optional<SecAggParams> secure_;  // the job's secure aggregation, read before the clients
  std::atomic<uint64_t> secure_rounds_{0}, secure_failed_{0};

  FlRunSummary summary_;  // the watcher's fields
  std::optional<uint64_t> last_evaluated_;
};

void Simulation::ClientLoop(int k) {
  FlHttpClient http(o_.server, o_.job);
  const std::string name = "client-" + std::to_string(k);
  Backoff backoff;

  JoinResult id;
  for (;;) {
    auto joined = http.Join(name, o_.join_token);
    if (joined.ok()) {
      id = std::move(*joined);
      break;
    }
    if (!IsRetryable(joined.status()) || stopped()) {
      Log(name + ": join failed: " + joined.status().message());
      std::lock_guard lock(err_mu_);
      if (!first_join_error_) first_join_error_ = joined.status();
      ++clients_failed_;
      return;
    }
    if (!SleepFor(std::chrono::milliseconds(backoff.NextMs()))) return;
  }
  ++clients_joined_;
  if (k == 0) {
    std::lock_guard lock(eval_mu_);
    evaluator_id_ = id;
  }
  backoff.Reset();

  std::optional<privacy::GaussianNoise> noise;
  if (o_.local_dp.clip > 0) {
    auto seeded = privacy::GaussianNoise::FromCsprng();
    if (!seeded.ok()) {
      Log(name + ": stopping: local DP noise: " + seeded.status().message());
      ++clients_failed_;
      return;
    }
    noise.emplace(*seeded);
  }
  const std::vector<uint32_t>& indices = plan_.partitions[static_cast<size_t>(k)];
  const double step_seconds = plan_.step_seconds[static_cast<size_t>(k)];
  std::optional<MlpTrainer> trainer;
  std::optional<model::Model> work;
  auto fetch = [&http](uint64_t v) { return http.Model(v); };

  while (!stopped()) {
    auto task = http.Task(id.client_id, id.token);
    if (!task.ok()) {
      const Status& st = task.status();
      if (!IsRetryable(st) &&
          (st.code() == StatusCode::kNotFound || st.code() == StatusCode::kPermissionDenied)) {
        Log(name + ": stopping: " + st.message());
        ++clients_failed_;
        return;
      }
      if (!IsRetryable(st)) Log(name + ": task: " + st.message());
      if (!SleepFor(std::chrono::milliseconds(backoff.NextMs()))) break;
      continue;
    }
    backoff.Reset();
    if (task->kind == TaskResult::Kind::kDone) {
      ++clients_told_done_;
      break;
    }
    if (task->kind == TaskResult::Kind::kWait) {
      if (!SleepFor(std::chrono::milliseconds(std::max<uint32_t>(task->retry_after_ms, 10)))) break;
      continue;
    }

    auto global = cache_.Get(task->model_version, fetch);
    if (!global.ok()) {
      // A version the server no longer keeps: ask for a new task.
      if (global.status().code() != StatusCode::kNotFound) {
        Log(name + ": model " + std::to_string(task->model_version) + ": " +
            global.status().message());
        if (!SleepFor(std::chrono::milliseconds(backoff.NextMs()))) break;
      }
      continue;
    }
    const MlpModel& m = **global;
    const SgdOptions sgd{static_cast<float>(task->learning_rate),
                         static_cast<int>(task->batch_size)};
    if (!trainer || trainer->shape().hidden != m.shape.hidden ||
        trainer->shape().inputs != m.shape.inputs || trainer->shape().classes != m.shape.classes ||
        trainer->options().learning_rate != sgd.learning_rate ||
        trainer->options().batch_size != sgd.batch_size) {
      if (static_cast<size_t>(m.shape.inputs) != train_.num_features ||
          m.shape.classes != train_.num_classes) {
        Log(name + ": stopping: the model takes " + std::to_string(m.shape.inputs) +
            " inputs and " + std::to_string(m.shape.classes) + " classes, the data has " +
            std::to_string(train_.num_features) + " and " + std::to_string(train_.num_classes));
        ++clients_failed_;
        return;
      }
      trainer.emplace(m.shape, sgd, o_.seed * 1000003ULL + static_cast<uint64_t>(k));
    }
    work = m.model;  // copy: the cached model is shared

    const Clock::time_point start = Clock::now();
    Result<TrainStats> stats = Internal("unset");
    {
      train_slots_.acquire();
      const bool flipped = !flipped_.empty() && flipped_[static_cast<size_t>(k)].num_samples > 0;
      stats = flipped ? trainer->Train(work->values, flipped_[static_cast<size_t>(k)],
                                       flipped_indices_[static_cast<size_t>(k)],
                                       static_cast<int>(task->local_steps))
                      : trainer->Train(work->values, train_, indices,
                                       static_cast<int>(task->local_steps));
      train_slots_.release();
    }
    if (!stats.ok()) {
      Log(name + ": stopping: training failed: " + stats.status().message());
      ++clients_failed_;
      return;
    }
    ++trained_;
    // The simulated training time, counted from when training started: a client whose
    // computation (on a shared CPU) took longer than that arrives late, never early.
    const double simulated = task->local_steps * step_seconds * o_.time_scale;
    if (!SleepUntil(start + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(simulated)))) {
      break;
    }

    if (k >= static_cast<int>(plan_.partitions.size()) - o_.attackers) {
      if (lie_) {
        const int met = lie_->Collude(task->model_version, work->values);
        if (met == 0) break;  // stopped while waiting for the other attackers
        if (met == 1) {
          ++lie_alone_;
        } else {
          ++lie_colluded_;
          lie_pooled_ += static_cast<uint64_t>(met);
        }
      }
      ApplyAttack(o_.attack, m.model.values, work->values,
                  o_.seed * 7919ULL + static_cast<uint64_t>(k) * 104729ULL + trained_);
    }
    if (noise) {
      auto norm = privacy::PrivatizeUpdate(m.model.values, work->values, o_.local_dp, *noise);
      if (!norm.ok()) {
        Log(name + ": stopping: local DP: " + norm.status().message());
        ++clients_failed_;
        return;
      }
    }
    model::UpdateMeta meta;
    meta.job = o_.job;
    meta.client_id = id.client_id;
    meta.token = id.token;
    meta.base_version = task->model_version;
    meta.num_samples = indices.size();
    meta.local_steps = task->local_steps;
    meta.train_seconds = simulated;
    meta.kind = model::UpdateKind::kWeights;
    if (secure_) {
      if (!SecureRound(http, k, id, meta, *work)) break;
      continue;
    }
    auto body = model::EncodeUpdate(meta, *work, o_.wire_dtype);
    if (!body.ok()) {
      Log(name + ": stopping: encoding the update failed: " + body.status().message());
      ++clients_failed_;
      return;
    }
    if (!PostUpdateWithRetry(
            http, k, std::string(reinterpret_cast<const char*>(body->data()), body->size()))) {
      break;
    }
  }
}

bool Simulation::SecureRound(FlHttpClient& http, int k, const JoinResult& id,
                             model::UpdateMeta meta, const model::Model& update) {
  // Each survivor weighs 1 in a secure round (the server sees only the masked sum).
  meta.num_samples = 1;
  SecAggClient secure(http, id.client_id, id.token, *secure_, [this] { return stopped(); });
  auto round = secure.RunRound(meta, update);
  if (round.ok()) {
    ++secure_rounds_;
    ++accepted_;
    return true;
  }
  if (stopped()) return false;
  ++secure_failed_;
  Log("client-" + std::to_string(k) + ": secure round " + std::to_string(secure.round()) + ": " +
      round.status().message());
  return true;
}

// False when the run stopped while retrying.
bool Simulation::PostUpdateWithRetry(FlHttpClient& http, int k, const std::string& body) {
  Backoff backoff;
  for (;;) {
    const Status st = http.PostUpdate(body);
    if (st.ok()) {
      ++accepted_;
      return true;
    }
    if (st.code() == StatusCode::kAlreadyExists) {  // 409: too stale; ask for a new task
      ++stale_;
      return true;
    }
    if (!IsRetryable(st)) {
      ++rejected_;
      Log("client-" + std::to_string(k) + ": update rejected: " + st.message());
      return true;
    }
    ++retries_;
    const uint32_t wait_ms = http.retry_after_ms() > 0 ? http.retry_after_ms() : backoff.NextMs();
    if (!SleepFor(std::chrono::milliseconds(wait_ms))) return false;
  }
}

void Simulation::Evaluate(FlHttpClient& http, uint64_t version) {
  auto global = cache_.Get(version, [&http](uint64_t v) { return http.Model(v); });
  if (!global.ok()) {
    Log("evaluator: model " + std::to_string(version) + ": " + global.status().message());
    return;
  }
  const MlpModel& m = **global;
  auto r = client::Evaluate(m.shape, m.model.values, test_);
  if (!r.ok()) {
    Log("evaluator: version " + std::to_string(version) + ": " + r.status().message());
    return;
  }
  last_evaluated_ = version;
  summary_.evaluated = true;
  summary_.final_version = version;
  summary_.final_accuracy = r->accuracy;
  summary_.final_loss = r->loss;
  char line[160];
  std::snprintf(line, sizeof line, "version %llu  accuracy %.4f  loss %.4f  t=%.1fs",
                static_cast<unsigned long long>(version), r->accuracy, r->loss, Elapsed());
  Log(line);

  std::optional<JoinResult> id;
  {
    std::lock_guard lock(eval_mu_);
    id = evaluator_id_;
  }
  if (!id) return;  // client 0 has not joined (yet): nothing to report under
  EvalReport e{id->client_id, id->token, version, r->accuracy, r->loss, r->samples};
  const Status st = http.PostEval(e);
  if (st.ok()) {
    ++summary_.evals_posted;
  } else {
    Log("evaluator: eval report for version " + std::to_string(version) + ": " + st.message());
  }
}

void Simulation::Watch() {
  FlHttpClient http(o_.server, o_.job);
  std::optional<uint64_t> last_version;
  std::string last_error;
  for (;;) {
    const bool all_out = AllClientsOut();
    if (o_.max_seconds > 0 && Elapsed() >= o_.max_seconds) {
      summary_.timed_out = true;
      break;
    }
    auto st = http.JobStatus();
    if (st.ok()) {
      last_error.clear();
      if (!last_version || st->version != *last_version) {
        last_version = st->version;
        ++summary_.versions_seen;
        summary_.last_version = st->version;
        if (o_.evaluator) Evaluate(http, st->version);
      }
      if (st->state == "done") {
        summary_.job_done = true;
        break;
      }
    } else if (st.status().message() != last_error) {
      last_error = st.status().message();
      Log("status: " + last_error);
    }
    if (all_out) break;  // after one last poll, which saw the final version
    std::unique_lock lock(stop_mu_);
    stop_cv_.wait_for(lock, std::chrono::milliseconds(o_.status_poll_ms),
                      [&] { return stop_ || clients_out_ >= n_; });
  }
  // The final model: the evaluator scores the last version if the poll had not yet.
  if (o_.evaluator && last_version && last_evaluated_ != last_version) {
    Evaluate(http, *last_version);
  }
}

Result<FlRunSummary> Simulation::Run() {
  {
    // Whether the job aggregates securely, and how (its status names the parameters).
    FlHttpClient http(o_.server, o_.job);
    auto st = http.JobStatus();
    if (!st.ok()) return st.status();
    auto params = SecAggParamsOf(st->json);
    if (!params.ok()) return params.status();
    secure_ = *params;
    if (secure_) {
      char line[160];
      std::snprintf(line, sizeof line,
                    "job %s aggregates securely (SecAgg+: threshold %u, clip range %g, %u bits): "
                    "updates go masked",
                    o_.job.c_str(), secure_->threshold, secure_->clip_range, secure_->bits);
      Log(line);
    }
  }
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n_));
  for (int k = 0; k < n_; ++k)
    threads.emplace_back([this, k] {
      ClientLoop(k);
      ClientOut();
    });
  Watch();
  Stop();
  for (std::thread& t : threads) t.join();

  if (clients_joined_ == 0 && first_join_error_) return *first_join_error_;
  FlRunSummary s = summary_;
  // A job that finished while the poll slept: the clients all heard "done".
  if (!s.job_done && !s.timed_out && clients_told_done_ == n_) s.job_done = true;
  s.updates_accepted = accepted_;
  s.updates_stale = stale_;
  s.updates_rejected = rejected_;
  s.update_retries = retries_;
  s.tasks_trained = trained_;
  s.model_downloads = cache_.downloads();
  s.clients_failed = clients_failed_;
  s.lie_colluded = lie_colluded_;
  s.lie_pooled = lie_pooled_;
  s.lie_alone = lie_alone_;
  s.secure = secure_.has_value();
  s.secure_rounds = secure_rounds_;
  s.secure_failed = secure_failed_;
  s.seconds = Elapsed();
  return s;
}

}  // namespace

Result<FlRunSummary> RunFlClients(const FlRunOptions& options, const Dataset& train,
                                  const Dataset& test, const FlClientPlan& plan) {
  if (plan.partitions.empty() || plan.partitions.size() != plan.step_seconds.size()) {
    return InvalidArgument("a run needs one partition and one step time per client");
  }
  if (options.evaluator && test.num_samples == 0) {
    return InvalidArgument("the evaluator needs a non-empty test set");
  }
  if (options.attack.kind == AttackSpec::Kind::kLie && options.attackers < 2) {
    return InvalidArgument(
        "attack lie: the attackers pool their models, so it needs at least 2 "
        "attackers (got " +
        std::to_string(options.attackers) + ")");
  }
  if (options.attack.kind == AttackSpec::Kind::kLie && options.attack.value == 0) {
    auto z = LieZ(static_cast<int>(plan.partitions.size()), options.attackers);
    if (!z.ok()) return z.status();
    FlRunOptions with_z = options;
    with_z.attack.value = *z;
    Simulation sim(with_z, train, test, plan);
    return sim.Run();
  }
  Simulation sim(options, train, test, plan);
  return sim.Run();
}

}  // namespace shoal::client
