// Many simulated FL clients in one process against shoald's job protocol: each client is a
// thread that joins, asks for tasks, trains the assigned number of local steps on its
// partition from the model version it was given, waits out its simulated training time (the
// speed heterogeneity that FedCompass schedules around) and uploads the update (clipped and
// noised first with local DP; masked through SecAgg+ rounds when the job has secure
// aggregation, secagg_client.h). The calling
// thread watches the job's version and, as the evaluator, scores each new global model on the
// test split and reports it.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/fl/privacy/local_dp.h"
#include "shoal/fl/wire/dtype.h"
#include "shoal/tools/flsim/attack.h"
#include "shoal/tools/flsim/dataset.h"

namespace shoal::client {

// Simulated seconds per local step are multiplied by this before a client sleeps them. With
// the default speeds (median 0.05 s/step) and FedCompass's Q_max = 100 steps, the median
// client takes 1 s per task and a lognormal:1.0 straggler a few seconds, so a 16-client job
// on 2 cores reaches its target in a few minutes while the spread of speeds still dominates
// the (shared-CPU) training time.
inline constexpr double kDefaultTimeScale = 0.2;

struct FlRunOptions {
  std::string server;  // "http://localhost:8080"
  std::string job;
  std::string join_token;  // the job's pre-shared client token, if it has one
  model::DType wire_dtype = model::DType::kF32;
  double time_scale = kDefaultTimeScale;
  bool evaluator = true;   // client 0 also evaluates each new global model
  double max_seconds = 0;  // stop after this long even if the job is not done; 0 = no limit
  uint64_t seed = 1;       // trainers' shuffles (partitions and speeds are the caller's)
  int status_poll_ms = 500;
  int train_threads = 0;        // trainings computed at once; 0 = the machine's cores
  std::ostream* log = nullptr;  // progress lines; nullptr = quiet
  // The last `attackers` clients poison each update with `attack` (attack.h) before sending it.
  // lie: the attackers pool their honest models per version (lie_board.h) and wait this long
  // for the others; attack.value is z (0: LieZ(clients, attackers)).
  AttackSpec attack;
  int attackers = 0;
  int lie_wait_ms = 30000;
  // Local DP: each update clipped and noised on the client before it is sent (clip 0: off).
  privacy::LocalDpOptions local_dp;
};

// What each simulated client holds: its sample indices into the train split and its
// seconds per local step (before time_scale).
struct FlClientPlan {
  std::vector<std::vector<uint32_t>> partitions;
  std::vector<double> step_seconds;
};

struct FlRunSummary {
  uint64_t updates_accepted = 0;
  uint64_t updates_stale = 0;     // 409: dropped, a new task asked for
  uint64_t updates_rejected = 0;  // other 4xx: dropped
  uint64_t update_retries = 0;    // 503 or no response: the same update sent again
  uint64_t tasks_trained = 0;
  uint64_t model_downloads = 0;
  uint64_t versions_seen = 0;  // distinct global versions the status poll observed
  uint64_t last_version = 0;
  uint64_t evals_posted = 0;
  bool evaluated = false;  // final_* are set
  uint64_t final_version = 0;
  double final_accuracy = 0.0;
  double final_loss = 0.0;
  bool job_done = false;   // the job reported "done"
  bool timed_out = false;  // max_seconds passed first
  int clients_failed = 0;  // clients that stopped on an error they could not retry
  // lie: updates sent as the colluders' mean - z std, and the models they pooled in all (so
  // lie_pooled / lie_colluded attackers met per round); updates sent honest, no colluder met.
  uint64_t lie_colluded = 0, lie_pooled = 0, lie_alone = 0;
  // A job with spec.privacy.secureAggregation: its clients' updates went masked (SecAgg+);
  // secure_rounds counts the protocol rounds a client finished, secure_failed those it could
  // not (the round failed or timed out: the client asks for a new task).
  bool secure = false;
  uint64_t secure_rounds = 0, secure_failed = 0;
  double seconds = 0.0;
};

// Runs `plan.partitions.size()` clients until the job reports done, every client has been told
// "done" or failed, or max_seconds passes. `test` is what the evaluator scores (may be empty
// when options.evaluator is false). An error only when no client could join.
Result<FlRunSummary> RunFlClients(const FlRunOptions& options, const Dataset& train,
                                  const Dataset& test, const FlClientPlan& plan);

}  // namespace shoal::client
