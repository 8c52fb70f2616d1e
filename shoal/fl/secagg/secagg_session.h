// A job's SecAgg+ protocol (Bell et al., CCS 2020) on the server: the rounds' stages (advertise
// keys, share keys, masked input, unmask), what each client may send in each, and the
// unmasking of the round's sum at commit. The server routes the clients' encrypted key shares
// and never holds a key that opens them; it learns a client's secrets only as SecAgg+ allows:
// the self-mask seed of a survivor, the mask key of a client that dropped after sharing, each
// from `threshold` of that client's neighbours, and checked against what the client advertised.
//
// The coordinator owns the session (one per job with spec.privacy.secureAggregation), calls it
// under the job's lock, and asks it (MayInput, InputsComplete, UnmaskReady, Unmask) where its
// round logic needs a decision; HTTP lives in the control API. Protocol rounds have their own
// ids (a round that fails before the input stage is retried under a new id for the same model
// version); each names the coordinator round its masked inputs go to.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/fl/secagg/crypto.h"
#include "shoal/fl/secagg/masking.h"
#include "shoal/fl/secagg/shamir.h"

namespace shoal::aggregator {
class WorkerTeam;
}

namespace shoal::secagg {

struct SecAggConfig {
  uint32_t threshold = 0;   // shares that reconstruct a client's secret; also the fewest survivors
  uint32_t neighbours = 0;  // the graph's degree k (even)
  double clip_range = 1.0;
  uint32_t bits = 16;
  // A stage closes when every client has answered, or once no client has for this long (each
  // accepted message restarts the clock: a stage is not cut while its clients are talking).
  double stage_timeout_s = 30;
  uint32_t clients = 0;  // the clients a round waits for (spec.clients)
};

// kInvalidArgument naming the field (secureAggregation.<field>) when the combination is wrong.
Status ValidateConfig(const SecAggConfig& c);

enum class Stage : uint8_t { kAdvertise, kShare, kInput, kUnmask, kDone, kFailed };
const char* StageName(Stage s);

class SecAggSession {
 public:
  static constexpr size_t kSeedBytes = 16;  // a self-mask seed
  static constexpr size_t kKeyBytes = 32;   // an X25519 secret key

  using Json = nlohmann::json;
  explicit SecAggSession(SecAggConfig config);

  const SecAggConfig& config() const { return config_; }

  // The client steps (the caller has authenticated `client`); `now` is the job's clock in
  // seconds, `open_round` the coordinator's open round. Errors name the field.
  Result<Json> Advertise(const std::string& client, uint64_t open_round, const Json& body,
                         double now);
  Result<Json> ShareKeys(const std::string& client, const Json& body, double now);
  // `*complete`: every survivor has answered (the commit may run).
  Result<Json> UnmaskShares(const std::string& client, const Json& body, double now,
                            bool* complete);
  // What `client` needs of protocol round `round` now (0: the latest): its stage and, from the
  // share stage on, the graph, its neighbours' keys, the shares addressed to it, the
  // survivors and dropouts.
  Result<Json> State(const std::string& client, uint64_t round) const;

  // ---- the coordinator's hooks ----
  // A masked input of `client` for coordinator round `coord_round` may be admitted.
  // (It restarts the input stage's clock.)
  Status MayInput(const std::string& client, uint64_t coord_round, double now);
  // The coordinator round holds as many admitted inputs as the protocol round expects.
  bool InputsComplete(uint64_t coord_round, uint32_t admitted) const;
  struct TimerResult {
    bool close_input = false;  // the input stage of coord_round timed out: close that round
    uint64_t coord_round = 0;
    bool commit_due = false;  // the unmask stage closed (timed out)
  };
  TimerResult OnTimer(double now);
  // The coordinator round's inputs have all answered; `inputs`: the clients whose masked input
  // was folded. Opens the unmask stage (once); true once it has closed (every survivor answered
  // or it timed out): the round may commit.
  bool UnmaskReady(uint64_t coord_round, const std::vector<std::string>& inputs, double now);
  // Nothing arrived for the coordinator round's inputs: its protocol round fails with `why`.
  void Fail(uint64_t coord_round, const std::string& why);
  // At commit, in three steps so that the heavy one holds no lock. PlanUnmask (under the job's
  // lock): the masks to remove from the round's sum, from the reconstructed secrets: each
  // survivor's self mask, and each dropout's pairwise masks with its surviving neighbours; the
  // reason (and the round failed) when the sum cannot be unmasked: fewer than threshold
  // survivors, or a secret with fewer than threshold shares. ApplyUnmask (no lock): `sum` (the
  // u32 sum of the round's masked inputs) unmasked in place, its SHA-256, and decoded into `out`
  // (the survivors' summed values). Finish (under the lock): the round done, or failed.
  struct UnmaskPlan {
    uint64_t round = 0;  // the protocol round
    std::vector<SignedSeed> seeds;
    uint64_t survivors = 0, dropped = 0;
    Quantizer quantizer;
  };
  Result<UnmaskPlan> PlanUnmask(uint64_t coord_round);
  static Status ApplyUnmask(const UnmaskPlan& plan, std::span<uint32_t> sum, std::span<float> out,
                            aggregator::WorkerTeam* team, std::string* sum_sha256);
  void Finish(const UnmaskPlan& plan, const Status& result, const std::string& sum_sha256);
  // The three at once (tests); `*count`: the survivors.
  Status Unmask(uint64_t coord_round, std::span<uint32_t> sum, std::span<float> out,
                uint64_t* count, aggregator::WorkerTeam* team);

  // spec.privacy.secureAggregation and its latest rounds, for the job's status.
  Json StatusJson() const;

 private:
  struct Participant {
    std::string id;
    Key32 c_pk{}, s_pk{};
    std::array<uint8_t, 32> b_commit{};
    bool shared = false;                     // U2
    std::map<uint32_t, std::string> sealed;  // recipient index -> its share, sealed (base64)
    bool input = false;                      // U3
    bool answered = false;                   // sent its unmask shares
  };
  struct Round {
    uint64_t id = 0;
    uint64_t coord_round = 0;
    Stage stage = Stage::kAdvertise;
    double stage_since = 0;
    uint64_t graph_seed = 0;
    std::vector<Participant> parts;  // sorted by client order once advertisement closes
    std::map<std::string, uint32_t> index;
    std::vector<std::vector<uint32_t>> graph;
    std::map<uint32_t, std::vector<Share>> b_shares, sk_shares;  // by owner index
    std::map<uint32_t, Seed> b_seed;
    std::map<uint32_t, Key32> sk;
    std::string failure;
    std::string sum_sha256;
    uint32_t survivors = 0, dropped = 0;
  };

  Round* Current();
  const Round* Find(uint64_t id) const;
  Round* ForCoord(uint64_t coord_round, Stage stage);
  void CloseAdvertise(Round& r, double now);
  void CloseShare(Round& r, double now);
  void FailRound(Round& r, const std::string& why);
  bool IsNeighbour(const Round& r, uint32_t a, uint32_t b) const;
  Status CheckRound(const Round& r, const Json& body) const;

  SecAggConfig config_;
  std::deque<Round> rounds_;  // the latest few, oldest first
  uint64_t next_id_ = 1;
  std::set<std::string> seen_keys_;  // every public key advertised in this job (replays)
};

}  // namespace shoal::secagg
