// FleetService against a fake job: a node's whole round (register, activate, pull the train
// message and its objects, push the reply) folds one update with the reply's arrays and weight,
// and each bad request gets the answer Flower's SuperLink gives: malformed protobuf, an unknown
// route or method, a reused public key, a bad heartbeat interval, an unknown object id, an object
// whose content is not its id, a reply to another node's message, an oversize array.
#include "fleet_fixture.h"

namespace shoal::flower {
namespace {

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
