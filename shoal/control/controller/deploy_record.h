// Deploying one manifest record (cluster::ClusterFunction, cluster::FlJobRecord) in etcd
// optimistically: read it, stamp the next generation of the spec's manifest, write it only if
// its key did not change between (up to 20 tries).
#pragma once

#include <string>
#include <utility>

#include "shoal/common/clock.h"
#include "shoal/common/status.h"
#include "shoal/control/cluster/etcd_client.h"

namespace shoal::controller {

// `read(&record)` fills the record etcd holds (if any) and returns its key's mod revision (0: no
// record); `create(record)` sets up a new one (a Status). `what` names the record in the error
// after the last try. Returns the record written and whether it was created.
template <typename Record, typename Spec, typename Read, typename Create>
Result<std::pair<Record, bool>> DeployRecord(cluster::EtcdClient& etcd, const std::string& key,
                                             const Spec& spec, const std::string& what, Read read,
                                             Create create) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    Record r;
    Result<int64_t> mod_revision = read(&r);
    if (!mod_revision.ok()) return mod_revision.status();
    const bool created = *mod_revision == 0;
    if (created) SHOAL_RETURN_IF_ERROR(create(r));
    r.name = spec.name;
    r.tenant = spec.tenant;
    r.generation += 1;
    r.manifest = spec.manifest;
    r.updated_unix_ms = UnixMs();
    auto written = etcd.PutIfModRevision(key, r.ToJson(), *mod_revision);
    if (!written.ok()) return written.status();
    if (*written) return std::pair<Record, bool>{std::move(r), created};
  }
  return Unavailable("etcd: " + what + " kept changing under us");
}

}  // namespace shoal::controller
