// How shoal-client's "little is enough" attackers collude (attack.h, --attack lie). The
// attackers are real clients of the job (each its own join, token and connection through
// shoald); what they share besides is this board, in the process that simulates them all,
// standing in for the side channel colluding attackers have. Each attacker trains honestly
// from the global version of its task, deposits its trained model for that version and waits
// for the round's other attackers; when all have deposited, every one of them sends the same
// model, mean - z std of the deposits (LittleIsEnough). The paper's attackers estimate the
// honest updates' mean and spread this way, from their own honest updates only.
//
// The wait ends early when an attacker deposits for a newer version (the round has moved on)
// or after `wait`: those who met then collude among themselves (>= 2), one alone sends its
// honest model. An attacker arriving for a version already decided sends that version's model.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <vector>

namespace shoal::client {

class LieBoard {
 public:
  LieBoard(int attackers, double z, std::chrono::milliseconds wait);

  // Deposits `trained` (an attacker's honest model trained from global `version`), waits as
  // above and overwrites `trained` with the colluders' model. Returns how many attackers'
  // models it was computed from: >= 2 colluded, 1 alone (`trained` unchanged), 0 stopped.
  int Collude(uint64_t version, std::span<float> trained);

  // Wakes and ends every wait (Collude returns 0).
  void Stop();

  // Models deposited for `version` and not yet decided on (what a test waits for).
  int Waiting(uint64_t version);

 private:
  struct Round {
    std::vector<std::vector<float>> models;
    std::vector<float> result;  // set once decided
    int used = 0;               // models the result was computed from; 0 = undecided
    int inside = 0;             // attackers in Collude on this round (it is not erased then)
  };
  void Decide(Round& r);

  const int attackers_;
  const double z_;
  const std::chrono::milliseconds wait_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Round> rounds_;
  bool stop_ = false;
};

}  // namespace shoal::client
