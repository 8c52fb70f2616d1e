// The requests a gateway loop has between "body received" and "response written": queued for
// an instance, running in one, or (control routes) running on a control thread. One slab per
// loop; a request id is (generation << 32 | index), so a late answer for a slot that has been
// reused since is recognised and dropped.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace shoal {

class Connection;
struct FunctionRuntime;

struct Pending {
  Connection* conn = nullptr;  // null once abandoned (timeout, close): the late answer is dropped
  std::shared_ptr<FunctionRuntime> fn;  // null for a control call
  uint32_t gen = 0;
  uint32_t instance = 0;
  uint64_t buffer = 0;
  uint64_t length = 0;
  bool in_use = false;
  bool queued = false;
  bool control = false;  // a control route's call, answered by a control thread
  // An FL update waiting for its job's top on another node to admit it (GatewayLoop::
  // AdmitForTop): only its header has been read; no buffer, no instance yet.
  bool admitting = false;
  uint64_t fl_ticket = 0;  // an FL update admitted by the coordinator (0: none)
  float fl_weight = 0;
  // The partial sum named for it once a leaf was picked (0: not asked yet; ~0: none named).
  uint64_t fl_partial = 0;
  // An FL update whose body is still arriving (fl_update_ingest.h): its leaf (`instance`) is
  // picked and told of each part that lands; the buffer is still the connection's, and the
  // request goes to the leaf once the body is whole (GatewayLoop::FinishBodyStream).
  bool body_arriving = false;
};

class PendingSlab {
 public:
  explicit PendingSlab(size_t reserve = 1024) { slots_.reserve(reserve); }

  // A free slot, marked in use with a new generation.
  uint32_t Alloc() {
    uint32_t idx;
    if (!free_.empty()) {
      idx = free_.back();
      free_.pop_back();
    } else {
      idx = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back();
    }
    Pending& p = slots_[idx];
    p.in_use = true;
    ++p.gen;
    return idx;
  }

  void Free(uint32_t idx) {
    Pending& p = slots_[idx];
    p.fl_ticket = 0;
    p.fl_partial = 0;
    p.body_arriving = false;
    p.in_use = false;
    p.conn = nullptr;
    p.fn.reset();
    p.instance = 0;
    p.buffer = 0;
    p.queued = false;
    p.control = false;
    p.admitting = false;
    free_.push_back(idx);
  }

  uint64_t RequestId(uint32_t idx) const { return (uint64_t{slots_[idx].gen} << 32) | idx; }

  // The slot `request_id` names, or null when it is free or was reused since.
  Pending* Lookup(uint64_t request_id, uint32_t* idx) {
    *idx = static_cast<uint32_t>(request_id & 0xFFFFFFFFu);
    const auto gen = static_cast<uint32_t>(request_id >> 32);
    if (*idx >= slots_.size()) return nullptr;
    Pending& p = slots_[*idx];
    if (!p.in_use || p.gen != gen) return nullptr;
    return &p;
  }

  Pending& operator[](uint32_t idx) { return slots_[idx]; }
  uint32_t size() const { return static_cast<uint32_t>(slots_.size()); }
  size_t in_use() const { return slots_.size() - free_.size(); }

 private:
  std::vector<Pending> slots_;
  std::vector<uint32_t> free_;
};

}  // namespace shoal
