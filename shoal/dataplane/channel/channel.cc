#include "shoal/dataplane/channel/channel.h"

#include "shoal/common/enum_names.h"
#include "shoal/dataplane/channel/sockmap_channel.h"
#include "shoal/dataplane/channel/unix_dgram_channel.h"

namespace shoal {

size_t DescriptorChannel::SendMany(std::span<const EventDescriptor> ds, Status* error) {
  for (size_t i = 0; i < ds.size(); ++i) {
    if (Status st = Send(ds[i]); !st.ok()) {
      *error = std::move(st);
      return i;
    }
  }
  return ds.size();
}

namespace {

constexpr EnumName<DataPlaneKind> kDataPlaneKinds[] = {{DataPlaneKind::kSockmap, "sockmap"},
                                                       {DataPlaneKind::kUnix, "unix"}};

}  // namespace

const char* DataPlaneKindName(DataPlaneKind kind) {
  return NameOf(kDataPlaneKinds, kind, "unknown");
}

Result<DataPlaneKind> ParseDataPlaneKind(const std::string& name) {
  if (const auto kind = ValueOf(kDataPlaneKinds, name)) return *kind;
  return InvalidArgument("unknown data plane '" + name + "' (expected " +
                         NameList(kDataPlaneKinds) + ")");
}

std::unique_ptr<DescriptorChannel> OpenChannel(int fd, DataPlaneKind kind,
                                               const std::string& node_name) {
  if (kind == DataPlaneKind::kSockmap) return std::make_unique<SockmapChannel>(fd);
  return std::make_unique<UnixDgramChannel>(fd, node_name);
}

}  // namespace shoal
