// A local copy of every key under one etcd prefix, kept current by a watch: read whole at
// Start, then changed event by event (re-read whole after a compaction). `on_change` runs on
// the watch's thread after each change with the keys as they are now.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "shoal/control/cluster/etcd_client.h"

namespace shoal::cluster {

class PrefixMirror {
 public:
  using Snapshot = std::map<std::string, std::string>;  // key (without the prefix) -> value
  using ChangeFn = std::function<void(const Snapshot& now)>;
  PrefixMirror(EtcdClient* etcd, std::string prefix, ChangeFn on_change);
  ~PrefixMirror();
  PrefixMirror(const PrefixMirror&) = delete;
  PrefixMirror& operator=(const PrefixMirror&) = delete;

  // kUnavailable when etcd does not answer (the caller retries).
  Status Start();
  bool started() const;
  Snapshot Get() const;

 private:
  void Apply(const std::vector<WatchEvent>& events, bool whole);
  void Resync();
  EtcdClient* etcd_;
  std::string prefix_;
  ChangeFn on_change_;
  mutable std::mutex mu_;
  Snapshot keys_;
  std::unique_ptr<EtcdWatch> watch_;
};

}  // namespace shoal::cluster
