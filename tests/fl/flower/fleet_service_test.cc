// FleetService against a fake job: a node's whole round (register, activate, pull the train
// message and its objects, push the reply) folds one update with the reply's arrays and weight,
// and each bad request gets the answer Flower's SuperLink gives: malformed protobuf, an unknown
// route or method, a reused public key, a bad heartbeat interval, an unknown object id, an object
// whose content is not its id, a reply to another node's message, an oversize array.
#include "shoal/fl/flower/fleet_service.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "node_signer.h"
#include "shoal/fl/flower/objects.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/fl/wire/update_format.h"

namespace shoal::flower {
namespace {

// A stored (uncompressed) zip holding one pyproject.toml: a FAB as far as Shoal reads one.
std::string TinyFab() {
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

model::Model Global() {
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
    FlJobSpec spec;
    spec.name = "j";
    spec.clients = 2;
    spec.generation = 1;
    spec.flower.fab = fab_path_.string();
    spec.flower.evaluate = false;
    service_ = std::make_unique<FleetService>(FleetService::Hooks{
        &jobs_, [spec](const std::string&) -> Result<FlJobSpec> { return spec; },
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
  FakeJobs jobs_;
  std::vector<std::string> posted_;
  std::chrono::steady_clock::time_point now_ = std::chrono::steady_clock::now();
  std::chrono::system_clock::time_point wall_ = std::chrono::system_clock::now();
  NodeSigner signer_;
  std::map<std::string, std::string> pems_;  // key name -> its PEM
  std::map<uint64_t, std::string> names_;    // node id -> the key name it registered with
  std::unique_ptr<FleetService> service_;
};

TEST_F(FleetTest, ARoundFoldsTheReplysArraysWithItsWeight) {
  const uint64_t a = Join("key-a");
  PullMessagesResponse pulled = Pull(a);
  ASSERT_EQ(pulled.messages_list_size(), 1);
  const Message& ins = pulled.messages_list(0);
  EXPECT_EQ(ins.metadata().message_type(), "train");
  EXPECT_EQ(ins.metadata().dst_node_id(), a);
  EXPECT_TRUE(ins.has_content());
  EXPECT_EQ(pulled.message_object_trees(0).object_id(), ins.metadata().message_id());
  // Every object of the message can be pulled and hashes to its id.
  std::vector<const ObjectTree*> stack = {&pulled.message_object_trees(0)};
  size_t objects = 0;
  while (!stack.empty()) {
    const ObjectTree* t = stack.back();
    stack.pop_back();
    for (const auto& c : t->children()) stack.push_back(&c);
    PullObjectRequest req;
    req.mutable_node()->set_node_id(a);
    req.set_run_id(ins.metadata().run_id());
    req.set_object_id(t->object_id());
    auto obj = Call<PullObjectResponse>("pull-object", req);
    ASSERT_TRUE(obj.object_found());
    EXPECT_EQ(ObjectId(obj.object_content()), t->object_id());
    ++objects;
  }
  EXPECT_EQ(objects, 8u);  // message, RecordDict, ArrayRecord, 2 arrays, 2 chunks, ConfigRecord
  EXPECT_EQ(Pull(a).messages_list_size(), 0);  // one train message per version

  model::Model trained = Global();
  trained.values[7] = 42.0f;
  ObjectMap objs;
  Metadata md;
  const BuiltObject reply = Reply(ins, a, trained, 37, objs, md);
  PushMessagesResponse pushed = Push(a, md, reply.tree);
  EXPECT_EQ(pushed.results().at(md.message_id()), 0u);
  EXPECT_EQ(pushed.reconnect().reconnect(), 5u);
  ASSERT_GT(pushed.objects_to_push_size(), 0);
  for (const auto& id : pushed.objects_to_push()) {
    EXPECT_TRUE(PushObject(a, md.run_id(), pushed.session_id(), id, *objs.at(id)));
  }
  ASSERT_EQ(posted_.size(), 1u);
  auto update = model::ParseUpdate(
      std::span(reinterpret_cast<const std::byte*>(posted_[0].data()), posted_[0].size()),
      Global().spec);
  ASSERT_TRUE(update.ok()) << update.status().ToString();
  EXPECT_EQ(update->meta.num_samples, 37u);
  EXPECT_EQ(update->meta.client_id, "c0");
  EXPECT_EQ(update->meta.base_version, 0u);
  float b1 = 0;
  std::memcpy(&b1, update->tensors[1].data + sizeof(float), sizeof b1);
  EXPECT_EQ(b1, 42.0f);  // b[1], the model's 8th value
  EXPECT_EQ(service_->counters().replies_folded, 1u);
}

// A node that dies mid-reply: its push session is let go after kSessionIdleSeconds without an
// object (its objects with it), the rest of that reply is refused, and the message may be
// answered again; once the node is past its heartbeats' patience (2 x 30 s) its unanswered
// message goes too, and the node, back, is sent the job's task afresh.
TEST_F(FleetTest, IdleSessionsAndOfflineNodesMessagesAreLetGo) {
  const uint64_t a = Join("key-a");
  PullMessagesResponse pulled = Pull(a);
  ASSERT_EQ(pulled.messages_list_size(), 1);
  const Message ins = pulled.messages_list(0);
  ObjectMap objs;
  Metadata md;
  const BuiltObject reply = Reply(ins, a, Global(), 5, objs, md);
  PushMessagesResponse pushed = Push(a, md, reply.tree);
  ASSERT_GE(pushed.objects_to_push_size(), 2);
  const std::string first = pushed.objects_to_push(0), second = pushed.objects_to_push(1);
  ASSERT_TRUE(PushObject(a, md.run_id(), pushed.session_id(), first, *objs.at(first)));
  // Heartbeats keep the node online; the session stays while objects come within the limit.
  auto beat = [&] {
    SendNodeHeartbeatRequest hb;
    hb.mutable_node()->set_node_id(a);
    hb.set_heartbeat_interval(30);
    EXPECT_TRUE(Call<SendNodeHeartbeatResponse>("send-node-heartbeat", hb).success());
  };
  now_ += std::chrono::seconds(100);
  beat();
  EXPECT_EQ(service_->counters().sessions_expired, 0u);
  now_ += std::chrono::seconds(21);  // 121 s without an object
  beat();
  EXPECT_EQ(service_->counters().sessions_expired, 1u);
  EXPECT_FALSE(PushObject(a, md.run_id(), pushed.session_id(), second, *objs.at(second)));
  EXPECT_EQ(service_->counters().objects_refused, 1u);
  EXPECT_TRUE(posted_.empty());
  // The message may be answered again: a new push opens a new session, which completes.
  PushMessagesResponse again = Push(a, md, reply.tree);
  EXPECT_NE(again.session_id(), pushed.session_id());
  ASSERT_EQ(again.objects_to_push_size(), pushed.objects_to_push_size());
  EXPECT_EQ(service_->counters().replies_dropped, 0u);

  // A second node pulls its message and goes silent: offline after 2 x 30 s, its message goes.
  const uint64_t b = Join("key-b");
  ASSERT_EQ(Pull(b).messages_list_size(), 1);
  EXPECT_EQ(Pull(b).messages_list_size(), 0);  // one per version while it is sent
  now_ += std::chrono::seconds(61);
  beat();  // any request sweeps
  EXPECT_EQ(service_->counters().messages_expired, 1u);
  // a, pushing, kept its message; the silent b, back, is sent the task again.
  EXPECT_EQ(Pull(b).messages_list_size(), 1);
  for (const auto& id : again.objects_to_push()) {
    EXPECT_TRUE(PushObject(a, md.run_id(), again.session_id(), id, *objs.at(id)));
  }
  EXPECT_EQ(posted_.size(), 1u);
  EXPECT_EQ(service_->counters().replies_folded, 1u);
}

TEST_F(FleetTest, BadRequestsGetFlowersAnswers) {
  HttpReply r = Send("pull-messages", "\xff\xff\xff");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, R"({"code":1003,"detail":"Invalid protobuf payload."})");
  EXPECT_EQ(Send("nope", "").status, 404);
  EXPECT_EQ(Send("pull-messages", "", {}, "GET").status, 405);
  const uint64_t a = Join("key-a");
  RegisterNodeFleetRequest again;
  again.set_public_key(Pem("key-a"));
  r = Send("register-node", again.SerializeAsString());
  EXPECT_EQ(r.status, 412);
  EXPECT_EQ(r.body, R"({"code":23,"detail":"Public key already in use."})");
  SendNodeHeartbeatRequest hb;
  hb.mutable_node()->set_node_id(a);
  hb.set_heartbeat_interval(5);
  r = Send("send-node-heartbeat", hb.SerializeAsString());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, R"({"code":2003,"detail":"Invalid heartbeat interval."})");
  hb.set_heartbeat_interval(30);
  EXPECT_TRUE(Call<SendNodeHeartbeatResponse>("send-node-heartbeat", hb).success());
  // A node id the signer did not register with: refused as Flower's SuperLink refuses it.
  hb.mutable_node()->set_node_id(12345);
  r = Send("send-node-heartbeat", hb.SerializeAsString());
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.body, R"({"detail":"Invalid SuperNode authentication"})");

  const Message ins = Pull(a).messages_list(0);
  PullObjectRequest unknown;
  unknown.mutable_node()->set_node_id(a);
  unknown.set_run_id(ins.metadata().run_id());
  unknown.set_object_id(std::string(64, 'e'));
  auto obj = Call<PullObjectResponse>("pull-object", unknown);
  EXPECT_FALSE(obj.object_found());
  EXPECT_FALSE(obj.object_available());
  GetRunRequest run;
  run.mutable_node()->set_node_id(a);
  run.set_run_id(ins.metadata().run_id() + 1);
  r = Send("get-run", run.SerializeAsString());
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.body, R"({"code":2008,"detail":"Failed to get run."})");

  // Node b replies to a's message: answered, nothing asked for, nothing folded.
  const uint64_t b = Join("key-b");
  ObjectMap objs;
  Metadata md;
  BuiltObject reply = Reply(ins, b, Global(), 10, objs, md);
  PushMessagesResponse pushed = Push(b, md, reply.tree);
  EXPECT_EQ(pushed.objects_to_push_size(), 0);
  EXPECT_EQ(pushed.results().at(md.message_id()), 0u);
  EXPECT_EQ(service_->counters().replies_dropped, 1u);

  // a's own reply: an object whose content is not its id is not stored; an oversize array (a
  // shape the model does not have) is not folded; the right objects are all stored.
  model::Model big(model::ModelSpec({{"w", {2, 30}, 0}, {"b", {3}, 0}}));
  Metadata md2;
  ObjectMap objs2;
  reply = Reply(ins, a, big, 10, objs2, md2);
  pushed = Push(a, md2, reply.tree);
  ASSERT_GT(pushed.objects_to_push_size(), 1);
  const std::string first = pushed.objects_to_push(0);
  EXPECT_FALSE(PushObject(a, md2.run_id(), pushed.session_id(), first, "not its content"));
  EXPECT_FALSE(PushObject(b, md2.run_id(), pushed.session_id(), first, *objs2.at(first)));
  for (const auto& id : pushed.objects_to_push()) {
    EXPECT_TRUE(PushObject(a, md2.run_id(), pushed.session_id(), id, *objs2.at(id)));
  }
  EXPECT_TRUE(posted_.empty());
  EXPECT_EQ(service_->counters().replies_refused, 1u);
  EXPECT_EQ(service_->counters().objects_refused, 2u);
  // The message has its reply: a second one is dropped.
  Metadata md3;
  ObjectMap objs3;
  reply = Reply(ins, a, Global(), 10, objs3, md3);
  EXPECT_EQ(Push(a, md3, reply.tree).objects_to_push_size(), 0);
  EXPECT_EQ(service_->counters().replies_dropped, 2u);
}

}  // namespace
}  // namespace shoal::flower

namespace shoal::flower {
namespace {

// Every call is authenticated as Flower's SuperLink does it: a missing or bad signature, a stale
// timestamp, a body naming another key or another node is 401 and changes nothing.
TEST_F(FleetTest, CallsAreAuthenticatedByTheNodesSignature) {
  const uint64_t a = Join("key-a");
  const uint64_t b = Join("key-b");
  PullMessagesRequest pull;
  pull.mutable_node()->set_node_id(a);
  const std::string body = pull.SerializeAsString();
  const auto refused = [](const HttpReply& r) {
    return r.status == 401 && r.body == R"({"detail":"Invalid SuperNode authentication"})";
  };
  // No headers; b's key naming a's node; a's key, its signature over another timestamp.
  EXPECT_TRUE(refused(service_->Handle("POST", "/v1/fleet/pull-messages", body, {})));
  EXPECT_TRUE(refused(Send("pull-messages", body, "key-b")));
  NodeAuthHeaders forged = signer_.Sign("key-a", wall_);
  forged.timestamp = signer_.Sign("key-a", wall_ + std::chrono::seconds(1)).timestamp;
  EXPECT_TRUE(refused(service_->Handle("POST", "/v1/fleet/pull-messages", body, forged)));
  // Signed 306 s ago (Flower's window: 300 s plus 5 s of drift), or 6 s in the future.
  const NodeAuthHeaders stale = signer_.Sign("key-a", wall_ - std::chrono::seconds(306));
  EXPECT_TRUE(refused(service_->Handle("POST", "/v1/fleet/pull-messages", body, stale)));
  const NodeAuthHeaders early = signer_.Sign("key-a", wall_ + std::chrono::seconds(6));
  EXPECT_TRUE(refused(service_->Handle("POST", "/v1/fleet/pull-messages", body, early)));
  // A registration whose body names a key other than the signer's.
  RegisterNodeFleetRequest reg;
  reg.set_public_key(Pem("key-c"));
  EXPECT_TRUE(refused(Send("register-node", reg.SerializeAsString(), "key-b")));
  EXPECT_EQ(service_->counters().unauthenticated, 6u);
  EXPECT_EQ(service_->counters().train_sent, 0u);  // nothing was pulled meanwhile
  // The right signer, 290 s old: a's message.
  const NodeAuthHeaders ok = signer_.Sign("key-a", wall_ - std::chrono::seconds(290));
  HttpReply r = service_->Handle("POST", "/v1/fleet/pull-messages", body, ok);
  ASSERT_EQ(r.status, 200) << r.body;
  PullMessagesResponse resp;
  ASSERT_TRUE(resp.ParseFromString(r.body));
  EXPECT_EQ(resp.messages_list_size(), 1);
  EXPECT_EQ(Pull(b).messages_list_size(), 1);
}

TEST(NodeAuth, TimestampsAndIdentities) {
  EXPECT_DOUBLE_EQ(ParseIsoTimestamp("2026-11-29T19:53:13.250000+00:00").value(), 1795981993.25);
  EXPECT_DOUBLE_EQ(ParseIsoTimestamp("2026-11-29T19:53:13Z").value(), 1795981993.0);
  EXPECT_DOUBLE_EQ(ParseIsoTimestamp("2026-11-30T01:23:13+05:30").value(), 1795981993.0);
  EXPECT_EQ(ParseIsoTimestamp("2026-11-29T19:53:13").status().message(),
            "flwr-timestamp: '2026-11-29T19:53:13' is not an ISO 8601 date-time with a UTC "
            "offset");
  EXPECT_FALSE(ParseIsoTimestamp("2026-13-29T19:53:13Z").ok());
  PullMessagesRequest pull;
  pull.mutable_node()->set_node_id(77);
  pull.add_message_ids("m");
  EXPECT_EQ(IdentityOf(pull.SerializeAsString()).value().node_id, 77u);
  DeactivateNodeRequest off;
  off.set_node_id(78);
  EXPECT_EQ(IdentityOf(off.SerializeAsString()).value().node_id, 78u);
  RegisterNodeFleetRequest reg;
  reg.set_public_key("PEM bytes");
  EXPECT_EQ(IdentityOf(reg.SerializeAsString()).value().public_key, "PEM bytes");
  EXPECT_FALSE(IdentityOf("\xff\xff\xff").ok());
}

}  // namespace
}  // namespace shoal::flower
