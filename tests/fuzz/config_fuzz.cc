// Fuzz target for shoald's config file (NodeConfig::LoadString, shoal/common/
// config.h). Every input must load or be refused with kInvalidArgument, never throw; what loads
// must print (ToYaml, what `shoald --print-config` shows) to a text that loads again, and to
// the same text again when no string setting holds a control character (yaml-cpp's emitter
// writes "a\r" as a plain scalar, which reads back as "a").
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "shoal/common/config.h"

namespace {

bool HasControlChar(const shoal::NodeConfig& c) {
  for (const std::string* s :
       {&c.node_name, &c.listen_host, &c.state_dir, &c.bpf_pin_root, &c.fn_binary, &c.log_level}) {
    for (char ch : *s) {
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) return true;
    }
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using shoal::NodeConfig;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const shoal::Result<NodeConfig> r = NodeConfig::LoadString(text);
  if (!r.ok()) {
    if (r.status().code() != shoal::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  const std::string printed = r->ToYaml();
  const shoal::Result<NodeConfig> again = NodeConfig::LoadString(printed);
  if (!again.ok()) std::abort();
  if (!HasControlChar(*r) && again->ToYaml() != printed) std::abort();
  return 0;
}
