#include "shoal/dataplane/gateway/fl_tickets.h"

#include "shoal/common/log.h"

namespace shoal {

namespace {
constexpr uint64_t kNoPartial = ~uint64_t{0};  // Pending::fl_partial: asked, none named
}  // namespace

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

void FlTickets::Stamp(Pending& p, uint32_t instance, EventDescriptor& d) {
  if (p.fl_ticket == 0) return;
  if (p.fl_partial == 0) {
    auto partial = fl_->PartialFor(p.fl_ticket, instance);
    if (!partial.ok()) {
      spdlog::error("FL ticket {}: no partial sum: {}", p.fl_ticket, partial.status().ToString());
      return;
    }
    // A robust job names none (offset 0): asked once all the same.
    p.fl_partial = *partial != 0 ? *partial : kNoPartial;
  }
  d.aux_offset = p.fl_partial != kNoPartial ? p.fl_partial : 0;
  d.aux_value = p.fl_weight;
}

}  // namespace shoal
