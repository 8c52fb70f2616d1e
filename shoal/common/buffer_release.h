// Giving a hold on a pool buffer back where nothing can be undone if it fails: the one way every
// owner of a hold (the gateway, an instance, an FL job) does it.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string_view>
#include <utility>

#include "shoal/common/buffer_pool.h"

namespace shoal {

// Logs a release that failed: `owner`'s `what` buffer at `offset`, held with `slot`.
void LogUnreleased(std::string_view owner, std::string_view what, uint64_t offset, HolderSlot slot,
                   const Status& st);

// Gives `slot`'s hold on the buffer at `offset` back. A release fails only where the owner's
// bookkeeping and the pool disagree (the slot does not hold that buffer, or it was freed
// already) or the pool's lock died with its holder, never through what a client sent: logged,
// naming the owner (`owner` formatted with `args`, only then) and what the buffer was, and the
// caller goes on (nothing to undo). False when it failed.
template <class... Args>
bool ReleaseOrLog(BufferPool& pool, uint64_t offset, HolderSlot slot, std::string_view what,
                  fmt::format_string<Args...> owner, Args&&... args) {
  const Status st = pool.Release(offset, slot);
  if (st.ok()) return true;
  LogUnreleased(fmt::format(owner, std::forward<Args>(args)...), what, offset, slot, st);
  return false;
}

}  // namespace shoal
