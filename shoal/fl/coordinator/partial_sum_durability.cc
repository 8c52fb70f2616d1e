// FlCoordinator::JobState under spec.durability partialSums: an acknowledged update's buffer
// goes back to the pool once its leaf folded it, so a round's updates may add up to many times
// the pool; what makes the 202 good is the leaf's partial sum, checkpointed every
// checkpointEvery updates (partial_checkpoint.h) and whole before the round's commit. A restart
// loads the checkpoints; an acknowledged update that none includes is asked for again: its
// client is not counted in the round, so its next task says "train" from the same version, and
// the SDK and shoal-client send again.
#include <filesystem>
#include <set>

#include "shoal/fl/coordinator/job_state.h"

namespace shoal {
using namespace coordinator_internal;  // NOLINT(google-build-using-namespace): this library's own

void FlCoordinator::JobState::FoldedDurably(Ticket& t) {
  ReleaseBuffer(t.buffer, kCoordinatorSlot, "a folded update (durability partialSums)");
  t.buffer = 0;
  auto rit = rounds.find(t.round);
  if (rit == rounds.end()) return;
  auto pit = rit->second.partials.find(t.partial);
  if (pit == rit->second.partials.end()) return;
  ++pit->second.since_checkpoint;
  MaybeCheckpointPartial(t.round, t.partial);
}

void FlCoordinator::JobState::MaybeCheckpointPartial(uint64_t round_id, uint64_t key) {
  auto rit = rounds.find(round_id);
  if (rit == rounds.end() || !partial_writer) return;
  auto pit = rit->second.partials.find(key);
  if (pit == rit->second.partials.end()) return;
  Partial& p = pit->second;
  if (p.since_checkpoint < spec.durability.checkpoint_every || p.rebuild || p.offset == 0 ||
      !p.node.empty()) {
    return;
  }
  // Only while no leaf folds into it: otherwise the next acknowledgement tries again.
  for (const auto& [id, t] : tickets) {
    if (!t.acked && t.round == round_id && t.partial == key && t.node.empty() && t.instance != 0) {
      return;
    }
  }
  const PartialCheckpointHead h = CheckpointHead(round_id, key, p, tickets);
  const auto* sum = reinterpret_cast<const float*>(pool->Data(p.offset).data());
  if (Status st = partial_writer->Begin(dir, h, sum, [this] { ++partial_checkpoints; }); !st.ok()) {
    spdlog::error("fl job {}: partial-sum checkpoint of round {}: {}", spec.name, round_id,
                  st.ToString());
    return;
  }
  p.since_checkpoint = 0;
}

PartialCheckpointHead FlCoordinator::JobState::CheckpointHead(
    uint64_t round_id, uint64_t key, const Partial& p,
    const std::map<uint64_t, Ticket>& from) const {
  PartialCheckpointHead h;
  h.round = round_id;
  h.key = key;
  h.base = p.base;
  h.num_params = mspec.num_params();
  for (uint64_t tid : p.tickets) {
    auto it = from.find(tid);
    if (it != from.end()) h.seqs.push_back(it->second.seq);
  }
  return h;
}

FlCoordinator::JobState::Ticket FlCoordinator::JobState::LoggedTicket(const LogRecord& r,
                                                                      const std::string& client,
                                                                      uint64_t key) {
  Ticket t;
  t.round = r.round;
  t.client = client;
  t.buffer = r.buffer;
  t.base_version = r.base_version;
  t.num_samples = r.num_samples;
  t.coefficient = r.coefficient;
  t.instance = kRefoldedPartial;
  t.partial = key;
  t.acked = true;
  t.seq = r.seq;
  return t;
}

void FlCoordinator::JobState::CheckpointRoundPartials(uint64_t round_id, const Round& round,
                                                      const std::map<uint64_t, Ticket>& from) {
  if (partial_writer) partial_writer->Flush();  // an older checkpoint's rename comes first
  for (const auto& [key, p] : round.partials) {
    if (p.offset == 0 || !p.node.empty() || p.since_checkpoint == 0) continue;
    const PartialCheckpointHead h = CheckpointHead(round_id, key, p, from);
    const auto* sum = reinterpret_cast<const float*>(pool->Data(p.offset).data());
    if (Status st = WritePartialCheckpoint(dir, h, sum); !st.ok()) {
      // Its updates are still named by the log: a crash before the version's checkpoint asks
      // their clients again.
      spdlog::error("fl job {}: partial-sum checkpoint of round {} before its commit: {}",
                    spec.name, round_id, st.ToString());
      continue;
    }
    ++partial_checkpoints;
  }
}

Result<std::map<uint64_t, uint64_t>> FlCoordinator::JobState::LoadPartialCheckpoints(
    BufferPool& into) {
  std::map<uint64_t, uint64_t> round_of_seq;
  for (const LogRecord& r : recovered) round_of_seq[r.seq] = r.round;
  std::map<uint64_t, uint64_t> key_of_seq;
  const uint64_t n = mspec.num_params();
  for (const std::string& path : ListPartialCheckpoints(dir)) {
    auto head = ReadPartialCheckpoint(path, n, nullptr);
    bool current = head.ok() && !head->seqs.empty();
    for (uint64_t seq : current ? head->seqs : std::vector<uint64_t>{}) {
      auto it = round_of_seq.find(seq);
      current = current && it != round_of_seq.end() && it->second == head->round;
    }
    if (!current) {
      // A committed round's (its version's checkpoint is written), or not whole.
      if (!head.ok()) spdlog::warn("fl job {}: {}", spec.name, head.status().ToString());
      std::error_code ec;
      std::filesystem::remove(path, ec);
      continue;
    }
    auto off = ZeroedPartial(into, n * sizeof(float));
    if (!off.ok()) return off.status();
    auto* sum = reinterpret_cast<float*>(into.Data(*off).data());
    if (auto again = ReadPartialCheckpoint(path, n, sum); !again.ok()) {
      ReleaseOrLog(into, *off, kShoaldSlot, "an unreadable partial-sum checkpoint", "fl job {}",
                   spec.name);
      spdlog::error("fl job {}: {}", spec.name, again.status().ToString());
      continue;
    }
    Partial& p = rounds[head->round].partials[head->key];
    p.offset = *off;
    p.base = head->base;
    p.restored = true;
    for (uint64_t seq : head->seqs) key_of_seq[seq] = head->key;
    spdlog::info("fl job {}: round {}'s partial sum of {} update(s) loaded from {}", spec.name,
                 head->round, head->seqs.size(), path);
  }
  return key_of_seq;
}

void FlCoordinator::JobState::TakeCheckpointed(const LogRecord& r, const std::string& client,
                                               uint64_t key, uint64_t id) {
  Ticket t = LoggedTicket(r, client, key);
  t.buffer = 0;  // its bytes are in the loaded partial sum, not in the pool
  tickets[id] = t;
  Round& round = rounds[r.round];
  round.partials[key].tickets.push_back(id);
  ++round.admitted;
  ++round.acked;
  Client& c = clients[client];
  c.submitted_round = r.round;
  SetSamples(c, r.num_samples);
  c.last_base_version = r.base_version;
  ++c.updates;
  Changed(c);
  ++updates_total;
}

void FlCoordinator::JobState::AskToResend(const std::string& client, uint64_t round_id,
                                          uint64_t seq, const char* why) {
  ++resend_asked;
  auto cit = clients.find(client);
  if (cit != clients.end() && cit->second.submitted_round == round_id) {
    cit->second.submitted_round = UINT64_MAX;
  }
  spdlog::warn(
      "fl job {}: acknowledged update {} of client {} (round {}) is in no partial-sum "
      "checkpoint ({}): the client is asked to send it again",
      spec.name, seq, client, round_id, why);
}

bool FlCoordinator::JobState::ResendInsteadOfRebuild(uint64_t round_id, Round& round) {
  if (!PartialSums()) return false;
  bool any = false;
  const uint64_t n = mspec.num_params();
  for (auto& [key, p] : round.partials) {
    if (!p.rebuild || !p.node.empty()) continue;
    if (!any && partial_writer) partial_writer->Flush();
    any = true;
    if (p.offset == 0) {
      auto fresh = ZeroedPartial(*pool, n * sizeof(float));
      if (!fresh.ok()) {
        spdlog::error("fl job {}: {}", spec.name, fresh.status().ToString());
        continue;
      }
      p.offset = *fresh;
    }
    auto* acc = reinterpret_cast<float*>(pool->Data(p.offset).data());
    std::set<uint64_t> kept;
    if (auto h = ReadPartialCheckpoint(dir + "/" + PartialCheckpointFile(round_id, key), n, acc);
        h.ok()) {
      kept.insert(h->seqs.begin(), h->seqs.end());
    } else {
      std::fill(acc, acc + n, 0.0f);
    }
    std::vector<uint64_t> keep;
    for (uint64_t tid : p.tickets) {
      auto it = tickets.find(tid);
      if (it == tickets.end()) continue;
      if (kept.count(it->second.seq) != 0) {
        keep.push_back(tid);
        continue;
      }
      AskToResend(it->second.client, round_id, it->second.seq, "its partial sum was rebuilt");
      Client& c = clients[it->second.client];
      if (c.updates > 0) --c.updates;
      if (updates_total > 0) --updates_total;
      --round.acked;
      --round.admitted;
      tickets.erase(it);
    }
    p.tickets = std::move(keep);
    p.rebuild = false;
    p.since_checkpoint = 0;
    ++partial_rebuilds;
  }
  if (!any) return false;
  if (Sync() && round.admitted < Needed() && open_round == round_id + 1) {
    auto next = rounds.find(open_round);
    if (next == rounds.end() || next->second.admitted == 0) {
      if (next != rounds.end()) rounds.erase(next);
      round.closed = false;
      open_round = round_id;
    }
  }
  return true;
}

}  // namespace shoal
