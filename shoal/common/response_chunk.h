// The descriptor kind of one piece of a streamed answer, instance -> gateway: EventKind's next
// value after kPong (descriptor.h). Its payload is a response buffer whose head gives the status
// and content type and whose body is the piece; the request stays pending, and the kResponse
// that follows ends the stream (its body, if any, is the last piece). The gateway writes the
// pieces to the client as HTTP chunks (shoal/dataplane/gateway/connection_stream.cc).
#pragma once

#include <cstdint>

#include "shoal/common/descriptor.h"

namespace shoal {

inline constexpr auto kResponseChunk = static_cast<EventKind>(7);
static_assert(static_cast<uint16_t>(kResponseChunk) == static_cast<uint16_t>(EventKind::kPong) + 1);

}  // namespace shoal
