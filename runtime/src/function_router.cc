#include "shoal/runtime/function_router.h"

#include <algorithm>

namespace shoal {

FunctionRouter::Slot* FunctionRouter::Find(uint32_t instance) {
  for (auto& s : slots_) {
    if (s.instance == instance) return &s;
  }
  return nullptr;
}

const FunctionRouter::Slot* FunctionRouter::Find(uint32_t instance) const {
  for (const auto& s : slots_) {
    if (s.instance == instance) return &s;
  }
  return nullptr;
}

FunctionRouter::AcquireResult FunctionRouter::Acquire(uint32_t loop, uint64_t request_id) {
  std::lock_guard lock(mu_);
  Slot* best = nullptr;
  if (waiters_.empty()) {  // never overtake a waiting request
    for (auto& s : slots_) {
      if (s.draining || s.inflight >= s.capacity) continue;
      if (best == nullptr || s.inflight < best->inflight) best = &s;
    }
  }
  if (best != nullptr) {
    ++best->inflight;
    return {Outcome::kAssigned, best->instance};
  }
  if (waiters_.size() >= max_queue_) return {Outcome::kRejected, 0};
  waiters_.push_back({loop, request_id});
  return {Outcome::kQueued, 0};
}

std::optional<RouteAssignment> FunctionRouter::Release(uint32_t instance) {
  std::lock_guard lock(mu_);
  Slot* s = Find(instance);
  if (s == nullptr) return std::nullopt;  // removed meanwhile
  if (s->inflight > 0) --s->inflight;
  ++s->served;
  if (s->draining || waiters_.empty()) return std::nullopt;
  Waiter w = waiters_.front();
  waiters_.pop_front();
  ++s->inflight;
  return RouteAssignment{w.loop, w.request_id, instance};
}

bool FunctionRouter::CancelWaiter(uint32_t loop, uint64_t request_id) {
  std::lock_guard lock(mu_);
  auto it = std::find_if(waiters_.begin(), waiters_.end(), [&](const Waiter& w) {
    return w.loop == loop && w.request_id == request_id;
  });
  if (it == waiters_.end()) return false;
  waiters_.erase(it);
  return true;
}

std::vector<RouteAssignment> FunctionRouter::AddInstance(uint32_t instance, uint32_t capacity) {
  std::lock_guard lock(mu_);
  Slot* s = Find(instance);
  if (s == nullptr) {
    slots_.push_back({instance, capacity, 0, false, 0});
    s = &slots_.back();
  }
  std::vector<RouteAssignment> out;
  while (!waiters_.empty() && s->inflight < s->capacity) {
    Waiter w = waiters_.front();
    waiters_.pop_front();
    ++s->inflight;
    out.push_back({w.loop, w.request_id, instance});
  }
  return out;
}

std::vector<RouteAssignment> FunctionRouter::TakeWaiters() {
  std::lock_guard lock(mu_);
  std::vector<RouteAssignment> out;
  for (const Waiter& w : waiters_) out.push_back({w.loop, w.request_id, 0});
  waiters_.clear();
  return out;
}

void FunctionRouter::Drain(uint32_t instance) {
  std::lock_guard lock(mu_);
  if (Slot* s = Find(instance)) s->draining = true;
}

uint32_t FunctionRouter::RemoveInstance(uint32_t instance) {
  std::lock_guard lock(mu_);
  auto it = std::find_if(slots_.begin(), slots_.end(),
                         [&](const Slot& s) { return s.instance == instance; });
  if (it == slots_.end()) return 0;
  const uint32_t inflight = it->inflight;
  slots_.erase(it);
  return inflight;
}

FunctionRouter::Snapshot FunctionRouter::Counts() const {
  std::lock_guard lock(mu_);
  Snapshot snap;
  for (const auto& s : slots_) {
    snap.inflight += s.inflight;
    if (s.draining) {
      ++snap.draining;
    } else {
      ++snap.ready;
      snap.capacity += s.capacity;
    }
  }
  snap.queued = static_cast<uint32_t>(waiters_.size());
  return snap;
}

uint32_t FunctionRouter::Inflight(uint32_t instance) const {
  std::lock_guard lock(mu_);
  const Slot* s = Find(instance);
  return s ? s->inflight : 0;
}

std::vector<FunctionRouter::InstanceLoad> FunctionRouter::Loads() const {
  std::lock_guard lock(mu_);
  std::vector<InstanceLoad> out;
  out.reserve(slots_.size());
  for (const auto& s : slots_) out.push_back({s.instance, s.inflight, s.served, s.draining});
  return out;
}

std::vector<uint32_t> FunctionRouter::IdleDraining() const {
  std::lock_guard lock(mu_);
  std::vector<uint32_t> out;
  for (const auto& s : slots_) {
    if (s.draining && s.inflight == 0) out.push_back(s.instance);
  }
  return out;
}

}  // namespace shoal
