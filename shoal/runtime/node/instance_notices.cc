// The FL coordinator's commits, told to the serving instances that follow the job: a function
// whose handler names an FL job (SHOAL_INFER_FL_JOB: an inference function over an FL job, a
// language model following a job's LoRA adapter) learns of each version when it commits, from
// a kJobCommitted descriptor on its data-plane socket, instead of asking the gateway on a timer.
// The commit thread only queues the notice and wakes the manager's loop; the loop sends one
// descriptor per ready instance (no payload, no answer).
#include "shoal/runtime/node/instance_manager_internal.h"

namespace shoal {

void InstanceManager::JobCommitted(const std::string& job, uint64_t version) {
  {
    std::lock_guard lock(mu_);
    uint64_t& newest = commits_to_tell_[job];
    newest = std::max(newest, version);
  }
  if (started_) uv_async_send(&commit_notices_);
}

void InstanceManager::SendCommitNotices() {
  std::lock_guard lock(mu_);
  if (commits_to_tell_.empty()) return;
  for (auto& [name, f] : by_name_) {
    const auto& env = f->rt->spec.handler.env;
    const auto followed = env.find(kInferFlJobEnv);
    if (followed == env.end()) continue;
    const auto commit = commits_to_tell_.find(followed->second);
    if (commit == commits_to_tell_.end()) continue;
    for (const Instance* inst : f->instances) {
      if (inst->state != Instance::State::kReady) continue;
      EventDescriptor d{};
      d.target = inst->key;
      d.version = kDescriptorVersion;
      d.kind = static_cast<uint16_t>(EventKind::kJobCommitted);
      d.function_id = f->rt->spec.id;
      d.source = kManagerEndpoint;
      d.request_id = commit->second;
      d.timestamp_ns = MonotonicNs();
      // An instance that misses one (its socket full, or it is going) finds the version at its
      // next safety poll; nothing waits on the notice.
      if (Status st = manager_channel_->Send(d); !st.ok()) {
        spdlog::debug("function {}: commit notice to instance {:#x}: {}", name, inst->key,
                      st.ToString());
        continue;
      }
      ++commit_notices_sent_;
    }
  }
  commits_to_tell_.clear();
}

}  // namespace shoal
