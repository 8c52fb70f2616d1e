#include "shoal/runtime/node/function_router.h"

#include <algorithm>

#include "shoal/common/clock.h"

namespace shoal {

void FunctionRouter::Account(int delta, uint64_t now) {
  if (last_change_ns_ != 0 && now > last_change_ns_) {
    totals_.busy_s += static_cast<double>(inflight_total_) * double(now - last_change_ns_) / 1e9;
  }
  last_change_ns_ = now;
  inflight_total_ = static_cast<uint32_t>(std::max<int64_t>(0, int64_t(inflight_total_) + delta));
}

void FunctionRouter::Dequeued(const Waiter& w, uint64_t now) {
  ++totals_.dequeued;
  if (now > w.enqueued_ns) totals_.queue_wait_s += double(now - w.enqueued_ns) / 1e9;
}

FunctionRouter::Totals FunctionRouter::totals() const {
  std::lock_guard lock(mu_);
  Totals t = totals_;
  const uint64_t now = MonotonicNs();
  if (last_change_ns_ != 0 && now > last_change_ns_) {
    t.busy_s += static_cast<double>(inflight_total_) * double(now - last_change_ns_) / 1e9;
  }
  return t;
}

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

FunctionRouter::AcquireResult FunctionRouter::Acquire(uint32_t loop, uint64_t request_id,
                                                      bool may_queue) {
  std::lock_guard lock(mu_);
  Slot* best = nullptr;
  if (waiters_.empty()) {  // never overtake a waiting request
    for (auto& s : slots_) {
      if (s.draining || s.inflight >= s.capacity) continue;
      if (best == nullptr || s.inflight < best->inflight) best = &s;
    }
  }
  if (best != nullptr) {
    ++totals_.arrivals;
    Account(+1, MonotonicNs());
    ++best->inflight;
    return {Outcome::kAssigned, best->instance};
  }
  if (!may_queue || waiters_.size() >= max_queue_) return {Outcome::kRejected, 0};
  ++totals_.arrivals;
  waiters_.push_back({loop, request_id, MonotonicNs()});
  return {Outcome::kQueued, 0};
}

std::optional<RouteAssignment> FunctionRouter::Release(uint32_t instance) {
  std::lock_guard lock(mu_);
  Slot* s = Find(instance);
  if (s == nullptr) return std::nullopt;  // removed meanwhile
  const uint64_t now = MonotonicNs();
  ++totals_.completions;
  if (s->inflight > 0) {
    Account(-1, now);
    --s->inflight;
  }
  ++s->served;
  if (s->draining || waiters_.empty()) return std::nullopt;
  Waiter w = waiters_.front();
  waiters_.pop_front();
  Dequeued(w, now);
  Account(+1, now);
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
  const uint64_t now = MonotonicNs();
  while (!waiters_.empty() && s->inflight < s->capacity) {
    Waiter w = waiters_.front();
    waiters_.pop_front();
    Dequeued(w, now);
    Account(+1, now);
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
  if (inflight > 0) Account(-static_cast<int>(inflight), MonotonicNs());
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
