// FleetService's test fixture: a fake job service with one job "j" (a Flower job of a tiny FAB),
// and helpers that sign each call with a real P-384 key per node name (node_signer.h) as
// flower-supernode does: register and activate, pull, build a reply, push it and its objects.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "node_signer.h"
#include "shoal/fl/flower/fleet_service.h"
#include "shoal/fl/flower/objects.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/fl/wire/update_format.h"

namespace shoal::flower {

// A stored (uncompressed) zip holding one pyproject.toml: a FAB as far as Shoal reads one.
inline std::string TinyFab() {
  const std::string name = "pyproject.toml";
  const std::string body =
      "[project]\nname = \"tiny\"\nversion = \"1.0.0\"\n\n[tool.flwr.app]\npublisher = \"t\"\n";
  auto le = [](std::string& s, uint32_t v, int n) {
    for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  std::string z;
  le(z, 0x04034b50, 4);
  le(z, 20, 2), le(z, 0, 2), le(z, 0, 2), le(z, 0, 2), le(z, 0, 2), le(z, 0, 4);
  le(z, body.size(), 4), le(z, body.size(), 4), le(z, name.size(), 2), le(z, 0, 2);
  z += name + body;
  const uint32_t cd = z.size();
  le(z, 0x02014b50, 4);
  le(z, 20, 2), le(z, 20, 2), le(z, 0, 2), le(z, 0, 2), le(z, 0, 2), le(z, 0, 2), le(z, 0, 4);
  le(z, body.size(), 4), le(z, body.size(), 4), le(z, name.size(), 2), le(z, 0, 2), le(z, 0, 2);
  le(z, 0, 2), le(z, 0, 2), le(z, 0, 4), le(z, 0, 4);
  z += name;
  const uint32_t cd_size = z.size() - cd;
  le(z, 0x06054b50, 4);
  le(z, 0, 2), le(z, 0, 2), le(z, 1, 2), le(z, 1, 2), le(z, cd_size, 4), le(z, cd, 4), le(z, 0, 2);
  return z;
}

inline model::Model Global() {
  model::Model m(model::ModelSpec({{"w", {2, 3}, 0}, {"b", {3}, 0}}));
  for (size_t i = 0; i < m.values.size(); ++i) m.values[i] = 0.5f * static_cast<float>(i);
  return m;
}

class FakeJobs final : public JobService {
 public:
  Status DeployJob(const FlJobSpec&) override { return Status::Ok(); }
  Status DeleteJob(const std::string&) override { return Status::Ok(); }
  std::vector<std::string> ListJobs() override { return {"j"}; }
  Result<std::string> JobStatusJson(const std::string&, const StatusClientsPage&) override {
    return std::string("{}");
  }
  Result<std::string> JobNamespace(const std::string&) override { return std::string("default"); }
  Result<JoinResult> Join(const std::string&, const std::string&, const std::string&) override {
    std::string id = "c";  // appended: GCC 12 warns falsely on "c" + std::string
    id += std::to_string(joined++);
    return JoinResult{id, "tok"};
  }
  Result<TaskResult> Task(const std::string&, const std::string&, const std::string&) override {
    TaskResult t;
    t.kind = TaskResult::Kind::kTrain;
    return t;
  }
  Result<ModelBlob> Model(const std::string&, std::optional<uint64_t>) override {
    auto bytes = model::ModelToSafetensors(Global());
    return ModelBlob{0, std::make_shared<const std::string>(
                            reinterpret_cast<const char*>(bytes.data()), bytes.size())};
  }
  Status Evaluate(const std::string&, const EvalReport&) override { return Status::Ok(); }
  int joined = 0;
};

class FleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fab_path_ = std::filesystem::temp_directory_path() /
                ("shoal-fleet-test-" + std::to_string(::getpid()) + ".fab");
    std::ofstream(fab_path_, std::ios::binary) << TinyFab();
    spec_.name = "j";
    spec_.clients = 2;
    spec_.generation = 1;
    spec_.flower.fab = fab_path_.string();
    spec_.flower.evaluate = false;
    service_ = std::make_unique<FleetService>(FleetService::Hooks{
        &jobs_, [this](const std::string&) -> Result<FlJobSpec> { return spec_; },
        [this](const std::string&, std::string_view body) {
          posted_.emplace_back(body);
          return Status::Ok();
        },
        [this] { return now_; }, [this] { return wall_; }});
  }
  void TearDown() override { std::filesystem::remove(fab_path_); }

  // `body` to /v1/fleet/<rpc> signed by `signer`, by default the node the body names (the
  // registering key for register-node and activate-node; "key-a" for a node nobody registered).
  HttpReply Send(std::string_view rpc, const std::string& body, std::string signer = {},
                 std::string_view method = "POST") {
    if (signer.empty()) {
      auto id = IdentityOf(body);
      signer = "key-a";
      if (id.ok() && (rpc == "register-node" || rpc == "activate-node")) {
        for (const auto& [name, pem] : pems_) {
          if (pem == id->public_key) signer = name;
        }
      } else if (id.ok() && names_.count(id->node_id)) {
        signer = names_[id->node_id];
      }
    }
    std::string path = "/v1/fleet/";  // appended: GCC 12 warns falsely on "..." + std::string
    path += rpc;
    return service_->Handle(method, path, body, signer_.Sign(signer, wall_));
  }
  std::string Pem(const std::string& name) { return pems_[name] = signer_.Pem(name); }
  template <class Resp>
  Resp Call(std::string_view rpc, const google::protobuf::MessageLite& req, int status = 200) {
    HttpReply r = Send(rpc, req.SerializeAsString());
    EXPECT_EQ(r.status, status) << rpc << ": " << r.body;
    Resp out;
    EXPECT_TRUE(out.ParseFromString(r.body));
    return out;
  }
  uint64_t Join(const std::string& key) {
    RegisterNodeFleetRequest reg;
    reg.set_public_key(Pem(key));
    const uint64_t id = Call<RegisterNodeFleetResponse>("register-node", reg).node_id();
    names_[id] = key;
    ActivateNodeRequest act;
    act.set_public_key(Pem(key));
    act.set_heartbeat_interval(30);
    EXPECT_EQ(Call<ActivateNodeResponse>("activate-node", act).node_id(), id);
    return id;
  }
  PullMessagesResponse Pull(uint64_t node) {
    PullMessagesRequest req;
    req.mutable_node()->set_node_id(node);
    return Call<PullMessagesResponse>("pull-messages", req);
  }
  // A reply to `ins` with arrays `m` (a model of any shapes) and num-examples `n`: its objects.
  BuiltObject Reply(const Message& ins, uint64_t from, const model::Model& m, int64_t n,
                    ObjectMap& objects, Metadata& md) {
    BuiltObject ar = BuildArrayRecord(m, objects);
    MetricRecord mr;
    auto* item = mr.add_items();
    item->set_key("num-examples");
    item->mutable_value()->set_sint64(n);
    BuiltObject metrics;
    metrics.id = ObjectId(MakeObject("MetricRecord", {}, mr.SerializeAsString()));
    objects[metrics.id] =
        std::make_shared<const std::string>(MakeObject("MetricRecord", {}, mr.SerializeAsString()));
    metrics.tree.set_object_id(metrics.id);
    BuiltObject rd = BuildRecordDict({{"arrays", ar}, {"metrics", metrics}}, objects);
    md.set_run_id(ins.metadata().run_id());
    md.set_src_node_id(from);
    md.set_dst_node_id(1);
    md.set_reply_to_message_id(ins.metadata().message_id());
    md.set_message_type("train");
    return BuildMessage(md, rd, objects);
  }
  PushMessagesResponse Push(uint64_t node, const Metadata& md, const ObjectTree& tree) {
    PushMessagesRequest req;
    req.mutable_node()->set_node_id(node);
    *req.add_messages_list()->mutable_metadata() = md;
    *req.add_message_object_trees() = tree;
    return Call<PushMessagesResponse>("push-messages", req);
  }
  bool PushObject(uint64_t node, uint64_t run, const std::string& session, const std::string& id,
                  const std::string& content) {
    PushObjectRequest req;
    req.mutable_node()->set_node_id(node);
    req.set_run_id(run);
    req.set_object_id(id);
    req.set_object_content(content);
    req.set_session_id(session);
    return Call<PushObjectResponse>("push-object", req).stored();
  }

  std::filesystem::path fab_path_;
  FlJobSpec spec_;  // the job's spec (a test may change it: bump generation)
  FakeJobs jobs_;
  std::vector<std::string> posted_;
  std::chrono::steady_clock::time_point now_ = std::chrono::steady_clock::now();
  std::chrono::system_clock::time_point wall_ = std::chrono::system_clock::now();
  NodeSigner signer_;
  std::map<std::string, std::string> pems_;  // key name -> its PEM
  std::map<uint64_t, std::string> names_;    // node id -> the key name it registered with
  std::unique_ptr<FleetService> service_;
};

}  // namespace shoal::flower
