// FlCoordinator::JobState and its update log: what a durable version releases, what a
// compaction keeps, and the logged updates re-folded from the pool.
#include "shoal/fl/coordinator/job_state.h"
#include "shoal/fl/lora/lora_fold.h"

namespace shoal {
using namespace coordinator_internal;  // NOLINT(google-build-using-namespace): this library's own

bool FlCoordinator::JobState::Durable(uint64_t version, std::string* log_bytes) {
  bool released = false;
  while (!undurable.empty() && undurable.front().version <= version) {
    for (uint64_t b : undurable.front().buffers) {
      ReleaseBuffer(b, kCoordinatorSlot, "a durable version's update");
    }
    undurable.pop_front();
    released = true;
  }
  if (!released) return false;
  *log_bytes = LogBytes();
  log.BeginRewrite();
  return true;
}

std::vector<uint64_t> FlCoordinator::JobState::UndurableSeqs() const {
  std::vector<uint64_t> seqs;
  for (const Undurable& u : undurable) {
    for (const LogRecord& r : u.records) seqs.push_back(r.seq);
  }
  return seqs;
}

std::string FlCoordinator::JobState::LogBytes() const {
  std::string bytes;
  for (const Undurable& u : undurable) {
    bytes.append(reinterpret_cast<const char*>(u.records.data()),
                 u.records.size() * sizeof(LogRecord));
  }
  AppendAckedRecords(tickets, bytes);
  return bytes;
}

size_t FlCoordinator::JobState::Refold(float* acc, const std::vector<uint64_t>& ids,
                                       const std::map<uint64_t, Ticket>& from) const {
  size_t n = 0;
  for (uint64_t tid : ids) {
    auto it = from.find(tid);
    if (it == from.end()) continue;
    const Ticket& t = it->second;
    if (t.buffer == 0) {
      // durability partialSums: released once folded (ResendInsteadOfRebuild handles these).
      spdlog::error("fl job {}: update {} of client {} is not in the pool to refold", spec.name,
                    t.seq, t.client);
      continue;
    }
    PayloadView pv = ReadPayload(pool->Data(t.buffer));
    auto view = model::ParseUpdate(pv.body, mspec, RefoldLimits());
    if (!view.ok()) {
      spdlog::error("fl job {}: update {} of client {} no longer parses: {}", spec.name, t.seq,
                    t.client, view.status().ToString());
      continue;
    }
    lora::FoldUpdate(acc, mspec, *view, static_cast<float>(t.coefficient));
    ++n;
  }
  return n;
}

}  // namespace shoal
