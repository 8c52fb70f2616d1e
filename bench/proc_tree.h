// The processes on this machine from /proc: each one's parent and CPU time, and a process's
// descendants (shoald's zygotes and instances, a client's children). For benches that account
// what a process tree spent or holds.
#pragma once

#include <dirent.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "shoal/common/file_io.h"

namespace shoal::bench {

struct ProcStat {
  pid_t ppid = 0;
  double cpu_ms = 0;  // utime + stime
};

// Every process now, from /proc/<pid>/stat (one that exits meanwhile is left out).
inline std::map<pid_t, ProcStat> ReadProcs() {
  std::map<pid_t, ProcStat> procs;
  const double tick_ms = 1e3 / static_cast<double>(sysconf(_SC_CLK_TCK));
  DIR* d = opendir("/proc");
  while (dirent* e = d != nullptr ? readdir(d) : nullptr) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    const std::string stat = ReadFileBytes("/proc/" + std::to_string(pid) + "/stat").value_or("");
    const auto paren = stat.rfind(')');  // the command may hold spaces and parentheses
    if (paren == std::string::npos) continue;
    // After ") ": state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    // utime stime (fields 3..15 of proc(5)).
    std::istringstream in(stat.substr(paren + 2));
    std::string state;
    long long ppid = 0, skip = 0, utime = 0, stime = 0;
    in >> state >> ppid;
    for (int i = 0; i < 9; ++i) in >> skip;
    in >> utime >> stime;
    if (in) procs[pid] = {static_cast<pid_t>(ppid), static_cast<double>(utime + stime) * tick_ms};
  }
  if (d != nullptr) closedir(d);
  return procs;
}

// `root` and every process below it in `procs`, root first.
inline std::vector<pid_t> Descendants(const std::map<pid_t, ProcStat>& procs, pid_t root) {
  std::vector<pid_t> out = {root};
  for (size_t i = 0; i < out.size(); ++i) {
    for (const auto& [pid, p] : procs) {
      if (p.ppid == out[i]) out.push_back(pid);
    }
  }
  return out;
}

}  // namespace shoal::bench
