// FlMembers (fl_members.h): the jobs this node folds for tops on other nodes.
#include "shoal/fl/coordinator/fl_members.h"

#include <chrono>
#include <filesystem>
#include <set>

#include "shoal/common/buffer_release.h"
#include "shoal/fl/coordinator/job_state.h"
#include "shoal/fl/kernels/fold_u32.h"
#include "shoal/fl/lora/lora_fold.h"
#include "shoal/v1/fl.pb.h"

namespace shoal {
using namespace coordinator_internal;  // NOLINT(google-build-using-namespace): this library's own

struct FlMembers::Job {
  struct Ticket {
    uint64_t top_ticket = 0;
    uint64_t round = 0;   // the top's round
    uint64_t buffer = 0;  // held with kCoordinatorSlot until the top's checkpoint includes it
    uint64_t base_version = 0;
    uint64_t num_samples = 0;
    double coefficient = 0;
    std::string client;
    uint32_t instance = 0;
    bool acked = false;
    uint64_t seq = 0;
  };
  struct Partial {
    uint64_t offset = 0;            // float32[num_params] in the pool, held with kShoaldSlot
    std::vector<uint64_t> tickets;  // local tickets folded into it
    bool rebuild = false;           // a fold into it failed halfway: refolded when asked for
  };
  struct Round {
    std::map<uint32_t, Partial> partials;  // by leaf instance
    uint32_t inflight = 0;
  };

  std::mutex mu;
  FlJobSpec spec;
  model::ModelSpec mspec;
  std::string top;
  uint32_t leaf_id = 0;
  BufferPool* pool = nullptr;
  std::map<uint64_t, Ticket> tickets;  // by local ticket
  std::set<uint64_t> admitting;        // local tickets whose admission by the top is under way
  std::map<uint64_t, Round> rounds;    // by the top's round
  std::string dir;
  UpdateLog log;
  uint64_t next_seq = 1;
  bool removed = false;
  // The buffer the leaves' partial sums are added up in for the top (its pages stay warm
  // round to round; a new one while the last is still being sent).
  std::shared_ptr<std::vector<float>> sum_spare;

  // Gives this node's hold (`slot`) on a pool buffer back. It fails only where the job's
  // bookkeeping and the pool disagree, never through what a client sent: logged with what the
  // buffer was, and the caller goes on (nothing to undo).
  void ReleaseBuffer(uint64_t offset, HolderSlot slot, const char* what) {
    ReleaseOrLog(*pool, offset, slot, what, "fl job {} (folded for node {})", spec.name, top);
  }
  // The log keeps the acknowledged updates the top's checkpoints do not include yet.
  void CompactLog() {
    std::string bytes;
    AppendAckedRecords(tickets, bytes);
    log.Rewrite(spec.name, dir, bytes);
  }
  void ReleaseAll() {
    if (pool == nullptr) return;
    for (auto& [id, t] : tickets) {
      if (t.buffer != 0) ReleaseBuffer(t.buffer, kCoordinatorSlot, "an update");
    }
    for (auto& [rid, r] : rounds) {
      for (auto& [inst, p] : r.partials) {
        if (p.offset != 0) ReleaseBuffer(p.offset, kShoaldSlot, "a partial sum");
      }
    }
    tickets.clear();
    rounds.clear();
  }
  // Folds the update of local ticket `id` (in the pool) into `acc`.
  bool Refold(float* acc, uint64_t id) {
    const Ticket& t = tickets[id];
    PayloadView pv = ReadPayload(pool->Data(t.buffer));
    model::ParseLimits limits;  // as the leaf parsed it (a HetLoRA job's lower ranks)
    limits.lora_lower_rank = spec.lora.enabled() && spec.lora.method == "hetlora";
    auto view = model::ParseUpdate(pv.body, mspec, limits);
    if (!view.ok()) {
      spdlog::error("fl job {}: update of client {} no longer parses: {}", spec.name, t.client,
                    view.status().ToString());
      return false;
    }
    lora::FoldUpdate(acc, mspec, *view, static_cast<float>(t.coefficient));
    return true;
  }
};

// Local tickets start from the clock: a restarted node does not name its admissions as before.
FlMembers::FlMembers(const NodeConfig& config)
    : config_(config),
      next_ticket_(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count()) &
                   (kTicketBit - 1)) {}

FlMembers::~FlMembers() {
  std::deque<AdmitCall> left;
  {
    std::lock_guard lock(admit_mu_);
    admit_stopping_ = true;
    left.swap(admits_);
  }
  admit_cv_.notify_all();
  for (auto& t : admit_threads_) t.join();
  for (AdmitCall& c : left) c.done(Unavailable("shoald is stopping"));
  std::lock_guard lock(mu_);
  for (auto& [name, job] : jobs_) {
    std::lock_guard jl(job->mu);
    job->ReleaseAll();
  }
}

std::shared_ptr<FlMembers::Job> FlMembers::Find(std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : it->second;
}

bool FlMembers::Has(std::string_view job) {
  std::lock_guard lock(mu_);
  return jobs_.find(job) != jobs_.end();
}

std::map<std::string, std::string> FlMembers::Tops() {
  std::map<std::string, std::string> out;
  std::lock_guard lock(mu_);
  for (const auto& [name, job] : jobs_) {
    std::lock_guard jl(job->mu);
    out[name] = job->top;
  }
  return out;
}

Status FlMembers::Add(const FlJobSpec& spec, const std::string& top, uint32_t leaf_id) {
  if (auto job = Find(spec.name)) {
    std::lock_guard jl(job->mu);
    job->top = top;
    return {};
  }
  auto job = std::make_shared<Job>();
  job->spec = spec;
  job->top = top;
  job->leaf_id = leaf_id;
  auto mspec = JobModelSpec(spec);
  if (!mspec.ok()) return mspec.status();
  job->mspec = *mspec;
  job->dir = config_.state_dir + "/members/" + spec.name;
  std::error_code ec;
  std::filesystem::create_directories(job->dir, ec);
  std::filesystem::remove(job->dir + "/updates.log", ec);
  SHOAL_RETURN_IF_ERROR(job->log.Open(job->dir));
  std::lock_guard lock(mu_);
  jobs_.emplace(spec.name, std::move(job));
  return {};
}

void FlMembers::Remove(const std::string& name) {
  std::shared_ptr<Job> job;
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(name);
    if (it == jobs_.end()) return;
    job = it->second;
    jobs_.erase(it);
    for (auto t = by_ticket_.begin(); t != by_ticket_.end();) {
      t = t->second == job ? by_ticket_.erase(t) : std::next(t);
    }
  }
  std::lock_guard jl(job->mu);
  job->removed = true;
  job->ReleaseAll();
  std::error_code ec;
  std::filesystem::remove_all(job->dir, ec);
}

std::vector<FunctionSpec> FlMembers::LeafSpecs(
    const std::function<std::string(std::string_view)>& name) {
  std::vector<FunctionSpec> out;
  std::lock_guard lock(mu_);
  for (const auto& [job_name, job] : jobs_) {
    out.push_back(LeafSpec(job->spec, job->leaf_id, name(job_name), config_));
  }
  return out;
}

void FlMembers::SetTopLink(FlTopLink* link) {
  std::unique_lock lock(link_mu_);
  link_.store(link);
}

Status FlMembers::Prepare(std::string_view name, BufferPool& pool, std::span<const std::byte> body,
                          uint64_t buffer, std::string_view bearer, AdmitCall* call) {
  call->job = Find(name);
  if (!call->job) return NotFound("FL job '" + std::string(name) + "' not found");
  shoal::v1::UpdateHeader h;
  size_t head_bytes = 0;
  SHOAL_RETURN_IF_ERROR(model::ParseUpdateHead(body, &h, &head_bytes));
  {
    std::lock_guard jl(call->job->mu);
    call->top = call->job->top;
  }
  // The top decides on the header alone; the tensors stay in this node's pool.
  call->head.assign(reinterpret_cast<const char*>(body.data()), head_bytes);
  call->bearer = bearer;
  call->base_version = h.base_version();
  call->num_samples = h.num_samples();
  call->client = h.client_id().substr(0, 39);
  call->pool = &pool;
  call->buffer = buffer;
  return {};
}

Result<FlAdmission> FlMembers::Exchange(const AdmitCall& c) {
  const std::shared_ptr<Job>& job = c.job;
  // The admission's key at the top is its ticket here: known to the top before this node
  // knows the top's answer (Unknown).
  uint64_t id;
  {
    std::lock_guard lock(mu_);
    id = kTicketBit | next_ticket_++;
  }
  {
    std::lock_guard jl(job->mu);
    job->admitting.insert(id);
  }
  auto done_admitting = [&] {
    std::lock_guard jl(job->mu);
    job->admitting.erase(id);
  };
  Result<FlTopLink::Admission> a = Unavailable("this node has no link to the job's top");
  {
    // Held while the link is used: SetTopLink(nullptr) (shoald stopping) waits for it.
    std::shared_lock ll(link_mu_);
    if (FlTopLink* link = link_.load()) {
      a = link->Admit(c.top, job->spec.name, c.bearer, std::as_bytes(std::span(c.head)), id);
    }
  }
  if (!a.ok()) {
    if (a.status().code() == StatusCode::kUnavailable) {
      // The top may have admitted it all the same (its answer lost): it asks, and drops it.
      spdlog::warn("fl job {}: update of client {} not admitted: {}", job->spec.name, c.client,
                   a.status().message());
    }
    done_admitting();
    return a.status();
  }
  {
    std::lock_guard jl(job->mu);
    job->admitting.erase(id);
    // Without a buffer yet (the gateway reads the body once admitted): Hold() takes it.
    Status st = c.buffer == 0 ? Status::Ok() : c.pool->Retain(c.buffer, kCoordinatorSlot);
    if (!st.ok() || job->removed) {
      if (st.ok() && c.buffer != 0) {
        ReleaseOrLog(*c.pool, c.buffer, kCoordinatorSlot, "a refused update", "fl job {}",
                     job->spec.name);
      }
      std::shared_lock ll(link_mu_);
      if (FlTopLink* l = link_.load()) l->Report(c.top, job->spec.name, a->ticket, false);
      return Internal("cannot hold the update buffer: " + st.message());
    }
    job->pool = c.pool;
    Job::Ticket t;
    t.top_ticket = a->ticket;
    t.round = a->round;
    t.buffer = c.buffer;
    t.base_version = c.base_version;
    t.num_samples = c.num_samples;
    t.coefficient = a->coefficient;
    t.client = c.client;
    ++job->rounds[t.round].inflight;
    job->tickets[id] = std::move(t);
  }
  {
    // mu_ after job->mu is released: everywhere else takes mu_ first (Tops, Remove), and the
    // two orders deadlocked a node's FL threads. A job removed meanwhile released its tickets:
    // its ticket is not listed (a reply for it finds nothing).
    std::lock_guard lock(mu_);
    auto it = jobs_.find(job->spec.name);
    if (it != jobs_.end() && it->second == job) by_ticket_[id] = job;
  }
  if (a->durable_round > 0) Released(job->spec.name, a->durable_round);
  return FlAdmission{id, static_cast<float>(a->coefficient)};
}

Result<FlAdmission> FlMembers::Admit(std::string_view name, BufferPool& pool,
                                     std::span<const std::byte> body, uint64_t buffer,
                                     std::string_view bearer) {
  AdmitCall call;
  SHOAL_RETURN_IF_ERROR(Prepare(name, pool, body, buffer, bearer, &call));
  return Exchange(call);
}

void FlMembers::AdmitAsync(std::string_view name, BufferPool& pool, std::span<const std::byte> body,
                           uint64_t buffer, std::string_view bearer, FlDataPath::AdmitDone done) {
  AdmitCall call;
  if (Status st = Prepare(name, pool, body, buffer, bearer, &call); !st.ok()) {
    done(st);
    return;
  }
  {
    std::lock_guard lock(admit_mu_);
    if (!admit_stopping_ && admits_.size() < kAdmitsWaiting) {
      while (admit_threads_.size() < kAdmitThreads) {
        admit_threads_.emplace_back([this] { AdmitLoop(); });
      }
      call.done = std::move(done);
      admits_.push_back(std::move(call));
      admit_cv_.notify_one();
      return;
    }
  }
  done(ResourceExhausted("job '" + std::string(name) + "': " + std::to_string(kAdmitsWaiting) +
                         " updates already wait for their top, node " + call.top +
                         ", to admit them; retry"));
}

void FlMembers::AdmitLoop() {
  for (;;) {
    AdmitCall call;
    {
      std::unique_lock lock(admit_mu_);
      admit_cv_.wait(lock, [this] { return admit_stopping_ || !admits_.empty(); });
      if (admits_.empty()) return;  // stopping
      call = std::move(admits_.front());
      admits_.pop_front();
    }
    call.done(Exchange(call));
  }
}

Result<std::shared_ptr<FlMembers::Job>> FlMembers::JobOf(uint64_t ticket) {
  std::lock_guard lock(mu_);
  auto it = by_ticket_.find(ticket);
  if (it == by_ticket_.end()) return NotFound("ticket " + std::to_string(ticket) + " unknown");
  return it->second;
}

Status FlMembers::Hold(uint64_t ticket, BufferPool& pool, uint64_t buffer) {
  auto found = JobOf(ticket);
  if (!found.ok()) return found.status();
  const std::shared_ptr<Job>& job = *found;
  std::lock_guard jl(job->mu);
  auto tit = job->tickets.find(ticket);
  if (tit == job->tickets.end() || tit->second.buffer != 0) {
    return NotFound("ticket " + std::to_string(ticket) + " is gone or holds a buffer");
  }
  SHOAL_RETURN_IF_ERROR(pool.Retain(buffer, kCoordinatorSlot));
  tit->second.buffer = buffer;
  return {};
}

Result<uint64_t> FlMembers::PartialFor(uint64_t ticket, uint32_t instance) {
  auto found = JobOf(ticket);
  if (!found.ok()) return found.status();
  const std::shared_ptr<Job>& job = *found;
  std::lock_guard jl(job->mu);
  auto tit = job->tickets.find(ticket);
  if (tit == job->tickets.end()) return NotFound("ticket gone");
  tit->second.instance = instance;
  Job::Partial& p = job->rounds[tit->second.round].partials[instance];
  if (p.offset == 0) {
    // A leaf's first update of the round: its partial sum (once per leaf and round).
    auto fresh = ZeroedPartial(*job->pool, job->mspec.num_params() * sizeof(float));
    if (!fresh.ok()) return fresh.status();
    p.offset = *fresh;
  }
  return p.offset;
}

void FlMembers::Completed(uint64_t ticket, int http_status, bool leaf_answered) {
  const std::shared_ptr<Job> job = TakeLocked(mu_, by_ticket_, ticket);
  if (job == nullptr) return;
  std::string top;
  uint64_t top_ticket = 0;
  bool ok = false;
  {
    std::lock_guard jl(job->mu);
    auto tit = job->tickets.find(ticket);
    if (tit == job->tickets.end()) return;
    Job::Ticket& t = tit->second;
    Job::Round& round = job->rounds[t.round];
    --round.inflight;
    top = job->top;
    top_ticket = t.top_ticket;
    if (http_status >= 200 && http_status < 300) {
      // Durable here (pool + log) before the gateway answers 202 (it does once this returns).
      t.seq = job->next_seq++;
      t.acked = true;
      if (Status st = job->log.Append(RecordOf(t)); !st.ok()) {
        spdlog::error("fl job {}: {}", job->spec.name, st.ToString());
      }
      round.partials[t.instance].tickets.push_back(ticket);
      ok = true;
    } else {
      auto pit = round.partials.find(t.instance);
      if (http_status == 502 && pit != round.partials.end()) {
        pit->second.rebuild = true;
        spdlog::warn(
            "fl job {}: leaf {:#x} failed{}; its partial sum is rebuilt when the top "
            "asks for it",
            job->spec.name, t.instance, leaf_answered ? " (its GPU fold)" : "");
      }
      if (t.buffer != 0) job->ReleaseBuffer(t.buffer, kCoordinatorSlot, "a failed update");
      job->tickets.erase(tit);
    }
  }
  std::shared_lock ll(link_mu_);
  if (FlTopLink* link = link_.load()) link->Report(top, job->spec.name, top_ticket, ok);
}

void FlMembers::PartialChanged(uint64_t ticket) {
  auto found = JobOf(ticket);
  if (!found.ok()) return;
  const std::shared_ptr<Job>& job = *found;
  std::lock_guard jl(job->mu);
  auto tit = job->tickets.find(ticket);
  if (tit == job->tickets.end()) return;
  auto& partials = job->rounds[tit->second.round].partials;
  auto pit = partials.find(tit->second.instance);
  if (pit == partials.end()) return;
  pit->second.rebuild = true;
  spdlog::warn(
      "fl job {}: leaf {:#x} refused an update after folding part of it; its partial sum is "
      "rebuilt when the top asks for it",
      job->spec.name, tit->second.instance);
}

Result<FlMembers::PartialSum> FlMembers::PartialOf(const std::string& name, uint64_t round_id,
                                                   const std::vector<uint64_t>& wanted) {
  auto job = Find(name);
  if (!job) return NotFound("FL job '" + name + "' is not folded on this node");
  std::lock_guard jl(job->mu);
  auto rit = job->rounds.find(round_id);
  if (rit == job->rounds.end()) {
    return NotFound("round " + std::to_string(round_id) + " of job '" + name +
                    "' has no update on this node");
  }
  Job::Round& round = rit->second;
  if (round.inflight != 0) {
    return Unavailable(std::to_string(round.inflight) + " update(s) of round " +
                       std::to_string(round_id) + " are still being folded here");
  }
  // The top's tickets -> this node's, for the acknowledged updates of the round.
  std::map<uint64_t, uint64_t> local;
  bool rebuild = false;
  for (const auto& [inst, p] : round.partials) {
    rebuild = rebuild || p.rebuild;
    for (uint64_t id : p.tickets) local[job->tickets[id].top_ticket] = id;
  }
  std::vector<uint64_t> want_sorted = wanted;
  std::sort(want_sorted.begin(), want_sorted.end());
  bool same = want_sorted.size() == local.size();
  for (size_t i = 0; same && i < want_sorted.size(); ++i) {
    same = local.count(want_sorted[i]) != 0;
  }
  const size_t n = job->mspec.num_params();
  PartialSum out;
  out.updates = wanted.size();
  if (same && !rebuild && round.partials.size() == 1) {
    // One leaf folded them all: its partial sum, sent from the pool as it is.
    const Job::Partial& p = round.partials.begin()->second;
    out.sum = {reinterpret_cast<const float*>(job->pool->Data(p.offset).data()), n};
    out.keep = job;
    return out;
  }
  std::shared_ptr<std::vector<float>> sum = job->sum_spare;
  if (!sum || sum.use_count() > 1) sum = std::make_shared<std::vector<float>>();
  job->sum_spare = sum;
  sum->resize(n);
  const bool masked = job->spec.privacy.secure_aggregation.enabled;
  if (masked && (!same || rebuild)) {
    // Masked inputs sum in Z_{2^32} and cannot be told apart: as at the top, a round whose
    // leaf failed mid-fold is refused (its clients start the next one).
    return Unavailable("round " + std::to_string(round_id) + " of secure job '" + name +
                       "': a leaf failed while folding a masked input here");
  }
  if (same && !rebuild) {
    // The leaves' partial sums added up in one pass over each (masked ones modulo 2^32: the
    // same 4 bytes per parameter travel to the top either way).
    bool first = true;
    for (const auto& [inst, p] : round.partials) {
      const auto* leaf = reinterpret_cast<const float*>(job->pool->Data(p.offset).data());
      float* acc = sum->data();
      if (first) {
        std::memcpy(acc, leaf, n * sizeof(float));
      } else if (masked) {
        agg::FoldU32(reinterpret_cast<uint32_t*>(acc), leaf, n);
      } else {
        for (size_t i = 0; i < n; ++i) acc[i] += leaf[i];
      }
      first = false;
    }
  } else {
    std::fill(sum->begin(), sum->end(), 0.0f);
    // Exactly the updates the top counts, from their bytes in the pool.
    for (uint64_t top_ticket : wanted) {
      auto it = local.find(top_ticket);
      if (it == local.end()) {
        return NotFound("update " + std::to_string(top_ticket) + " of round " +
                        std::to_string(round_id) + " is not acknowledged on this node");
      }
      if (!job->Refold(sum->data(), it->second)) {
        return Internal("update " + std::to_string(top_ticket) + " no longer parses");
      }
    }
    spdlog::warn("fl job {}: round {}: partial sum refolded from {} update(s) in the pool", name,
                 round_id, wanted.size());
  }
  out.sum = *sum;
  out.keep = std::move(sum);
  return out;
}

Result<std::vector<uint64_t>> FlMembers::Unknown(const std::string& name,
                                                 const std::vector<uint64_t>& keys) {
  auto job = Find(name);
  if (!job) return keys;  // nothing of the job is held here
  std::vector<uint64_t> out;
  std::lock_guard jl(job->mu);
  for (uint64_t key : keys) {
    if (job->admitting.count(key) == 0 && job->tickets.count(key) == 0) out.push_back(key);
  }
  return out;
}

void FlMembers::Released(const std::string& name, uint64_t durable_round) {
  auto job = Find(name);
  if (!job) return;
  std::lock_guard jl(job->mu);
  bool released = false;
  for (auto rit = job->rounds.begin(); rit != job->rounds.end() && rit->first <= durable_round;) {
    Job::Round& r = rit->second;
    if (r.inflight != 0) {
      ++rit;
      continue;
    }
    for (auto& [inst, p] : r.partials) {
      for (uint64_t id : p.tickets) {
        job->ReleaseBuffer(job->tickets[id].buffer, kCoordinatorSlot, "a checkpointed update");
        job->tickets.erase(id);
      }
      if (p.offset != 0) job->ReleaseBuffer(p.offset, kShoaldSlot, "a checkpointed partial sum");
    }
    rit = job->rounds.erase(rit);
    released = true;
  }
  if (released) job->CompactLog();
}

}  // namespace shoal
