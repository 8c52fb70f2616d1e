// The FL jobs the controller deployed (<prefix>/jobs/, cluster::FlJobRecord), as one node sees
// them: it runs as their top the jobs whose record names this node (a job moved here from a lost
// node resumes from the shared checkpoint store), stops a job whose record is gone (deleted) or
// names another node now (moved; its checkpoint stays), and publishes the small state of the jobs
// it tops (<prefix>/job-state/<name>) after their commits. Jobs deployed on this node's own
// control API have no record and are not touched.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "shoal/control/cluster/etcd_client.h"
#include "shoal/control/cluster/fl_job_record.h"
#include "shoal/control/cluster/node_record.h"
#include "shoal/control/cluster/prefix_mirror.h"
#include "shoal/fl/coordinator/fl_coordinator.h"

namespace shoal::cluster {

class ManagedFlJobs {
 public:
  // An FLJob manifest as this node validates it (the control API's parser).
  using ParseFn = std::function<Result<FlJobSpec>(const std::string& manifest)>;
  ManagedFlJobs(std::string node, FlCoordinator& fl, EtcdClient* etcd, ClusterKeys keys,
                ParseFn parse);
  ~ManagedFlJobs();
  // Reads the records (kUnavailable when etcd does not answer) and starts following them.
  Status Start();
  void Stop();
  // Whether `job` is the controller's (its take-over is the controller's decision, not the
  // nodes' own rule).
  bool Manages(const std::string& job) const;
  // From the coordinator's commit and status hooks (a commit, an evaluation): the job's state
  // is published at once (the loop wakes), not at its next periodic republish.
  void Committed(const std::string& job);

 private:
  void Loop();
  void Reconcile(const PrefixMirror::Snapshot& records);
  void Publish();
  const std::string node_;
  FlCoordinator& fl_;
  EtcdClient* etcd_;
  ClusterKeys keys_;
  ParseFn parse_;
  PrefixMirror mirror_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool changed_ = true;
  std::set<std::string> managed_;  // every job with a record now
  std::set<std::string> dirty_;    // committed since the last publish
  std::thread thread_;
  // Loop's own: the generation of each job it runs here, and what it published last.
  std::map<std::string, uint64_t> running_;
  std::map<std::string, std::string> published_;
};

}  // namespace shoal::cluster
