// Flower 1.42's Fleet API (its REST transport: POST /v1/fleet/<rpc>, protobuf bodies, errors as
// {"code", "detail"} JSON) served for the FL jobs that name a Flower app (spec.flower). Shoal
// plays the SuperLink and the ServerApp: a SuperNode registers and becomes a client of the job;
// each round it pulls a `train` message carrying the job's global model (an ArrayRecord) and a
// ConfigRecord, as flwr's FedAvg sends them, and its reply's arrays become an ordinary update of
// the job (folded by the job's leaves in the pool, weighted by the reply's `num-examples`); after
// each commit an `evaluate` message's metrics become the job's evaluation reports.
//
// Runs on the gateway's control threads (never on a data-path loop). The SuperNode-facing
// answers follow Flower's SuperLink: an unknown object is object_found false, an object whose
// content does not hash to its id is stored false, a reply to another node's message is
// answered as the SuperLink answers it (no objects asked) and dropped.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "shoal/common/status.h"
#include "shoal/fl/flower/fab.h"
#include "shoal/fl/flower/node_auth.h"
#include "shoal/fl/flower/records.h"
#include "shoal/interfaces/fljob_spec.h"
#include "shoal/interfaces/http_reply.h"
#include "shoal/interfaces/job_service.h"

namespace shoal::flower {

// Counters since start (tests and /metrics read them).
struct FleetCounters {
  uint64_t nodes_registered = 0;
  uint64_t train_sent = 0, evaluate_sent = 0;
  uint64_t replies_folded = 0;   // train replies whose arrays went to the job's leaves
  uint64_t replies_refused = 0;  // replies that could not be used (shape, dtype, no weight)
  uint64_t replies_dropped = 0;  // pushes Flower's SuperLink would not store (wrong node, ...)
  uint64_t evaluations = 0;      // evaluate replies reported to the job
  uint64_t objects_refused = 0;  // PushObject stored false
  // Push sessions let go with their objects (no object for kSessionIdleSeconds), and messages
  // an offline node never answered (past its heartbeats' patience) let go.
  uint64_t sessions_expired = 0;
  uint64_t messages_expired = 0;
  uint64_t unauthenticated = 0;  // calls answered 401 (node_auth.h)
};

// A push session that gets no object for this long is let go with the objects it holds (the
// node died or restarted mid-reply); its message may be answered again.
inline constexpr double kSessionIdleSeconds = 120;

class FleetService {
 public:
  struct Hooks {
    JobService* jobs = nullptr;
    // The job's spec (kNotFound when it is gone).
    std::function<Result<FlJobSpec>(const std::string& job)> spec;
    // Folds an SHU1 update body into the job as its clients' updates are folded (the gateway's
    // update route: the body lands in the job's pool and goes to a leaf).
    std::function<Status(const std::string& job, std::string_view body)> post_update;
    // The clock (tests move it); std::chrono::steady_clock::now when empty.
    std::function<std::chrono::steady_clock::time_point()> now;
    // The wall clock the nodes' signed timestamps are checked against (node_auth.h);
    // std::chrono::system_clock::now when empty.
    std::function<std::chrono::system_clock::time_point()> wall_now;
  };

  explicit FleetService(Hooks hooks);

  // Whether `path` is one of this API's routes (/v1/fleet/...).
  static bool Matches(std::string_view path);
  // Every call is authenticated as Flower's SuperLink does it (node_auth.h): 401 "Invalid
  // SuperNode authentication" unless `auth` verifies and names the request's node.
  HttpReply Handle(std::string_view method, std::string_view path, std::string_view body,
                   const NodeAuthHeaders& auth);

  // The job's SuperNode allow-list (spec.flower.supernodeAuth; the control API's
  // /v1/jobs/{job}/flower/supernodes[/{node_id}], `shoal fl supernode`): GET lists the keys and
  // their nodes, POST {"publicKey": <OpenSSH line or PEM>} registers one (as `flwr supernode
  // register`), DELETE .../{node_id} unregisters it: the node's next call is 401 and
  // flower-supernode stops. JSON answers; fleet_supernodes.cc.
  HttpReply Supernodes(std::string_view method, const std::string& job, std::string_view node_id,
                       std::string_view body);

  FleetCounters counters();
  // A JSON object: per job, its run id and nodes (for the job's status and tests).
  std::string StateJson();

 private:
  using Clock = std::chrono::steady_clock;
  struct Node {
    uint64_t id = 0;
    std::string public_key;
    std::string job;
    std::string client_id, token;  // the node's membership of the job
    bool joined = false;           // client_id and token set
    bool active = false;
    bool activated = false;  // activated at least once (else only registered)
    bool listed = false;     // registered by the job's allow-list, not by RegisterNode
    double heartbeat_interval = 30;
    Clock::time_point online_until{};
    uint64_t trained_version = UINT64_MAX;  // the last version a train message was sent for
    uint64_t evaluated_version = 0;         // the last version an evaluate message was sent for
  };
  struct Instruction {
    std::string job;
    uint64_t node = 0;
    std::string type;  // "train" | "evaluate"
    uint64_t version = 0;
    Metadata metadata;
    ObjectTree tree;
    bool replied = false;
  };
  struct Session {
    std::string job;
    uint64_t node = 0;
    std::string instruction;  // the message id replied to
    std::string reply_id;
    double runtime = 0;
    std::set<std::string, std::less<>> pending;
    ObjectMap objects;  // the reply's objects (those the job already had too)
    // Filled when the last object arrives: what folding or reporting the reply needs.
    std::string client_id, token, type;
    uint64_t version = 0;
    model::ModelSpec model;
    std::chrono::steady_clock::time_point touched{};  // opened, or its last object stored
  };
  struct Job {
    std::string name;
    AppBundle fab;
    uint64_t run_id = 0;
    FlJobSpec spec;
    ObjectMap objects;  // the instructions' objects
    // The global model of each version kept, as an ArrayRecord, and its objects' ids.
    std::map<uint64_t, std::pair<BuiltObject, std::set<std::string>>> versions;
    model::ModelSpec model;  // the job's tensors (names, shapes, order)
  };

  HttpReply RegisterNode(std::string_view body);
  HttpReply ActivateNode(std::string_view body);
  HttpReply DeactivateNode(std::string_view body);
  HttpReply UnregisterNode(std::string_view body);
  HttpReply Heartbeat(std::string_view body);
  HttpReply PullMessages(std::string_view body);
  HttpReply PushMessages(std::string_view body);
  HttpReply PullObject(std::string_view body);
  HttpReply PushObject(std::string_view body);
  HttpReply ConfirmReceived(std::string_view body);
  HttpReply GetRun(std::string_view body);
  HttpReply GetFab(std::string_view body);
  // The 401 when the caller is not the node it says it is (node_auth.h); nullopt when it is.
  std::optional<HttpReply> Authenticate(std::string_view rpc, std::string_view body,
                                        const NodeAuthHeaders& auth);

  // The Flower job a new node joins (a running job with spec.flower that does not authenticate
  // SuperNodes); mu_ held. kPermissionDenied when only allow-listing jobs are there.
  Result<Job*> JobForNewNode();
  // Registers `pem` in `job`'s allow-list as a node that has not activated yet; mu_ held.
  Node& AddListedLocked(const std::string& job, const std::string& pem);
  // The allow-list keys of spec.flower.supernodes, registered when the job loads; mu_ held.
  void ListSpecKeysLocked(const Job& job);
  // A listed node joins its job as a client at its first activation; mu_ held.
  Status JoinLocked(Node& n);
  Result<Job*> JobLocked(const std::string& name);
  // The next message for `node` (nullptr: none now); mu_ held, released around the job calls.
  Result<const Instruction*> NextInstruction(std::unique_lock<std::mutex>& lock, Node& node);
  Result<BuiltObject> ModelRecord(Job& job, uint64_t version);
  // The reply's instruction and node, for Complete (false: gone meanwhile); mu_ held.
  bool FillSession(Session& s, const Job& job);
  // A whole reply arrived: fold it (train) or report it (evaluate). Called without mu_.
  void Complete(Session session);
  Clock::time_point Now() const { return hooks_.now ? hooks_.now() : Clock::now(); }
  // Lets go of the push sessions idle for kSessionIdleSeconds and of the unanswered messages of
  // nodes offline (past their heartbeats' patience): at most once a second; mu_ held.
  void ExpireLocked(Clock::time_point now);

  Hooks hooks_;
  std::mutex mu_;
  std::map<std::string, Job> jobs_;
  std::map<uint64_t, Node> nodes_;
  std::map<std::string, uint64_t, std::less<>> node_by_key_;
  std::map<std::string, Instruction, std::less<>> instructions_;
  std::map<std::string, Session, std::less<>> sessions_;
  FleetCounters counters_;
  Clock::time_point next_sweep_{};
  // Per job, the keys of spec.flower.supernodes unregistered through the control API: a reload
  // of the spec does not list them again (registering them again does).
  std::map<std::string, std::set<std::string>> revoked_;
};

}  // namespace shoal::flower
