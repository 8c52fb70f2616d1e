// FL update tickets as a gateway loop carries them: the coordinator admitted an update
// (FlDataPath::Admit) and gave it a ticket; the descriptor to the leaf names the partial sum
// and the update's weight; however the request ends (the leaf's answer, a timeout, a dead
// instance, a full queue), the coordinator hears it exactly once.
#pragma once

#include <cstdint>

#include "shoal/common/descriptor.h"
#include "shoal/dataplane/gateway/pending_requests.h"
#include "shoal/interfaces/fl_data_path.h"

namespace shoal {

// The HTTP status of a refused admission (409 for a duplicate or stale update).
int FlAdmitErrorStatus(const Status& st);

class FlTickets {
 public:
  explicit FlTickets(FlDataPath* fl) : fl_(fl) {}

  // Tells the coordinator how the request's update ended (nothing for other requests) and
  // forgets its ticket. `leaf_answered`: `status` is the leaf's own answer, not the gateway's;
  // `partial_changed`: the leaf's reply says its refusal changed the partial sum
  // (FlDataPath::PartialChanged).
  void Finish(Pending& p, int status, bool leaf_answered = false, bool partial_changed = false);
  // The same for an admitted update that never reached a request (its client left first).
  void Finish(uint64_t ticket, int status);
  // Names the partial sum and the weight of the request's update in `d` for the leaf
  // `instance` (asked of the coordinator once per update, kept in `p`). Without a partial sum
  // the leaf folds nothing; the error is logged.
  void Stamp(Pending& p, uint32_t instance, EventDescriptor& d);

 private:
  FlDataPath* fl_;
};

}  // namespace shoal
