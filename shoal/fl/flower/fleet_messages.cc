// FleetService: the messages and objects (PullMessages, PushMessages, PullObject, PushObject,
// ConfirmMessageReceived) and the ServerApp's part: which message a node gets next, and what a
// complete reply becomes (an update of the job, or an evaluation report).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "shoal/fl/flower/fleet_errors.h"
#include "shoal/fl/flower/fleet_service.h"
#include "shoal/fl/flower/objects.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/fl/wire/update_format.h"

namespace shoal::flower {

namespace {

constexpr double kDefaultTtl = 43200;      // Flower's DEFAULT_TTL (12 h)
constexpr uint64_t kSuperLinkNodeId = 1;   // SUPERLINK_NODE_ID
constexpr uint64_t kReconnectSeconds = 5;  // what the SuperLink's PushMessages answers

std::string SessionId() {
  static thread_local std::mt19937_64 gen(std::random_device{}());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(32, '0');
  for (char& c : s) c = kHex[gen() & 15];
  return s;
}

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

ConfigValue ToConfigValue(const FlFlowerValue& v) {
  switch (v.kind) {
    case 'i':
      return static_cast<int64_t>(std::stoll(v.text));
    case 'f':
      return std::stod(v.text);
    case 'b':
      return v.text == "true";
    default:
      return v.text;
  }
}

void CollectIds(const ObjectTree& t, std::vector<std::string>& out) {
  for (const auto& c : t.children()) CollectIds(c, out);
  out.push_back(t.object_id());
}

std::optional<double> Metric(const ReplyContent& r, std::initializer_list<std::string_view> keys) {
  for (std::string_view k : keys) {
    auto it = r.metrics.find(k);
    if (it != r.metrics.end()) return it->second;
  }
  return std::nullopt;
}

}  // namespace

Result<BuiltObject> FleetService::ModelRecord(Job& job, uint64_t version) {
  auto it = job.versions.find(version);
  if (it != job.versions.end()) return it->second.first;
  auto blob = hooks_.jobs->Model(job.name, version);
  if (!blob.ok()) return blob.status();
  const std::string& bytes = *blob->bytes;
  auto m = model::ModelFromSafetensors(
      std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
  if (!m.ok()) return m.status();
  ObjectMap fresh;
  BuiltObject rec = BuildArrayRecord(*m, fresh);
  std::set<std::string> ids;
  for (auto& [id, content] : fresh) {
    ids.insert(id);
    job.objects.try_emplace(id, std::move(content));
  }
  job.model = m->spec;
  job.versions[version] = {rec, ids};
  // Older versions than the one before this go, with the objects no kept version shares.
  while (job.versions.size() > 2) {
    auto old = job.versions.begin();
    for (const std::string& id : old->second.second) {
      bool shared = false;
      for (auto v = std::next(old); v != job.versions.end() && !shared; ++v) {
        shared = v->second.second.count(id) != 0;
      }
      if (!shared) job.objects.erase(id);
    }
    job.versions.erase(old);
  }
  return rec;
}

Result<const FleetService::Instruction*> FleetService::NextInstruction(
    std::unique_lock<std::mutex>& lock, Node& node_in) {
  const uint64_t node_id = node_in.id;
  const std::string job_name = node_in.job, client = node_in.client_id, token = node_in.token;
  // The coordinator's calls take its job lock: not under ours.
  lock.unlock();
  auto task = hooks_.jobs->Task(job_name, client, token);
  auto latest = hooks_.jobs->Model(job_name, std::nullopt);
  lock.lock();
  auto nit = nodes_.find(node_id);
  if (nit == nodes_.end()) return static_cast<const Instruction*>(nullptr);
  Node& node = nit->second;
  if (!task.ok()) return task.status();
  auto jobp = JobLocked(job_name);
  if (!jobp.ok()) return jobp.status();
  Job& job = **jobp;
  std::string type;
  uint64_t version = 0;
  const uint64_t committed = latest.ok() ? latest->version : 0;
  if (job.spec.flower.evaluate && committed >= 1 && node.evaluated_version < committed) {
    // flwr's FedAvg evaluates each round's new global model before the next round trains.
    type = "evaluate";
    version = committed;
  } else if (task->kind == TaskResult::Kind::kTrain &&
             node.trained_version != task->model_version) {
    type = "train";
    version = task->model_version;
  } else {
    return static_cast<const Instruction*>(nullptr);
  }
  auto arrays = ModelRecord(job, version);
  if (!arrays.ok()) return arrays.status();
  ConfigItems config;
  if (type == "train") {
    for (const auto& [k, v] : job.spec.flower.train_config)
      config.emplace_back(k, ToConfigValue(v));
    if (job.spec.flower.train_config.empty()) config.emplace_back("lr", job.spec.learning_rate);
  }
  // FedAvg's server round: round r trains from version r - 1 and evaluates version r.
  const int64_t round = static_cast<int64_t>(type == "train" ? version + 1 : version);
  config.emplace_back("server-round", round);
  ObjectMap fresh;
  BuiltObject cfg = BuildConfigRecord(config, fresh);
  BuiltObject content = BuildRecordDict({{"arrays", *arrays}, {"config", cfg}}, fresh);
  Instruction ins;
  ins.job = job.name;
  ins.node = node.id;
  ins.type = type;
  ins.version = version;
  Metadata& md = ins.metadata;
  md.set_run_id(job.run_id);
  md.set_src_node_id(kSuperLinkNodeId);
  md.set_dst_node_id(node.id);
  md.set_group_id(std::to_string(round));
  md.set_ttl(kDefaultTtl);
  md.set_message_type(type);
  md.set_created_at(UnixSeconds());
  BuiltObject msg = BuildMessage(md, content, fresh);
  for (auto& [id, c] : fresh) job.objects.try_emplace(id, std::move(c));
  ins.tree = msg.tree;
  if (type == "train") {
    node.trained_version = version;
    ++counters_.train_sent;
  } else {
    node.evaluated_version = version;
    ++counters_.evaluate_sent;
  }
  auto [it, _] = instructions_.insert_or_assign(msg.id, std::move(ins));
  return &it->second;
}

HttpReply FleetService::PullMessages(std::string_view body) {
  PullMessagesRequest req;
  if (!Parse(req, body)) return InvalidPayload();
  std::unique_lock lock(mu_);
  PullMessagesResponse resp;
  auto it = nodes_.find(req.node().node_id());
  if (it == nodes_.end()) return Proto(resp);  // Flower: nothing for an unknown node
  auto next = NextInstruction(lock, it->second);
  if (!next.ok()) {
    spdlog::warn("flower: node {}: no message: {}", req.node().node_id(), next.status().ToString());
    return Proto(resp);
  }
  if (*next != nullptr) {
    Message* m = resp.add_messages_list();
    *m->mutable_metadata() = (*next)->metadata;
    m->mutable_content();  // empty, as Flower's remove_content_from_message leaves it
    *resp.add_message_object_trees() = (*next)->tree;
  }
  return Proto(resp);
}

HttpReply FleetService::PullObject(std::string_view body) {
  PullObjectRequest req;
  if (!Parse(req, body)) return InvalidPayload();
  std::lock_guard lock(mu_);
  PullObjectResponse resp;
  auto n = nodes_.find(req.node().node_id());
  auto job = n == nodes_.end() ? jobs_.end() : jobs_.find(n->second.job);
  // Only the node's own job's objects: another job's id (or run) is not found.
  if (job == jobs_.end() || job->second.run_id != req.run_id()) return Proto(resp);
  auto obj = job->second.objects.find(req.object_id());
  if (obj == job->second.objects.end()) return Proto(resp);
  resp.set_object_found(true);
  resp.set_object_available(true);
  resp.set_object_content(*obj->second);
  return Proto(resp);
}

HttpReply FleetService::ConfirmReceived(std::string_view body) {
  ConfirmMessageReceivedRequest req;
  if (!Parse(req, body)) return InvalidPayload();
  std::lock_guard lock(mu_);
  auto ins = instructions_.find(req.message_object_id());
  if (ins != instructions_.end() && ins->second.node == req.node().node_id()) {
    // The message object goes (its content is shared with the round's other messages).
    auto job = jobs_.find(ins->second.job);
    if (job != jobs_.end()) job->second.objects.erase(req.message_object_id());
  }
  return Proto(ConfirmMessageReceivedResponse());
}

HttpReply FleetService::PushMessages(std::string_view body) {
  PushMessagesRequest req;
  if (!Parse(req, body)) return InvalidPayload();
  if (req.messages_list_size() != 1 || req.message_object_trees_size() != 1) {
    return InvalidPayload();
  }
  const Metadata& md = req.messages_list(0).metadata();
  const ObjectTree& tree = req.message_object_trees(0);
  PushMessagesResponse resp;
  resp.mutable_reconnect()->set_reconnect(kReconnectSeconds);
  (*resp.mutable_results())[md.message_id()] = 0;
  resp.set_session_id(SessionId());
  std::unique_lock lock(mu_);
  auto n = nodes_.find(req.node().node_id());
  auto ins = instructions_.find(md.reply_to_message_id());
  auto drop = [&](const char* why) {
    ++counters_.replies_dropped;
    spdlog::warn("flower: reply {} from node {} dropped: {}", md.message_id().substr(0, 12),
                 req.node().node_id(), why);
    return Proto(resp);  // as the SuperLink: answered, nothing asked, nothing stored
  };
  if (n == nodes_.end()) return drop("unknown node");
  if (ins == instructions_.end()) return drop("it replies to no message of this node's job");
  if (ins->second.node != n->first || md.src_node_id() != n->first) {
    return drop("it replies to another node's message");
  }
  if (ins->second.replied) return drop("that message has its reply already");
  if (md.run_id() != ins->second.metadata.run_id()) return drop("wrong run");
  if (tree.object_id() != md.message_id() || !IsObjectId(md.message_id())) {
    return drop("its object tree is not the message's");
  }
  auto job = jobs_.find(ins->second.job);
  if (job == jobs_.end()) return drop("its job is gone");
  ins->second.replied = true;
  Session s;
  s.job = ins->second.job;
  s.node = n->first;
  s.instruction = ins->first;
  s.reply_id = md.message_id();
  s.runtime = req.clientapp_runtime_list_size() > 0 ? req.clientapp_runtime_list(0) : 0;
  s.touched = Now();
  std::vector<std::string> ids;
  CollectIds(tree, ids);
  for (const std::string& id : ids) {
    if (!IsObjectId(id)) return drop("an object id is not a SHA-256");
    auto known = job->second.objects.find(id);
    if (known != job->second.objects.end()) {
      s.objects.try_emplace(id, known->second);
    } else if (s.pending.insert(id).second) {
      resp.add_objects_to_push(id);
    }
  }
  if (s.pending.empty()) {
    // Every object is known already: the reply is whole now.
    FillSession(s, job->second);
    lock.unlock();
    Complete(std::move(s));
    return Proto(resp);
  }
  sessions_[resp.session_id()] = std::move(s);
  return Proto(resp);
}

HttpReply FleetService::PushObject(std::string_view body) {
  PushObjectRequest req;
  if (!Parse(req, body)) return InvalidPayload();
  PushObjectResponse resp;
  std::unique_lock lock(mu_);
  auto s = sessions_.find(req.session_id());
  if (req.session_id().empty()) {
    // Flower: a legacy SuperNode without a session id: the session waiting for the object.
    s = std::find_if(sessions_.begin(), sessions_.end(),
                     [&](const auto& kv) { return kv.second.pending.count(req.object_id()) != 0; });
  }
  const bool ok = s != sessions_.end() && s->second.node == req.node().node_id() &&
                  s->second.pending.count(req.object_id()) != 0 &&
                  ObjectId(req.object_content()) == req.object_id() &&
                  ParseObject(req.object_content()).ok();
  auto job = ok ? jobs_.find(s->second.job) : jobs_.end();
  if (!ok || job == jobs_.end() || job->second.run_id != req.run_id()) {
    ++counters_.objects_refused;
    return Proto(resp);  // stored: false
  }
  s->second.pending.erase(std::string(req.object_id()));
  s->second.touched = Now();
  s->second.objects.try_emplace(req.object_id(),
                                std::make_shared<const std::string>(req.object_content()));
  resp.set_stored(true);
  if (s->second.pending.empty()) {
    Session done = std::move(s->second);
    sessions_.erase(s);
    if (FillSession(done, job->second)) {
      lock.unlock();
      Complete(std::move(done));
    }
  }
  return Proto(resp);
}

bool FleetService::FillSession(Session& s, const Job& job) {
  auto ins = instructions_.find(s.instruction);
  auto node = nodes_.find(s.node);
  if (ins == instructions_.end() || node == nodes_.end()) return false;
  s.type = ins->second.type;
  s.version = ins->second.version;
  s.client_id = node->second.client_id;
  s.token = node->second.token;
  s.model = job.model;
  instructions_.erase(ins);
  return true;
}

void FleetService::Complete(Session s) {
  auto reply = ReadReply(s.reply_id, s.objects);
  auto refuse = [&](const std::string& why) {
    std::lock_guard lock(mu_);
    ++counters_.replies_refused;
    spdlog::warn("flower: job {}: the {} reply of node {} (version {}) is not used: {}", s.job,
                 s.type, s.node, s.version, why);
  };
  if (!reply.ok()) return refuse(reply.status().message());
  if (reply->has_error) {
    return refuse("the ClientApp answered an error (" + std::to_string(reply->error_code) +
                  "): " + reply->error_reason);
  }
  const auto samples = Metric(*reply, {"num-examples"});
  if (s.type == "evaluate") {
    EvalReport r;
    r.client_id = s.client_id;
    r.token = s.token;
    r.version = s.version;
    r.accuracy = Metric(*reply, {"eval_acc", "accuracy", "eval_accuracy", "acc"}).value_or(0);
    r.loss = Metric(*reply, {"eval_loss", "loss"}).value_or(0);
    r.samples = static_cast<uint64_t>(samples.value_or(0));
    if (Status st = hooks_.jobs->Evaluate(s.job, r); !st.ok()) return refuse(st.message());
    std::lock_guard lock(mu_);
    ++counters_.evaluations;
    return;
  }
  if (!reply->has_arrays) return refuse("no ArrayRecord");
  if (!samples || *samples <= 0) return refuse("no positive 'num-examples' metric (its weight)");
  // The reply's arrays in the job's tensor order; each copied once into aligned floats, then
  // into the update body, which the gateway reads into the job's pool.
  std::vector<std::vector<float>> values(s.model.size());
  std::vector<model::NamedTensor> tensors;
  for (size_t i = 0; i < s.model.size(); ++i) {
    const auto& t = s.model.tensor(i);
    auto a = reply->arrays.find(t.name);
    if (a == reply->arrays.end()) return refuse("no array '" + t.name + "'");
    if (a->second.shape != t.shape) {
      return refuse("array '" + t.name + "' has shape " + model::ShapeString(a->second.shape) +
                    ", the model's is " + model::ShapeString(t.shape));
    }
    values[i].resize(t.numel());
    std::memcpy(values[i].data(), a->second.data.data(), a->second.data.size());
    tensors.push_back({t.name, t.shape, values[i]});
  }
  if (reply->arrays.size() != s.model.size()) return refuse("arrays the model does not have");
  model::UpdateMeta meta;
  meta.job = s.job;
  meta.client_id = s.client_id;
  meta.token = s.token;
  meta.base_version = s.version;
  meta.num_samples = static_cast<uint64_t>(*samples);
  meta.train_seconds = s.runtime;
  auto body = model::EncodeUpdate(meta, tensors, model::DType::kF32);
  if (!body.ok()) return refuse(body.status().message());
  Status st = hooks_.post_update(
      s.job, std::string_view(reinterpret_cast<const char*>(body->data()), body->size()));
  if (!st.ok()) return refuse("the job refused the update: " + st.ToString());
  std::lock_guard lock(mu_);
  ++counters_.replies_folded;
}

}  // namespace shoal::flower
