// A job's update log (<dir>/updates.log): one LogRecord per acknowledged update, the record a
// ticket makes, and the file's appends and compactions. Shared by the coordinator's jobs and
// FlMembers' (cluster members fold updates for another node's job).
#pragma once

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

#include "shoal/common/status.h"

namespace shoal::coordinator_internal {

// One admitted-and-acknowledged update, as the job's update log keeps it: enough to find its
// bytes in the pool again and to count it exactly once after a restart.
struct LogRecord {
  static constexpr uint32_t kMagic = 0x4c554853;  // "SHUL"
  uint32_t magic = kMagic;
  uint32_t reserved = 0;
  uint64_t seq = 0;
  uint64_t round = 0;
  uint64_t buffer = 0;  // pool offset of the update (held with kCoordinatorSlot)
  uint64_t base_version = 0;
  uint64_t num_samples = 0;
  double coefficient = 0;
  char client[40] = {};
};
static_assert(sizeof(LogRecord) == 96);

// The log record of a ticket (the coordinator's and FlMembers' tickets carry the same fields).
template <class Ticket>
LogRecord RecordOf(const Ticket& t) {
  LogRecord r;
  r.seq = t.seq;
  r.round = t.round;
  r.buffer = t.buffer;
  r.base_version = t.base_version;
  r.num_samples = t.num_samples;
  r.coefficient = t.coefficient;
  std::strncpy(r.client, t.client.c_str(), sizeof r.client - 1);
  return r;
}

// The records of the acknowledged tickets of `tickets` (a map by ticket id), appended to `bytes`.
template <class Tickets>
void AppendAckedRecords(const Tickets& tickets, std::string& bytes) {
  for (const auto& [id, t] : tickets) {
    if (!t.acked) continue;
    const LogRecord r = RecordOf(t);
    bytes.append(reinterpret_cast<const char*>(&r), sizeof r);
  }
}

// A job's update log, <dir>/updates.log: one LogRecord per acknowledged update, appended before
// the client's 202. A write() that returned is in the page cache and survives the process
// (kill -9); a power cut is a different failure (no fsync on the hot path).
//
// Its own lock (taken after the job's, never before) guards the file descriptor: a gateway
// loop appends under it, and a compaction holds it only to append the records that came in
// meanwhile and to rename the new log into place, never while it writes and syncs the new log:
// BeginRewrite (under the job's lock, where the records to keep are taken) starts keeping each
// appended record aside too; FinishRewrite (no job lock) writes and syncs the kept records,
// then, under the log's lock, adds the ones set aside, renames and reopens. One compaction at a
// time: the checkpoint writer's thread, or a restore before the gateway starts.
class UpdateLog {
 public:
  UpdateLog() = default;
  UpdateLog(const UpdateLog&) = delete;
  UpdateLog& operator=(const UpdateLog&) = delete;
  ~UpdateLog();

  // Opens <dir>/updates.log for appending (again, where it was open).
  Status Open(const std::string& dir);
  Status Append(const LogRecord& r);
  void BeginRewrite();
  // Replaces the log with `bytes` (whole records) and the records appended since BeginRewrite,
  // and reopens it; failures are logged for job `job`, and the old log, whole, stays. Until the
  // log opens again (the next compaction), each acknowledged update's append fails and is
  // logged on its own: those updates are not in the log for crash recovery.
  void FinishRewrite(const std::string& job, const std::string& dir, const std::string& bytes);
  void Rewrite(const std::string& job, const std::string& dir, const std::string& bytes) {
    BeginRewrite();
    FinishRewrite(job, dir, bytes);
  }

 private:
  Status OpenLocked(const std::string& dir);
  std::mutex mu_;
  int fd_ = -1;
  bool compacting_ = false;
  std::string tail_;  // records appended since BeginRewrite
};

}  // namespace shoal::coordinator_internal
