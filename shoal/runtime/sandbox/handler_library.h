// Which code a Function may load: a handler library (spec.handler.library) only from the
// node's configured handler directories, and no handler environment variable that makes the
// dynamic loader or libc load code. Checked when a manifest is deployed and, for the library,
// again when each instance starts, on open file descriptors, so nothing swapped in between
// (a symlink, a renamed directory) is ever followed.
#pragma once

#include <string>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/runtime/sandbox/unique_fd.h"

namespace shoal {

// The configured handler directories with `$ORIGIN` (at the start of an entry) replaced by the
// directory of the running executable, each normalised (no `.`, `..` or trailing `/`).
std::vector<std::string> ResolveHandlerDirs(const std::vector<std::string>& configured);

// Opens `path` (absolute) read-only when it lies under one of `dirs` (resolved) and is safe to
// load: a regular file, and the file and every directory from the handler directory down to
// it owned by root (or by this process's user when it is not root) and writable by nobody
// else (no group or other write bit). The handler directory is opened by its path; every
// component below it is opened with openat(O_NOFOLLOW) from its parent's descriptor, so a
// symlink anywhere below the handler directory is refused. The error names the reason; the
// caller prefixes the field.
Result<UniqueFd> OpenHandlerLibrary(const std::string& path, const std::vector<std::string>& dirs);

// The reason a handler environment variable `name` is refused (it makes ld.so, glibc or a
// common runtime load code or read attacker-chosen files: LD_*, GCONV_PATH, LOCPATH, ...), or
// "" when it is allowed.
std::string CodeLoadingEnvReason(const std::string& name);

}  // namespace shoal
