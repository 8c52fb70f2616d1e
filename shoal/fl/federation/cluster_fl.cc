#include "shoal/fl/federation/cluster_fl.h"

#include <nlohmann/json.hpp>

#include "shoal/common/log.h"
#include "shoal/common/stop_signal.h"
#include "shoal/fl/coordinator/fl_members.h"
#include "shoal/security/auth/role.h"

namespace shoal::cluster {

namespace {

using Json = nlohmann::json;

constexpr double kAdmitTimeoutS = 5;     // one small round trip; a silent top fails the update
constexpr double kPartialTimeoutS = 60;  // a partial sum is float32[params]; per read/write
constexpr double kReportTimeoutS = 5;
constexpr double kProbeTimeoutS = 5;

FlPeerReply Error(const Status& st) {
  FlPeerReply r;
  r.status = HttpStatusFor(st.code());
  r.json = Json{{"code", static_cast<int>(st.code())}, {"message", st.message()}}.dump();
  return r;
}

FlPeerReply Ok(Json j) {
  FlPeerReply r;
  r.json = j.dump();
  return r;
}

// The Status a non-200 reply carries (its code travels as StatusCode's number).
Status ReplyStatus(const FlPeerClient::Response& r, const std::string& who) {
  auto j = Json::parse(r.json, nullptr, false);
  const std::string msg =
      j.is_object() ? j.value("message", std::string("error")) : std::string("error");
  const int code = j.is_object() ? j.value("code", -1) : -1;
  if (code > 0 && code <= static_cast<int>(StatusCode::kInternal)) {
    return Status(static_cast<StatusCode>(code), msg);
  }
  return Unavailable(who + " answered " + std::to_string(r.status) + ": " + msg);
}

}  // namespace

ClusterFl::ClusterFl(const NodeConfig& config, FlCoordinator& fl, auth::TokenStore& tokens,
                     NodeAgent& agent)
    : config_(config),
      fl_(fl),
      tokens_(tokens),
      agent_(agent),
      server_([this](FlPeerCall c, const std::string& j,
                     std::span<const std::byte> p) { return Handle(c, j, p); },
              [this](const std::string& ip) {
                {
                  std::lock_guard lock(nodes_mu_);
                  if (peer_ips_.count(ip) != 0) return true;
                }
                RefreshNodes();  // a node that joined since the last look
                std::lock_guard lock(nodes_mu_);
                return peer_ips_.count(ip) != 0;
              }) {}

ClusterFl::~ClusterFl() { Stop(); }

bool ClusterFl::LoadSecret() {
  auto secret = LoadPeerSecret(agent_.etcd(), agent_.keys().PeerSecret());
  if (!secret.ok()) {
    if (!secret_warned_) {
      spdlog::warn("cluster: FL peer links refuse every call until this node has {} (retried)",
                   secret.status().message());
    }
    secret_warned_ = true;
    return false;
  }
  if (secret_warned_) spdlog::info("cluster: the cluster's peer secret read from etcd");
  server_.SetSecret(*secret);
  client_.SetIdentity(config_.node_name, std::move(*secret));
  return true;
}

Status ClusterFl::Start() {
  have_secret_ = LoadSecret();
  RefreshNodes();
  // A link's proven node must be the node registered at the caller's address.
  server_.SetNodeCheck([this](const std::string& node, const std::string& ip) {
    auto host_of = [this](const std::string& n) {
      const std::string peer = PeerOf(n);
      return peer.substr(0, peer.rfind(':'));
    };
    if (host_of(node) == ip) return true;
    RefreshNodes();  // a node that joined or moved since the last look
    return host_of(node) == ip;
  });
  SHOAL_RETURN_IF_ERROR(server_.Start(config_.listen_host, config_.fl_peer_port));
  {
    std::unique_lock g(gate_->mu);
    gate_->self = this;
  }
  fl_.SetPartialFetch([gate = gate_](const std::string& node, const std::string& job,
                                     uint64_t round, const std::vector<uint64_t>& tickets,
                                     std::vector<float>* sum) -> Status {
    std::shared_lock g(gate->mu);
    if (gate->self == nullptr) return Unavailable("shoald is stopping");
    return gate->self->FetchPartial(node, job, round, tickets, sum);
  });
  fl_.SetAdmissionProbe(
      [gate = gate_](const std::string& node, const std::string& job,
                     const std::vector<uint64_t>& keys) -> Result<std::vector<uint64_t>> {
        std::shared_lock g(gate->mu);
        if (gate->self == nullptr) return Unavailable("shoald is stopping");
        return gate->self->Probe(node, job, keys);
      });
  fl_.SetTopLink(this);
  reporter_ = std::thread([this] { ReportLoop(); });
  watcher_ = std::thread([this] { WatchLoop(); });
  spdlog::info("cluster: FL peer links on port {} ({})", server_.port(),
               config_.fl_hierarchy ? "updates for jobs whose top is elsewhere are folded here"
                                    : "fl_hierarchy false: such updates go to the top whole");
  return {};
}

void ClusterFl::Stop() {
  if (!SignalStop(report_mu_, stopping_, report_cv_)) return;
  if (watcher_.joinable()) watcher_.join();
  if (reporter_.joinable()) reporter_.join();
  server_.Stop();
  {
    std::unique_lock g(gate_->mu);  // waits for the calls in flight
    gate_->self = nullptr;
  }
  fl_.SetTopLink(nullptr);
}

std::string ClusterFl::MetricsText() const {
  return "# HELP shoal_fl_peer_refused_total FL peer links refused by the handshake (no or a wrong "
         "proof of the cluster's peer secret, or a node speaking from another's address).\n"
         "# TYPE shoal_fl_peer_refused_total counter\nshoal_fl_peer_refused_total " +
         std::to_string(server_.refused()) + "\n";
}

void ClusterFl::RefreshNodes() {
  std::map<std::string, std::string> peers;
  std::set<std::string> ips;
  for (const NodeEntry& n : agent_.Nodes()) {
    const std::string& a = n.record.address;
    const std::string host = a.substr(0, a.rfind(':'));
    peers[n.record.name] = host + ":" + std::to_string(config_.fl_peer_port);
    ips.insert(host);
  }
  std::lock_guard lock(nodes_mu_);
  peers_ = std::move(peers);
  peer_ips_ = std::move(ips);
}

std::string ClusterFl::PeerOf(const std::string& node) {
  std::lock_guard lock(nodes_mu_);
  auto it = peers_.find(node);
  return it == peers_.end() ? std::string() : it->second;
}

// ---- this node as a member ------------------------------------------------------------------

Result<FlTopLink::Admission> ClusterFl::Admit(const std::string& top, const std::string& job,
                                              std::string_view bearer,
                                              std::span<const std::byte> head, uint64_t key) {
  const std::string peer = PeerOf(top);
  if (peer.empty()) return Unavailable("job '" + job + "': its top, node " + top + ", is gone");
  const std::string json = Json{
      {"job", job},
      {"node", config_.node_name},
      {"bearer", std::string(bearer)},
      {"key", key}}.dump();
  auto r = client_.Call(peer, FlPeerCall::kAdmit, json, head, kAdmitTimeoutS);
  if (!r.ok()) {
    return Unavailable("job '" + job + "': admitting the update at its top, node " + top + ": " +
                       r.status().message());
  }
  if (r->status != 200) return ReplyStatus(*r, "node " + top);
  auto j = Json::parse(r->json, nullptr, false);
  if (!j.is_object() || !j.contains("ticket"))
    return Unavailable("node " + top + ": a bad admit reply");
  return Admission{j.value("ticket", uint64_t{0}), j.value("round", uint64_t{0}),
                   j.value("coefficient", 0.0), j.value("durable_round", uint64_t{0})};
}

void ClusterFl::Report(const std::string& top, const std::string& job, uint64_t ticket, bool ok) {
  {
    std::lock_guard lock(report_mu_);
    reports_.push_back({top, job, ticket, ok});
  }
  report_cv_.notify_all();  // the watcher waits on it too
}

void ClusterFl::ReportLoop() {
  for (;;) {
    std::deque<PendingReport> batch;
    {
      std::unique_lock lock(report_mu_);
      report_cv_.wait(lock, [this] { return stopping_ || !reports_.empty(); });
      if (stopping_) return;
      batch.swap(reports_);
    }
    while (!batch.empty()) {
      // The leading run of reports for one top, in one message.
      const std::string top = batch.front().top;
      Json list = Json::array();
      size_t n = 0;
      while (n < batch.size() && batch[n].top == top) {
        list.push_back({{"job", batch[n].job}, {"ticket", batch[n].ticket}, {"ok", batch[n].ok}});
        ++n;
      }
      const std::string peer = PeerOf(top);
      Status st = peer.empty() ? NotFound("node " + top + " is gone") : Status::Ok();
      if (st.ok()) {
        auto r = client_.Call(peer, FlPeerCall::kReport, Json{{"reports", list}}.dump(), {},
                              kReportTimeoutS);
        st = !r.ok()            ? r.status()
             : r->status != 200 ? ReplyStatus(*r, "node " + top)
                                : Status::Ok();
      }
      if (st.ok() || st.code() == StatusCode::kNotFound) {
        if (!st.ok()) {
          spdlog::warn(
              "fl: {} report(s) for node {} dropped: {} (its updates are sent again "
              "by their clients)",
              n, top, st.message());
        }
        batch.erase(batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(n));
        continue;
      }
      spdlog::warn("fl: reporting {} update(s) to node {}: {}; retrying", n, top, st.message());
      std::unique_lock lock(report_mu_);
      if (report_cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stopping_; })) {
        return;
      }
    }
  }
}

// ---- this node as a top ---------------------------------------------------------------------

Status ClusterFl::FetchPartial(const std::string& node, const std::string& job, uint64_t round,
                               const std::vector<uint64_t>& tickets, std::vector<float>* sum) {
  const std::string peer = PeerOf(node);
  if (peer.empty()) return Unavailable("node " + node + " is not live");
  const std::string json = Json{{"job", job}, {"round", round}, {"tickets", tickets}}.dump();
  auto r = client_.Call(peer, FlPeerCall::kPartial, json, {}, kPartialTimeoutS,
                        [sum](uint64_t len) -> std::span<std::byte> {
                          if (len % sizeof(float) != 0) return {};
                          sum->resize(len / sizeof(float));
                          return std::as_writable_bytes(std::span<float>(*sum));
                        });
  if (!r.ok()) return r.status();
  if (r->status != 200) return ReplyStatus(*r, "node " + node);
  return {};
}

Result<std::vector<uint64_t>> ClusterFl::Probe(const std::string& node, const std::string& job,
                                               const std::vector<uint64_t>& keys) {
  const std::string peer = PeerOf(node);
  if (peer.empty()) return Unavailable("node " + node + " is not live");
  auto r = client_.Call(peer, FlPeerCall::kProbe, Json{{"job", job}, {"keys", keys}}.dump(), {},
                        kProbeTimeoutS);
  if (!r.ok()) return r.status();
  if (r->status != 200) return ReplyStatus(*r, "node " + node);
  auto j = Json::parse(r->json, nullptr, false);
  if (!j.is_object() || !j.contains("unknown") || !j["unknown"].is_array()) {
    return Unavailable("node " + node + ": a bad probe reply");
  }
  std::vector<uint64_t> out;
  for (const auto& k : j["unknown"]) {
    if (k.is_number_unsigned()) out.push_back(k.get<uint64_t>());
  }
  return out;
}

FlPeerReply ClusterFl::Handle(FlPeerCall call, const std::string& text,
                              std::span<const std::byte> payload) {
  auto j = Json::parse(text, nullptr, false);
  if (!j.is_object()) return Error(InvalidArgument("fl peer: the request is not a JSON object"));
  const std::string job = j.value("job", std::string());
  switch (call) {
    case FlPeerCall::kSpec: {
      auto spec = fl_.Spec(job);
      if (!spec.ok()) return Error(spec.status());
      if (!fl_.FoldsElsewhere(job)) {
        return Error(AlreadyExists("job '" + job + "' folds every update at its top"));
      }
      return Ok({{"spec", FlJobSpecJson(*spec)}});
    }
    case FlPeerCall::kAdmit: {
      // The client's bearer token, as the gateway would check it here (the top holds the
      // job's tokens), then the header.
      const std::string bearer = j.value("bearer", std::string());
      auto who = tokens_.Authenticate(bearer);
      if (!who.ok()) return Error(who.status());
      auto ns = fl_.JobNamespace(job);
      if (!ns.ok()) return Error(ns.status());
      if (Status st = auth::Authorize(*who, auth::Action::kFlClient, *ns, job); !st.ok()) {
        return Error(st);
      }
      auto a = fl_.AdmitRemote(job, j.value("node", std::string()), payload,
                               j.value("key", uint64_t{0}));
      if (!a.ok()) return Error(a.status());
      return Ok({{"ticket", a->ticket},
                 {"round", a->round},
                 {"coefficient", a->coefficient},
                 {"durable_round", a->durable_round}});
    }
    case FlPeerCall::kReport: {
      if (!j.contains("reports") || !j["reports"].is_array()) {
        return Error(InvalidArgument("fl peer: reports: missing"));
      }
      for (const auto& r : j["reports"]) {
        fl_.CompletedRemote(r.value("job", std::string()), r.value("ticket", uint64_t{0}),
                            r.value("ok", false));
      }
      return Ok(Json::object());
    }
    case FlPeerCall::kProbe: {
      std::vector<uint64_t> keys;
      if (j.contains("keys") && j["keys"].is_array()) keys = j["keys"].get<std::vector<uint64_t>>();
      auto unknown = fl_.members().Unknown(job, keys);
      if (!unknown.ok()) return Error(unknown.status());
      return Ok({{"unknown", *unknown}});
    }
    case FlPeerCall::kPartial: {
      std::vector<uint64_t> tickets;
      if (j.contains("tickets") && j["tickets"].is_array()) {
        tickets = j["tickets"].get<std::vector<uint64_t>>();
      }
      const auto t0 = std::chrono::steady_clock::now();
      auto p = fl_.members().PartialOf(job, j.value("round", uint64_t{0}), tickets);
      if (!p.ok()) return Error(p.status());
      spdlog::info(
          "fl job {}: round {}: partial sum of {} update(s) for the top ({:.1f} ms to "
          "ready it)",
          job, j.value("round", uint64_t{0}), p->updates,
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      FlPeerReply r = Ok({{"updates", p->updates}});
      r.payload = std::as_bytes(p->sum);
      r.keep = std::move(p->keep);
      return r;
    }
  }
  return Error(InvalidArgument("fl peer: unknown call " + std::to_string(static_cast<int>(call))));
}

// ---- which jobs this node folds, and which nodes are lost -----------------------------------

void ClusterFl::WatchLoop() {
  std::set<std::string> live_before;
  bool first = true;
  std::map<std::string, std::string> central;  // job -> the top that folds all its updates
  std::set<std::string> tried_takeover;        // "job@top": one try (a store not shared fails)
  for (;;) {
    {
      std::unique_lock lock(report_mu_);
      if (report_cv_.wait_for(lock, std::chrono::milliseconds(first ? 0 : 250),
                              [this] { return stopping_; })) {
        return;
      }
    }
    if (!have_secret_) have_secret_ = LoadSecret();
    RefreshNodes();
    std::set<std::string> live;
    std::map<std::string, std::string> remote_jobs;  // job -> the node that is its top
    for (const NodeEntry& n : agent_.Nodes()) {
      live.insert(n.record.name);
      if (n.record.name == config_.node_name) continue;
      for (const auto& job : n.record.fl_jobs) remote_jobs[job] = n.record.name;
    }
    // A node whose lease ran out: what it held for this node's jobs and never sent is lost.
    if (!first) {
      for (const auto& name : live_before) {
        if (live.count(name) == 0 && name != config_.node_name) {
          spdlog::warn("cluster: node {} is gone (its lease expired or it left)", name);
          fl_.NodeLost(name);
        }
      }
    }
    live_before = std::move(live);
    first = false;
    // A job whose top is gone, with a shared checkpoint store: the first live node by name
    // takes it over (every node decides alike from the same directory); the others fold for
    // it once its record lists the job.
    if (!config_.checkpoint_dir.empty() && !live_before.empty() &&
        *live_before.begin() == config_.node_name) {
      for (const auto& [job, top] : fl_.members().Tops()) {
        if (live_before.count(top) != 0 || remote_jobs.count(job) != 0) continue;
        if (managed_ && managed_(job)) continue;  // the controller moves it
        if (!tried_takeover.insert(job + "@" + top).second) continue;
        if (Status st = fl_.TakeOver(job); !st.ok()) {
          spdlog::error("fl job {}: taking it over from node {}: {}", job, top, st.ToString());
        }
      }
    }
    const auto tops = fl_.members().Tops();
    for (const auto& [job, top] : tops) {
      auto it = remote_jobs.find(job);
      if (it != remote_jobs.end() && it->second == top) continue;
      // Its top is gone (or only its lease blinked): keep the updates this node acknowledged
      // for it; a top that comes back asks for them. Stop only when a live top dropped the job.
      if (it == remote_jobs.end() && live_before.count(top) == 0) continue;
      fl_.StopFolding(job);
    }
    if (!config_.fl_hierarchy) continue;
    for (const auto& [job, top] : remote_jobs) {
      auto t = tops.find(job);
      if (t != tops.end() && t->second == top) continue;
      auto c = central.find(job);
      if (c != central.end() && c->second == top) continue;
      if (fl_.Spec(job).ok()) continue;  // this node is its top (the records lag)
      const std::string peer = PeerOf(top);
      if (peer.empty()) continue;
      auto r = client_.Call(peer, FlPeerCall::kSpec, Json{{"job", job}}.dump(), {}, 2.0);
      if (!r.ok()) continue;  // tried again next time
      if (r->status == 409) {
        spdlog::info(
            "fl job {}: its top, node {}, folds every update itself: updates entering "
            "here are forwarded there",
            job, top);
        central[job] = top;
        continue;
      }
      if (r->status != 200) continue;
      auto j = Json::parse(r->json, nullptr, false);
      auto spec = j.is_object() ? FlJobSpecFromJson(j.value("spec", std::string()))
                                : Result<FlJobSpec>(InvalidArgument("not JSON"));
      if (!spec.ok()) {
        spdlog::error("fl job {}: the spec from node {}: {}", job, top, spec.status().ToString());
        continue;
      }
      if (Status st = fl_.FoldFor(*spec, top); !st.ok()) {
        spdlog::error("fl job {}: folding for node {}: {}", job, top, st.ToString());
      }
    }
  }
}

}  // namespace shoal::cluster
