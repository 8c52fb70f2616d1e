// An instance's load report (EventKind::kLoadReport, descriptor.h; instance -> shoald's instance
// manager at kManagerEndpoint). A handler that knows more of its load
// than the requests in flight (the language model: tokens in flight, running and queued sequences)
// reports it when it changes; shoald keeps the last report per instance and sums them into the
// function's autoscaling signals (shoal/control/autoscaler/signals.h). No payload: the numbers
// travel in the descriptor's fields (WriteLoadReport / ReadLoadReport).
#pragma once

#include <cstdint>

#include "shoal/common/descriptor.h"

namespace shoal {

struct LoadReport {
  uint64_t tokens_in_flight = 0;  // prompt tokens to prefill + tokens still to decode
  uint32_t running = 0;           // sequences being stepped
  uint32_t queued = 0;            // sequences waiting to join
  bool operator==(const LoadReport&) const = default;
};

// `length` carries the tokens, `aux_offset` running << 32 | queued; offset stays 0 (no buffer).
inline void WriteLoadReport(const LoadReport& r, EventDescriptor* d) {
  d->kind = static_cast<uint16_t>(EventKind::kLoadReport);
  d->offset = 0;
  d->length = r.tokens_in_flight;
  d->aux_offset = (uint64_t{r.running} << 32) | r.queued;
}
inline LoadReport ReadLoadReport(const EventDescriptor& d) {
  return {d.length, static_cast<uint32_t>(d.aux_offset >> 32),
          static_cast<uint32_t>(d.aux_offset & 0xFFFFFFFFu)};
}

}  // namespace shoal
