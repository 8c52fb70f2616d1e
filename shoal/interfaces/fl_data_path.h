// The FL update path as the gateway sees it: an update body lands in the job's pool, the FL
// coordinator admits it (client, token, base version) and names the partial sum it is folded
// into, a leaf aggregator instance folds it in place, and the coordinator counts it when the
// leaf answers. Implemented by the coordinator (shoal/fl/coordinator).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "shoal/common/buffer_pool.h"
#include "shoal/common/status.h"

namespace shoal {

// The holder slot the coordinator holds update buffers with until the version that includes
// them is committed (instances use slots 1..62).
inline constexpr HolderSlot kCoordinatorSlot = 63;

struct FlAdmission {
  uint64_t ticket = 0;
  float coefficient = 0;  // the update's weight in the partial sum
};

class FlDataPath {
 public:
  virtual ~FlDataPath() = default;
  // The internal function whose instances are the job's leaf aggregators.
  virtual std::string LeafFunction(std::string_view job) = 0;
  // Checks the update's header (job, client, token, base version) and takes a hold on its
  // buffer. An error is the client's (4xx) and nothing is kept.
  virtual Result<FlAdmission> Admit(std::string_view job, BufferPool& pool,
                                    std::span<const std::byte> body, uint64_t buffer) = 0;
  // The partial-sum buffer (pool offset) the leaf `instance` folds the ticket's update into.
  virtual Result<uint64_t> PartialFor(uint64_t ticket, uint32_t instance) = 0;
  // The leaf answered (2xx: folded and counted) or the update failed (any other status). 502:
  // the partial sum may hold part of the update, and is rebuilt from the acknowledged updates
  // before it is committed: either the leaf died (the gateway's 502, `leaf_answered` false) or
  // the leaf's device (GPU) fold failed (the leaf's own 502, `leaf_answered` true; it folds on
  // the CPU from then on, fl_leaf_handler.h).
  virtual void Completed(uint64_t ticket, int http_status, bool leaf_answered) = 0;
  // The leaf refused the ticket's update (4xx) after folding part of it into its partial sum
  // (the CPU leaf checks and folds an update in one pass, block by block: a NaN past the first
  // block is found after earlier blocks went in). Called just before Completed, whose status
  // (what the client gets) it does not change: the partial sum is rebuilt from the
  // acknowledged updates before it is committed, as after a 502.
  virtual void PartialChanged(uint64_t ticket) { (void)ticket; }

  // Cluster mode (LIFL's hierarchy across nodes): this node folds the job's updates in its own
  // pool and leaves, but the job's top (its tokens, rounds, scheduler and model) is on another
  // node. The gateway then leaves the update's authentication to the top (the bearer token
  // travels with the small admit request, AdmitForTop) and forwards the job's other routes.
  virtual bool FoldsForOtherNode(std::string_view /*job*/) { return false; }
  // Admit for such a job: the top decides (a small admit exchange carrying the update's header,
  // never its tensors) and the update is folded here. Errors as Admit's.
  virtual Result<FlAdmission> AdmitForTop(std::string_view job, BufferPool& pool,
                                          std::span<const std::byte> body, uint64_t buffer,
                                          std::string_view bearer) {
    (void)bearer;
    return Admit(job, pool, body, buffer);
  }
  // AdmitForTop without waiting for the top (the gateway's loop goes on serving meanwhile):
  // `done` gets what AdmitForTop would return, exactly once, on another thread once the top
  // answered, or before this returns when the answer is known here. The caller keeps `buffer`
  // (and `body` in it) untouched until `done` ran.
  //
  // The gateway calls it before it reads the update's tensors: `body` is then the update's
  // prefix and header only (in the gateway's memory) and `buffer` 0, so that an update the top
  // refuses never takes pool memory; once admitted, the gateway reads the body into a buffer of
  // `pool` and hands it over with HoldUpdate before the update goes to a leaf.
  using AdmitDone = std::function<void(Result<FlAdmission>)>;
  virtual void AdmitForTopAsync(std::string_view job, BufferPool& pool,
                                std::span<const std::byte> body, uint64_t buffer,
                                std::string_view bearer, AdmitDone done) {
    done(AdmitForTop(job, pool, body, buffer, bearer));
  }
  // The buffer (of `pool`) of an update admitted without one (above): held with
  // kCoordinatorSlot from here on. An error: the ticket is unknown (the job left meanwhile).
  virtual Status HoldUpdate(uint64_t ticket, BufferPool& pool, uint64_t buffer) {
    (void)ticket;
    return pool.Retain(buffer, kCoordinatorSlot);
  }
};

}  // namespace shoal
