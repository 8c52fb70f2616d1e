// FedCompass's computing-power-aware scheduler (Li et al., ICLR 2024; FL-ALGORITHMS.md): it
// estimates each client's time per local step and gives each client a number of local steps so
// that groups of clients arrive together. It only decides; the coordinator folds, commits and
// answers clients. Time is passed in (seconds on the coordinator's clock), never read, so every
// decision is deterministic.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/fl/algorithms/algorithms.h"

namespace shoal::aggregator {

using ClientId = uint64_t;
using GroupId = uint64_t;

// Train `local_steps` steps from the model the client is answered with, as a member of `group`.
struct CompassAssignment {
  ClientId client = 0;
  uint32_t local_steps = 0;
  GroupId group = 0;
  bool operator==(const CompassAssignment&) const = default;
};

// One buffered update, named by its client and the arrival's sequence number (OnArrival's
// update_id), so the coordinator can find what it folded.
struct CompassUpdateRef {
  ClientId client = 0;
  uint64_t update_id = 0;
  bool operator==(const CompassUpdateRef&) const = default;
};

enum class CompassAction {
  // The client's first arrival: commit its update alone (α_t = α s(u)/N), then answer it with
  // the new model and assignments[0].
  kApplyAlone,
  // Folded into `group`'s sum; the client waits for the group's aggregation.
  kBufferedInGroup,
  // Arrived after its group's T_l (or its group was already aggregated): folded into the
  // general buffer; answer the client now with the current model and assignments[0].
  kBufferedGeneral,
  // `group` is complete: commit group_updates + general_updates together (version + 1), then
  // answer each client in assignments (fastest first) with the new model and its steps.
  kAggregateGroup,
};

struct CompassDecision {
  CompassAction action = CompassAction::kApplyAlone;
  GroupId group = 0;       // kBufferedInGroup, kAggregateGroup
  uint64_t update_id = 0;  // OnArrival: the arriving update's id (arrivals numbered from 0)
  std::vector<CompassUpdateRef> group_updates;    // kAggregateGroup
  std::vector<CompassUpdateRef> general_updates;  // kAggregateGroup: the drained general buffer
  std::vector<CompassAssignment> assignments;
};

class FedCompassScheduler {
 public:
  // params must be valid (FedCompassParams::Validate).
  explicit FedCompassScheduler(const FedCompassParams& params) : p_(params) {}

  // The first client fetched the initial model: every client's clock starts here, with Q_max
  // steps. Later calls are ignored.
  void Start(double now);

  // Client `client` returned an update at `now`. update_id numbers arrivals from 0. Errors:
  // not started, time going backwards, or a client that already waits in a group.
  Result<CompassDecision> OnArrival(ClientId client, double now);

  // The earliest pending T_l timer, if any group is open.
  std::optional<double> NextTimer() const;
  // Fires every timer with T_l ≤ now, earliest first: a group with arrived members is aggregated
  // (with the general buffer); a group with none is closed and its members will arrive late.
  std::vector<CompassDecision> OnTimer(double now);

  // The whole state (start, clients' speeds and assignments, open groups, general buffer) as
  // JSON text for the coordinator's checkpoint; Load replaces this scheduler's state with it.
  std::string Save() const;
  Status Load(std::string_view text);

  // ---- Introspection (tests, status pages) ----
  struct GroupView {
    GroupId id = 0;
    double expected_arrival = 0;    // T_e
    double latest_arrival = 0;      // T_l
    std::vector<ClientId> waiting;  // members not arrived yet
    std::vector<ClientId> arrived;  // members whose updates are folded into the group
  };
  std::optional<GroupView> group(GroupId id) const;
  std::vector<GroupId> open_groups() const;
  std::optional<double> speed(ClientId client) const;  // seconds per local step
  std::optional<CompassAssignment> assignment(ClientId client) const;
  size_t general_buffer_size() const { return general_.size(); }

 private:
  struct Client {
    bool seen = false;              // has arrived at least once (has a speed)
    double speed = 0;               // seconds per step
    double start = 0;               // when its current assignment began
    uint32_t steps = 0;             // its current assignment
    std::optional<GroupId> group;   // its arrival group (may be closed already)
    bool waiting_in_group = false;  // its update is in a group buffer, awaiting aggregation
  };
  struct Group {
    double t_e = 0, t_l = 0;
    std::vector<ClientId> waiting;
    std::vector<CompassUpdateRef> arrived;
  };

  Client& ClientAt(ClientId id);
  void UpdateSpeed(Client& c, double now) const;
  CompassAssignment Assign(ClientId id, double now);
  GroupId CreateGroup(ClientId id, uint32_t steps, double now);
  CompassDecision Aggregate(GroupId id, double now);

  FedCompassParams p_;
  std::optional<double> start_;
  uint64_t next_update_id_ = 0;
  GroupId next_group_ = 0;
  std::map<ClientId, Client> clients_;
  std::map<GroupId, Group> groups_;  // open groups only
  std::vector<CompassUpdateRef> general_;
};

}  // namespace shoal::aggregator
