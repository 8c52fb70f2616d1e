// Small file helpers shared by the components that persist state in the state directory.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "shoal/common/status.h"

namespace shoal {

// Writes `bytes` to `path` so that a reader sees the old or the new file, never a torn one:
// a temp file beside it (created with `mode`, then fchmod'ed to it), write, fsync, rename.
Status WriteFileAtomic(const std::string& path, std::string_view bytes, unsigned mode = 0600);

// The whole file at `path`, byte for byte; nullopt when it cannot be opened.
std::optional<std::string> ReadFileBytes(const std::string& path);

}  // namespace shoal
