// SuperNode allow-lists (spec.flower.supernodeAuth), as Flower 1.42's SuperLink keeps them with
// --enable-supernode-auth: keys become the PEM flwr's `supernode register` sends (golden PEMs
// written by the venv's flwr from real ssh-keygen keys in keys/); a listed key activates, an
// unlisted one and RegisterNode get the SuperLink's answers; keys registered and unregistered
// through the control API's route; an unregistered node's next call is 401.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fleet_fixture.h"
#include "shoal/fl/flower/node_keys.h"

namespace shoal::flower {
namespace {

std::string ReadKey(const std::string& name) {
  std::ifstream in(std::string(SHOAL_FLOWER_TEST_KEYS) + "/" + name, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(NodeKeys, OpenSshKeysBecomeThePemFlowerSends) {
  for (const char* n : {"node-a", "node-b", "node-p256"}) {
    const std::string want = ReadKey(std::string(n) + ".pem");
    ASSERT_FALSE(want.empty()) << n;
    auto from_ssh = NodePublicKeyPem(ReadKey(std::string(n) + ".pub"));
    ASSERT_TRUE(from_ssh.ok()) << n << ": " << from_ssh.status().message();
    EXPECT_EQ(*from_ssh, want) << n;
    auto from_pem = NodePublicKeyPem(want);
    ASSERT_TRUE(from_pem.ok()) << from_pem.status().message();
    EXPECT_EQ(*from_pem, want) << n;
  }
  EXPECT_EQ(NodePublicKeyPem("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA x").status().message(),
            "not a SuperNode public key: expected an OpenSSH 'ecdsa-sha2-nistp...' line "
            "(ssh-keygen -t ecdsa) or a PEM '-----BEGIN PUBLIC KEY-----'");
  // A point moved off the curve (one byte of its x changed).
  std::string bad = ReadKey("node-a.pub");
  bad[100] = bad[100] == 'A' ? 'B' : 'A';
  EXPECT_EQ(NodePublicKeyPem(bad).status().message(), "the key's point is not on P-384");
  EXPECT_EQ(NodePublicKeyPem("ecdsa-sha2-nistp384 AAAA").status().message(),
            "not an OpenSSH ecdsa-sha2-nistp384 key");
}

class AllowListTest : public FleetTest {
 protected:
  HttpReply Admin(std::string_view method, std::string_view id = {}, std::string_view body = {}) {
    return service_->Supernodes(method, "j", id, body);
  }
  HttpReply Activate(const std::string& key) {
    ActivateNodeRequest act;
    act.set_public_key(Pem(key));
    act.set_heartbeat_interval(30);
    HttpReply r = Send("activate-node", act.SerializeAsString());
    ActivateNodeResponse resp;
    if (r.status == 200 && resp.ParseFromString(r.body)) names_[resp.node_id()] = key;
    return r;
  }
  nlohmann::json List() {
    HttpReply r = Admin("GET");
    EXPECT_EQ(r.status, 200) << r.body;
    return nlohmann::json::parse(r.body)["supernodes"];
  }
};

TEST_F(AllowListTest, OnlyListedKeysActivateAndUnregisteredNodesAreRefused) {
  // Without supernodeAuth the job has no allow-list.
  EXPECT_EQ(Admin("GET").status, 409);
  spec_.flower.supernode_auth = true;
  spec_.flower.supernodes = {Pem("key-a")};
  spec_.generation = 2;
  // Self-registration is refused as the SuperLink with --enable-supernode-auth refuses it.
  RegisterNodeFleetRequest reg;
  reg.set_public_key(Pem("key-c"));
  HttpReply r = Send("register-node", reg.SerializeAsString());
  EXPECT_EQ(r.status, 412);
  EXPECT_EQ(r.body,
            R"({"code":2001,"detail":"SuperNode authentication is enabled. All SuperNodes must )"
            R"(be registered via the CLI."})");
  // The listed key is registered (not yet activated); an unlisted key cannot activate.
  nlohmann::json list = List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["publicKey"], Pem("key-a"));
  EXPECT_EQ(list[0]["status"], "registered");
  r = Activate("key-b");
  EXPECT_EQ(r.status, 412);
  EXPECT_EQ(r.body, R"({"code":2004,"detail":"Failed to activate SuperNode."})");
  r = Activate("key-a");
  ASSERT_EQ(r.status, 200) << r.body;
  ActivateNodeResponse act;
  ASSERT_TRUE(act.ParseFromString(r.body));
  const uint64_t a = act.node_id();
  EXPECT_EQ(list[0]["nodeId"].get<uint64_t>(), a);
  EXPECT_EQ(List()[0]["status"], "online");
  EXPECT_EQ(Pull(a).messages_list_size(), 1);  // a joined the job: its train message
  // b's key registered through the control API: b activates; registering it twice is 409.
  r = Admin("POST", {}, nlohmann::json{{"publicKey", Pem("key-b")}}.dump());
  ASSERT_EQ(r.status, 201) << r.body;
  const uint64_t b = nlohmann::json::parse(r.body)["nodeId"].get<uint64_t>();
  r = Admin("POST", {}, nlohmann::json{{"publicKey", Pem("key-b")}}.dump());
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(r.body, "{\"error\":\"Public key already in use (SuperNode " + std::to_string(b) +
                        " of job 'j')\"}");
  EXPECT_EQ(Admin("POST", {}, R"({"publicKey":"ssh-rsa AAAA"})").status, 400);
  ASSERT_EQ(Activate("key-b").status, 200);
  EXPECT_EQ(Pull(b).messages_list_size(), 1);
  EXPECT_EQ(jobs_.joined, 2);
  // A node may not unregister itself through the Fleet API.
  UnregisterNodeFleetRequest unreg;
  unreg.set_node_id(a);
  r = Send("unregister-node", unreg.SerializeAsString());
  EXPECT_EQ(r.status, 412);
  EXPECT_EQ(r.body,
            R"({"code":2002,"detail":"SuperNode authentication is enabled. All SuperNodes must )"
            R"(be unregistered via the CLI."})");
  // Unregistered through the control API: a's next heartbeat is 401 (flower-supernode stops).
  EXPECT_EQ(Admin("DELETE", "12345").status, 404);
  r = Admin("DELETE", std::to_string(a));
  ASSERT_EQ(r.status, 200) << r.body;
  SendNodeHeartbeatRequest hb;
  hb.mutable_node()->set_node_id(a);
  hb.set_heartbeat_interval(30);
  r = Send("send-node-heartbeat", hb.SerializeAsString());
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.body, R"({"detail":"Invalid SuperNode authentication"})");
  // The spec reloaded (a new generation) does not list a's key again; b stays.
  spec_.generation = 3;
  EXPECT_EQ(Activate("key-a").status, 412);
  list = List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["nodeId"].get<uint64_t>(), b);
  EXPECT_EQ(service_->counters().unauthenticated, 1u);
}

}  // namespace
}  // namespace shoal::flower
