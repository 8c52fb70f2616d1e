#include "shoal/common/buffer_release.h"

#include "shoal/common/log.h"

namespace shoal {

void LogUnreleased(std::string_view owner, std::string_view what, uint64_t offset, HolderSlot slot,
                   const Status& st) {
  spdlog::error("{}: {} buffer {:#x} (slot {}) not released: {}", owner, what, offset, slot,
                st.ToString());
}

}  // namespace shoal
