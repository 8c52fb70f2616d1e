#include "shoal/tools/flsim/lie_board.h"

#include <algorithm>
#include <iterator>

#include "shoal/tools/flsim/attack.h"

namespace shoal::client {

namespace {
constexpr uint64_t kRoundsKept = 8;  // decided rounds kept for late attackers
}  // namespace

LieBoard::LieBoard(int attackers, double z, std::chrono::milliseconds wait)
    : attackers_(attackers), z_(z), wait_(wait) {}

void LieBoard::Decide(Round& r) {
  r.used = static_cast<int>(r.models.size());
  r.result = r.models.front();
  if (r.models.size() >= 2) {
    std::vector<std::span<const float>> views(r.models.begin(), r.models.end());
    LittleIsEnough(views, z_, r.result);
  }
  r.models.clear();
  r.models.shrink_to_fit();
}

int LieBoard::Collude(uint64_t version, std::span<float> trained) {
  std::unique_lock lock(mu_);
  if (stop_) return 0;
  Round& r = rounds_[version];
  ++r.inside;
  if (r.used == 0) {
    r.models.emplace_back(trained.begin(), trained.end());
    if (static_cast<int>(r.models.size()) >= attackers_) {
      Decide(r);
    } else {
      cv_.notify_all();  // waiters of older versions: the round has moved on
      cv_.wait_for(lock, wait_,
                   [&] { return stop_ || r.used > 0 || rounds_.rbegin()->first > version; });
      if (!stop_ && r.used == 0) Decide(r);
    }
    cv_.notify_all();
  }
  const int used = stop_ ? 0 : r.used;
  if (used >= 2) std::copy(r.result.begin(), r.result.end(), trained.begin());
  --r.inside;
  // Decided rounds more than kRoundsKept versions old, that nobody is inside, are dropped.
  const uint64_t newest = rounds_.rbegin()->first;
  for (auto it = rounds_.begin(); it != rounds_.end() && it->first + kRoundsKept < newest;) {
    it = it->second.used > 0 && it->second.inside == 0 ? rounds_.erase(it) : std::next(it);
  }
  return used;
}

int LieBoard::Waiting(uint64_t version) {
  std::lock_guard lock(mu_);
  const auto it = rounds_.find(version);
  return it == rounds_.end() ? 0 : static_cast<int>(it->second.models.size());
}

void LieBoard::Stop() {
  std::lock_guard lock(mu_);
  stop_ = true;
  cv_.notify_all();
}

}  // namespace shoal::client
