// The zygote's side of zygote_protocol.h, run by shoal-fn when SHOAL_ZYGOTE=1: after the
// handler is loaded and the pool attached, it answers kFork requests by forking a child that
// finishes only the per-instance part (its data-plane socket, stdout/stderr, pool slot).
#pragma once

#include <string>

#include "shoal/common/status.h"
#include "shoal/runtime/instance/function_instance.h"

namespace shoal {

// Tells shoald that the zygote cannot serve (the handler failed to load): it then exits.
void ReportZygoteFailure(int control_fd, const std::string& why);

// Serves kFork requests until shoald closes the control socket. Returns true in a forked child
// (released by shoald, its descriptors in place, *options naming its endpoint, slot and
// data-plane fd), false in the zygote once shoald has closed the socket, an error when the
// zygote cannot fork safely (reported to shoald as kUnforkable).
Result<bool> ServeAsZygote(int control_fd, InstanceOptions* options);

}  // namespace shoal
