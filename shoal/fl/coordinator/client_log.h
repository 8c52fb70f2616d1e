// A job's client table on disk (<dir>/clients.log) and the order of its clients.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "shoal/common/status.h"

namespace shoal::coordinator_internal {

// The clients' order in a job's table: by number ("c2" before "c10": the order they joined),
// any other id after the numbered ones of its length, as strings. The status lists a page of
// them from a client number on (lower_bound, not a walk from the first).
struct ClientOrder {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  }
};

// A job's client table on disk, <dir>/clients.log: one JSON line per join ({"join": id, "name",
// "token"}), appended before the client has its token, and one per client whose figures changed
// ({"client": id, "version": v, "updates", ...}), appended when the job's state is persisted
// (FlCoordinator::Persist: each commit and evaluation), tagged with the version in memory then.
// Restore applies each client's latest figures tagged at or below the version state.json names
// (a later tag is a version whose checkpoint was never written: the update log re-folds its
// updates). A join or a changed client appends one line, never the table: a join costs the same
// at 10 clients and at 10,000 (state.json, which held every client and was rewritten on each
// join, holds none). The file is compacted (each client's join and its latest figures that
// restore could need) once the lines superseded since the last compaction outnumber the clients.
// As the update log: a write() that returned is in the page cache and survives the process
// (kill -9); no fsync on the join path.
class ClientLog {
 public:
  ClientLog() = default;
  ClientLog(const ClientLog&) = delete;
  ClientLog& operator=(const ClientLog&) = delete;
  ~ClientLog();
  static std::string Path(const std::string& dir) { return dir + "/clients.log"; }
  Status Open(const std::string& dir);
  // Appends whole lines (each ends in '\n') in one write.
  Status Append(std::string_view lines);
  // Replaces the file with `lines` and reopens it.
  Status Rewrite(const std::string& dir, const std::string& lines);
  // Figure lines appended since the last compaction (each supersedes its client's earlier one).
  void CountFigureLines(uint64_t n) { figure_lines_ += n; }
  uint64_t figure_lines() const { return figure_lines_; }

 private:
  int fd_ = -1;
  uint64_t figure_lines_ = 0;
};

}  // namespace shoal::coordinator_internal
