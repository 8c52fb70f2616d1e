// Cluster mode, LIFL's hierarchy across nodes: the FL jobs this node folds for a top on another
// node. An update that enters this node's gateway for such a job is written once into this
// node's pool, admitted by the top on its header alone (FlTopLink::Admit), folded by a leaf
// here, written to this node's update log and only then acknowledged (202: durable here); the
// top hears that it counts (FlTopLink::Report) and, once its round is due, fetches this node's
// one partial sum of the round (PartialOf), never the updates. The updates stay held here
// until the top says the version that includes them is checkpointed (durable_round).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "shoal/fl/coordinator/fl_coordinator.h"

namespace shoal {

class FlMembers {
 public:
  // Tickets of member jobs carry this bit (FlCoordinator routes PartialFor/Completed by it).
  static constexpr uint64_t kTicketBit = uint64_t{1} << 61;

  explicit FlMembers(const NodeConfig& config);
  ~FlMembers();
  // (Waits for the admit exchanges using the link it replaces.)
  void SetTopLink(FlTopLink* link);

  // Folds `spec`'s updates here for its top on node `top`; a job already here keeps its
  // state (its top's name is updated). `leaf_id` is the leaf function's id.
  Status Add(const FlJobSpec& spec, const std::string& top, uint32_t leaf_id);
  // Stops folding the job here: its held updates go back to the pool, its log is removed.
  void Remove(const std::string& job);
  bool Has(std::string_view job);
  std::map<std::string, std::string> Tops();  // job -> its top's node
  // The jobs' leaf-aggregator functions (as the coordinator's own jobs' leaves).
  std::vector<FunctionSpec> LeafSpecs(const std::function<std::string(std::string_view)>& name);

  // FlDataPath for these jobs (gateway loops).
  Result<FlAdmission> Admit(std::string_view job, BufferPool& pool, std::span<const std::byte> body,
                            uint64_t buffer, std::string_view bearer);
  // Admit without waiting: the exchange with the top runs on one of this node's admit threads,
  // which calls `done` with Admit's result (or `done` runs before this returns, with an error
  // known here: an unknown job, a malformed header, too many admissions waiting).
  void AdmitAsync(std::string_view job, BufferPool& pool, std::span<const std::byte> body,
                  uint64_t buffer, std::string_view bearer, FlDataPath::AdmitDone done);
  // The buffer of an update admitted on its header alone (AdmitAsync with `buffer` 0): held
  // with kCoordinatorSlot from here on.
  Status Hold(uint64_t ticket, BufferPool& pool, uint64_t buffer);
  Result<uint64_t> PartialFor(uint64_t ticket, uint32_t instance);
  void Completed(uint64_t ticket, int http_status, bool leaf_answered);
  // The leaf's refusal changed the partial sum: rebuilt when the top asks for it.
  void PartialChanged(uint64_t ticket);

  // This node's partial sum of the top's `round`, over exactly the top's `tickets` (all of
  // them acknowledged here): `sum` points at float32[num_params] that stays valid while `keep`
  // is held (a leaf's partial in the pool when one leaf folded them all, else added up).
  struct PartialSum {
    std::span<const float> sum;
    std::shared_ptr<void> keep;
    size_t updates = 0;
  };
  Result<PartialSum> PartialOf(const std::string& job, uint64_t round,
                               const std::vector<uint64_t>& tickets);
  // Of `keys` (admissions this node asked the top for: FlTopLink::Admit), those this node neither
  // holds (in flight or folded) nor is still admitting: failed ones (the top hears that from
  // their report), or ones the top admitted but whose answer never arrived here.
  Result<std::vector<uint64_t>> Unknown(const std::string& job, const std::vector<uint64_t>& keys);
  // The top's rounds up to `durable_round` are committed and checkpointed: their updates go
  // back to the pool and leave the update log.
  void Released(const std::string& job, uint64_t durable_round);

  struct Job;  // fl_members.cc

 private:
  // An admission: what the gateway's loop reads of the update (its header's bytes copied),
  // then the exchange with the top and the ticket (Exchange, on the caller's or an admit
  // thread).
  struct AdmitCall {
    std::shared_ptr<Job> job;
    std::string top, bearer, head;  // head: prefix + UpdateHeader, as the top reads them
    uint64_t base_version = 0, num_samples = 0;
    std::string client;
    BufferPool* pool = nullptr;
    uint64_t buffer = 0;
    FlDataPath::AdmitDone done;
  };
  Status Prepare(std::string_view job, BufferPool& pool, std::span<const std::byte> body,
                 uint64_t buffer, std::string_view bearer, AdmitCall* call);
  Result<FlAdmission> Exchange(const AdmitCall& call);
  void AdmitLoop();
  // The job a live ticket belongs to; kNotFound naming the ticket.
  Result<std::shared_ptr<Job>> JobOf(uint64_t ticket);

  std::shared_ptr<Job> Find(std::string_view job);
  const NodeConfig& config_;
  std::atomic<FlTopLink*> link_{nullptr};
  std::shared_mutex link_mu_;  // held shared while an admit exchange uses link_
  // Admissions waiting for an admit thread (started at the first), at most kAdmitsWaiting.
  static constexpr size_t kAdmitThreads = 4;
  static constexpr size_t kAdmitsWaiting = 1024;
  std::mutex admit_mu_;
  std::condition_variable admit_cv_;
  std::deque<AdmitCall> admits_;
  std::vector<std::thread> admit_threads_;
  bool admit_stopping_ = false;
  // The jobs, the tickets' jobs and the ticket counter. Lock order: mu_, then a Job's mu (Tops,
  // ~FlMembers); never a Job's mu then mu_ (Exchange releases it first). Under a Job's mu: the
  // pool's, link_mu_ shared and FlTopLink::Report (which only queues).
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Job>, std::less<>> jobs_;
  std::map<uint64_t, std::shared_ptr<Job>> by_ticket_;
  uint64_t next_ticket_ = 1;
};

}  // namespace shoal
