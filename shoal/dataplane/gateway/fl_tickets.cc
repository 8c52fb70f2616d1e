#include "shoal/dataplane/gateway/fl_tickets.h"

#include "shoal/common/log.h"

namespace shoal {

int FlAdmitErrorStatus(const Status& st) {
  return st.code() == StatusCode::kAlreadyExists ? 409 : HttpStatusFor(st.code());
}

void FlTickets::Finish(uint64_t ticket, int status) {
  if (ticket != 0) fl_->Completed(ticket, status, false);
}

void FlTickets::Finish(Pending& p, int status, bool leaf_answered, bool partial_changed) {
  if (p.fl_ticket == 0) return;
  if (partial_changed) fl_->PartialChanged(p.fl_ticket);
  fl_->Completed(p.fl_ticket, status, leaf_answered);
  p.fl_ticket = 0;
}

void FlTickets::Stamp(const Pending& p, uint32_t instance, EventDescriptor& d) {
  if (p.fl_ticket == 0) return;
  auto partial = fl_->PartialFor(p.fl_ticket, instance);
  if (!partial.ok()) {
    spdlog::error("FL ticket {}: no partial sum: {}", p.fl_ticket, partial.status().ToString());
    return;
  }
  d.aux_offset = *partial;
  d.aux_value = p.fl_weight;
}

}  // namespace shoal
