// An HTTP status read back as the StatusCode that HttpStatusFor (status.h) answers it for: for
// clients of the servers' APIs, so that both directions come from status.cc's one table.
#pragma once

#include <optional>

#include "shoal/common/status.h"

namespace shoal {

// nullopt for a status HttpStatusFor never answers.
std::optional<StatusCode> StatusCodeForHttp(int http);

}  // namespace shoal
