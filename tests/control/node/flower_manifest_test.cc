// An FLJob's spec.flower allow-list: supernodes (key files read at deploy: OpenSSH ecdsa or PEM)
// turn supernodeAuth on; each mistake refused with its field and message.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "manifest_refusals.h"
#include "shoal/control/node/manifest.h"

namespace shoal {
namespace {

const std::string kKeys = std::string(SHOAL_SOURCE_DIR) + "/tests/fl/flower/keys/";

std::string FlowerJob(const std::string& flower_extra) {
  // Any file stands for the FAB here: the parser checks that it exists.
  return "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: fmnist\nspec:\n  clients:\n"
         "    expected: 2\n  flower:\n    fab: " +
         kKeys + "node-a.pem\n" + flower_extra;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(FlowerManifest, SupernodesAreReadAndTurnAuthOn) {
  auto r = ParseFlJobManifests(FlowerJob(""));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->front().flower.supernode_auth);
  r = ParseFlJobManifests(
      FlowerJob("    supernodes: [" + kKeys + "node-a.pub, " + kKeys + "node-b.pem]\n"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->front().flower.supernode_auth);
  EXPECT_EQ(r->front().flower.supernodes,
            (std::vector<std::string>{Read(kKeys + "node-a.pub"), Read(kKeys + "node-b.pem")}));
  r = ParseFlJobManifests(FlowerJob("    supernodeAuth: true\n"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->front().flower.supernode_auth);
  EXPECT_TRUE(r->front().flower.supernodes.empty());
}

TEST(FlowerManifest, BadSupernodesAreRefused) {
  const auto error = [](const std::string& extra) {
    const std::string yaml = FlowerJob(extra);
    return RefusalOf(ParseFlJobManifests(yaml), yaml);
  };
  EXPECT_NE(error("    supernodes: [keys/a.pub]\n").find("must be an absolute path"),
            std::string::npos);
  EXPECT_NE(error("    supernodes: [/nonexistent/a.pub]\n").find("cannot read /nonexistent/a.pub"),
            std::string::npos);
  // A private key is not a public key.
  EXPECT_NE(error("    supernodes: [" + kKeys + "node-a]\n").find("is not a SuperNode public key"),
            std::string::npos);
  EXPECT_NE(error("    supernodes: [" + kKeys + "node-a.pub]\n    supernodeAuth: false\n")
                .find("false with spec.flower.supernodes listed"),
            std::string::npos);
}

}  // namespace
}  // namespace shoal
