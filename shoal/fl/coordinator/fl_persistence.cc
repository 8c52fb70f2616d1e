// FlCoordinator's durability: the checkpoint state of a job (state.json, written behind the
// commits by CheckpointWriter), Restore (the jobs checkpointed under <state_dir>/jobs) and
// Recover (after a restart: the acknowledged updates the update log names but no checkpoint
// includes, taken back from the job's pool and re-folded, or for a robust job kept for its
// rule, exactly once).
#include <filesystem>
#include <fstream>
#include <set>

#include "shoal/fl/coordinator/checkpoint_writer.h"
#include "shoal/fl/coordinator/job_state.h"
#include "shoal/fl/wire/safetensors.h"

namespace shoal {
using namespace coordinator_internal;  // NOLINT(google-build-using-namespace): this library's own

namespace {

// clients.log's lines (ClientLog, job_state.h).
std::string JoinLine(const FlCoordinator::JobState::Client& c) {
  return Json{{"join", c.id}, {"name", c.name}, {"token", c.token}}.dump() + "\n";
}

std::string FiguresLine(const FlCoordinator::JobState::Client& c, uint64_t version) {
  return Json{{"client", c.id},
              {"version", version},
              {"updates", c.updates},
              {"samples", c.samples},
              {"last_base_version",
               c.last_base_version ? Json(*c.last_base_version) : Json(nullptr)},
              {"last_staleness", c.last_staleness},
              {"max_staleness", c.max_staleness},
              {"suspect_updates", c.suspect_updates},
              {"clipped_updates", c.clipped_updates}}
             .dump() +
         "\n";
}

bool HasFigures(const FlCoordinator::JobState::Client& c) {
  return c.updates > 0 || c.samples > 0 || c.last_base_version || c.max_staleness > 0 ||
         c.suspect_updates > 0 || c.clipped_updates > 0;
}

// A figures line (or a legacy state.json client) into `c`.
void ApplyFigures(FlCoordinator::JobState& job, FlCoordinator::JobState::Client& c, const Json& f) {
  c.updates = f.value("updates", uint64_t{0});
  job.SetSamples(c, f.value("samples", uint64_t{0}));
  c.last_base_version.reset();
  if (f.contains("last_base_version") && f["last_base_version"].is_number_unsigned()) {
    c.last_base_version = f["last_base_version"].get<uint64_t>();
  }
  c.last_staleness = f.value("last_staleness", uint64_t{0});
  c.max_staleness = f.value("max_staleness", uint64_t{0});
  c.suspect_updates = f.value("suspect_updates", uint64_t{0});
  c.clipped_updates = f.value("clipped_updates", uint64_t{0});
  if (c.suspect_updates > 0) {
    job.suspect_clients.insert(c.id);
  } else {
    job.suspect_clients.erase(c.id);
  }
}

// clients.log's lines, whole ones only (a torn last line is left out, as is a line that does
// not parse).
std::vector<Json> ReadClientLines(const std::string& text) {
  std::vector<Json> lines;
  size_t at = 0;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    if (nl == std::string::npos) break;  // a torn tail
    Json j = Json::parse(std::string_view(text).substr(at, nl - at), nullptr, false);
    if (j.is_object()) lines.push_back(std::move(j));
    at = nl + 1;
  }
  return lines;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

void FlCoordinator::JobState::QueueJoin(const Client& c) { pending_client_lines += JoinLine(c); }

void FlCoordinator::JobState::QueueChangedClients() {
  for (const std::string& id : changed_clients) {
    auto it = clients.find(id);
    if (it != clients.end()) {
      pending_client_lines += FiguresLine(it->second, version());
      ++pending_figure_lines;
    }
  }
  changed_clients.clear();
}

Status FlCoordinator::JobState::FlushClientLog() {
  std::lock_guard io(client_log_mu);  // the file's order is the order the lines were taken
  std::string lines;
  uint64_t figure_lines;
  size_t n_clients;
  uint64_t durable;
  {
    std::lock_guard jl(mu);
    lines.swap(pending_client_lines);
    figure_lines = pending_figure_lines;
    pending_figure_lines = 0;
    n_clients = clients.size();
    durable = durable_version;
  }
  if (lines.empty()) return {};
  if (Status st = client_log.Append(lines); !st.ok()) {
    spdlog::error("fl job {}: client log: {}", spec.name, st.ToString());
    return st;
  }
  client_log.CountFigureLines(figure_lines);
  if (client_log.figure_lines() <= n_clients + 1024) return {};
  // Compaction: every join, and per client the latest figures at or below the newest written
  // checkpoint's version (what a restore from it applies) and those above it (a restore from
  // the next checkpoint applies them). Once per as many figure lines as there are clients.
  const std::vector<Json> all = ReadClientLines(ReadFile(ClientLog::Path(dir)));
  std::string joins, figures;
  std::map<std::string, size_t, ClientOrder> latest_durable;  // client -> its line at or below
  for (size_t i = 0; i < all.size(); ++i) {
    const Json& l = all[i];
    if (l.contains("join")) {
      joins += l.dump() + "\n";
    } else if (l.value("version", uint64_t{0}) <= durable) {
      latest_durable[l.value("client", std::string())] = i;
    }
  }
  for (size_t i = 0; i < all.size(); ++i) {
    const Json& l = all[i];
    if (l.contains("join")) continue;
    const bool above = l.value("version", uint64_t{0}) > durable;
    auto latest = latest_durable.find(l.value("client", std::string()));
    if (above || (latest != latest_durable.end() && latest->second == i)) {
      figures += l.dump() + "\n";
    }
  }
  if (Status st = client_log.Rewrite(dir, joins + figures); !st.ok()) {
    spdlog::error("fl job {}: compacting the client log: {}", spec.name, st.ToString());
  }
  return {};
}

Status FlCoordinator::JobState::LoadClients(const Json& state, uint64_t at_version) {
  // A state.json written before clients.log held the table itself.
  if (state.contains("clients") && state["clients"].is_array()) {
    for (const auto& c : state["clients"]) {
      Client cl;
      cl.id = c.value("id", "");
      cl.name = c.value("name", "");
      cl.token = c.value("token", "");
      Client& in = clients[cl.id] = cl;
      ApplyFigures(*this, in, c);
    }
  }
  for (const Json& l : ReadClientLines(ReadFile(ClientLog::Path(dir)))) {
    if (l.contains("join")) {
      Client cl;
      cl.id = l.value("join", "");
      cl.name = l.value("name", "");
      cl.token = l.value("token", "");
      clients.try_emplace(cl.id, cl);
      continue;
    }
    if (l.value("version", uint64_t{0}) > at_version) continue;  // a checkpoint never written
    auto it = clients.find(l.value("client", std::string()));
    if (it != clients.end()) ApplyFigures(*this, it->second, l);
  }
  // The file from now on: this table, its figures tagged with the checkpoint's version.
  std::string lines;
  for (const auto& [id, c] : clients) lines += JoinLine(c);
  for (const auto& [id, c] : clients) {
    if (HasFigures(c)) lines += FiguresLine(c, at_version);
  }
  durable_version = at_version;
  return client_log.Rewrite(dir, lines);
}

uint64_t FlCoordinator::Persist(const std::shared_ptr<JobState>& jp, bool with_model,
                                const Optimizer* optimizer) {
  JobState& job = *jp;
  // The clients are not in state.json (it would grow with them, and be rewritten whole): their
  // joins are in clients.log already, and the figures that changed go there next
  // (FlushClientLog, once the caller released the job's lock).
  job.QueueChangedClients();
  Json versions = Json::array();
  for (const auto& v : job.versions) {
    versions.push_back({{"version", v.version},
                        {"accuracy", v.accuracy ? Json(*v.accuracy) : Json(nullptr)},
                        {"loss", v.loss ? Json(*v.loss) : Json(nullptr)},
                        {"updates", v.updates},
                        {"elapsed_s", v.elapsed_s}});
  }
  Json state = {{"spec", SpecToJson(job.spec)},
                {"version", job.version()},
                {"next_client", job.next_client},
                {"versions", versions},
                {"updates_total", job.updates_total},
                {"elapsed_s", job.Elapsed()},
                {"done", job.done},
                {"best_accuracy", job.best_accuracy},
                {"leaf_id", job.leaf_id},
                {"open_round", job.open_round},
                {"next_seq", job.next_seq},
                {"last_commit_seqs", job.UndurableSeqs()},
                {"top", config_.node_name}};  // a shared checkpoint_dir: whose job it is
  if (job.dp) state["dp"] = DpStateJson(*job.dp);
  if (job.scheduler) {
    Json tasks = Json::object();
    for (const auto& [id, t] : job.compass_tasks) {
      tasks[id] = {
          {"steps", t.steps}, {"version", t.version}, {"ready", t.ready}, {"started", t.started}};
    }
    Json groups = Json::array();
    for (const auto& [g, r] : job.group_round) groups.push_back({g, r});
    state["compass"] = {{"scheduler", job.scheduler->Save()},
                        {"tasks", tasks},
                        {"group_round", groups},
                        {"general_round", job.general_round}};
  }
  CheckpointWriter::Item item;
  item.job = job.spec.name;
  item.dir = job.dir;
  item.version = job.version();
  if (with_model) item.model = job.models.Find(job.version());
  if (with_model && optimizer != nullptr) {
    item.optimizer = *optimizer;  // the commit's copy, made without the job's lock
  } else if (with_model && (!job.state.momentum.empty() || !job.state.second_moment.empty())) {
    item.optimizer = OptimizerBytes(job.state);
  }
  item.state = state.dump();
  if (with_model) {
    // On the checkpoint writer's thread: the versions up to v are durable; the log's compaction
    // is written and synced once the job's lock is released (UpdateLog).
    item.on_durable = [weak = std::weak_ptr<JobState>(jp), v = job.version(), name = job.spec.name,
                       hook = test_hooks_.log_compaction] {
      auto job = weak.lock();
      if (!job) return;
      std::string bytes;
      bool compact = false;
      uint64_t durable_round = 0;
      {
        std::lock_guard jl(job->mu);
        job->RoundsDurable(v);
        durable_round = job->durable_round;
        if (!job->deleted && job->pool != nullptr) compact = job->Durable(v, &bytes);
      }
      // Their rounds' partial-sum checkpoints are no longer needed.
      if (job->PartialSums()) RemovePartialCheckpoints(job->dir, durable_round);
      if (!compact) return;
      if (hook) hook(name);
      job->log.FinishRewrite(name, job->dir, bytes);
    };
  }
  return writer_->Enqueue(std::move(item));
}

std::string FlCoordinator::JobsRoot() const {
  return config_.checkpoint_dir.empty() ? config_.state_dir + "/jobs" : config_.checkpoint_dir;
}

Status FlCoordinator::Restore() {
  const std::string root = JobsRoot();
  std::error_code ec;
  if (!std::filesystem::exists(root, ec)) return {};
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const std::string dir = entry.path().string();
    std::ifstream sf(dir + "/state.json");
    if (!sf) continue;
    Json state = Json::parse(sf, nullptr, false);
    if (state.is_discarded()) return Internal("corrupt FL job state: " + dir + "/state.json");
    const std::string top = state.value("top", std::string());
    if (!config_.checkpoint_dir.empty() && !top.empty() && top != config_.node_name) {
      // The shared store holds other nodes' jobs too: theirs unless this node takes one over.
      spdlog::info("fl: {} is node {}'s job (checkpoint_dir {}): not restored here",
                   entry.path().filename().string(), top, root);
      continue;
    }
    SHOAL_RETURN_IF_ERROR(RestoreJob(dir, state, /*take_over=*/false));
  }
  return {};
}

Status FlCoordinator::RestoreJob(const std::string& dir, const Json& state, bool take_over) {
  auto job = std::make_shared<JobState>();
  job->spec = SpecFromJson(state["spec"]);
  job->dir = dir;
  if (Status st = InitJob(*job); !st.ok()) {
    return Internal("FL job checkpoint " + dir + ": " + st.message());
  }
  auto mspec = JobModelSpec(job->spec);
  if (!mspec.ok()) return mspec.status();
  job->mspec = *mspec;
  job->state.version = state.value("version", uint64_t{0});
  // The files of the version state.json names (model.safetensors and optimizer.bin: the
  // layout before versioned files).
  auto existing = [&dir](const std::string& name, const std::string& legacy) {
    std::error_code ec;
    return std::filesystem::exists(dir + "/" + name, ec) ? dir + "/" + name : dir + "/" + legacy;
  };
  const std::string model_path = existing(ModelFile(job->version()), "model.safetensors");
  std::string bytes = ReadFile(model_path);
  auto m = model::ModelFromSafetensors(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
      job->mspec);
  if (!m.ok()) return Internal("FL job checkpoint " + model_path + ": " + m.status().message());
  job->state.weights = std::move(m->values);
  const std::string opt_path = existing(OptimizerFile(job->version()), "optimizer.bin");
  const std::string opt_bytes = ReadFile(opt_path);
  if (!opt_bytes.empty()) {
    auto opt = agg::ModelState::Deserialize(
        {reinterpret_cast<const uint8_t*>(opt_bytes.data()), opt_bytes.size()});
    if (!opt.ok()) return Internal("FL job checkpoint " + opt_path + ": " + opt.status().message());
    if (opt->version == job->state.version) {
      job->state.momentum = std::move(opt->momentum);
      job->state.second_moment = std::move(opt->second_moment);
    } else {
      spdlog::warn("fl job {}: optimizer state is for version {}, the model {}: restarting it",
                   job->spec.name, opt->version, job->state.version);
    }
  }
  job->KeepVersion();
  job->models.Keep(job->version(), std::make_shared<std::string>(std::move(bytes)));
  job->next_client = state.value("next_client", 0u);
  if (Status st = job->LoadClients(state, job->version()); !st.ok()) {
    return Internal("FL job checkpoint " + dir + ": client log: " + st.message());
  }
  // Joins since the last state.json are in clients.log only: the next id follows them.
  for (const auto& [id, c] : job->clients) {
    job->next_client = std::max(job->next_client, static_cast<uint32_t>(NumericId(id) + 1));
  }
  for (const auto& v : state["versions"]) {
    JobState::VersionInfo vi;
    vi.version = v.value("version", uint64_t{0});
    if (v["accuracy"].is_number()) vi.accuracy = v["accuracy"].get<double>();
    if (v["loss"].is_number()) vi.loss = v["loss"].get<double>();
    vi.updates = v.value("updates", 0u);
    vi.elapsed_s = v.value("elapsed_s", 0.0);
    job->AddVersion(vi);
  }
  job->updates_total = state.value("updates_total", uint64_t{0});
  job->elapsed_before = state.value("elapsed_s", 0.0);
  job->done = state.value("done", false);
  job->best_accuracy = state.value("best_accuracy", 0.0);
  job->leaf_id = state.value("leaf_id", 4095u);
  job->open_round = std::max(state.value("open_round", job->version() + 1), uint64_t{1});
  job->next_seq = state.value("next_seq", uint64_t{1});
  if (job->dp && state.contains("dp")) RestoreDpState(state["dp"], *job->dp);
  if (job->scheduler && state.contains("compass")) {
    const Json& c = state["compass"];
    if (Status st = job->scheduler->Load(c.value("scheduler", std::string())); !st.ok()) {
      return Internal("FL job checkpoint " + dir + ": " + st.message());
    }
    for (const auto& [id, t] : c["tasks"].items()) {
      job->compass_tasks[id] = {t.value("steps", 0u), t.value("version", uint64_t{0}),
                                t.value("ready", false), t.value("started", false)};
    }
    for (const auto& g : c["group_round"]) {
      job->group_round[g.at(0).get<agg::GroupId>()] = g.at(1).get<uint64_t>();
    }
    job->general_round = c.value("general_round", uint64_t{0});
  }
  job->algo->Start(job->Elapsed());
  if (job->spec.round_deadline_s > 0)
    job->round_deadline = job->Elapsed() + job->spec.round_deadline_s;
  // The update log: records the checkpoint does not include are re-folded by Recover.
  const std::string log = ReadFile(dir + "/updates.log");
  const auto seqs = state.value("last_commit_seqs", std::vector<uint64_t>{});
  const std::set<uint64_t> committed(seqs.begin(), seqs.end());
  for (size_t off = 0; off + sizeof(LogRecord) <= log.size(); off += sizeof(LogRecord)) {
    LogRecord r;
    std::memcpy(&r, log.data() + off, sizeof r);
    if (r.magic != LogRecord::kMagic) break;  // a torn tail
    job->next_seq = std::max(job->next_seq, r.seq + 1);
    if (committed.count(r.seq) != 0) continue;
    job->recovered.push_back(r);
  }
  // The log keeps only what the checkpoint does not include: the next state.json written
  // (whose last_commit_seqs name only versions committed from now on) stays true of it.
  if (Status st = WriteFileAtomic(dir + "/updates.log", job->recovered.data(),
                                  job->recovered.size() * sizeof(LogRecord));
      !st.ok()) {
    return Internal("FL job checkpoint " + dir + ": update log: " + st.message());
  }
  SHOAL_RETURN_IF_ERROR(job->log.Open(job->dir));
  std::lock_guard lock(mu_);
  next_leaf_id_ = std::min(next_leaf_id_, job->leaf_id - 1);
  spdlog::info(
      "fl job {}: resumed at version {} ({} clients, {} updates so far, {} logged "
      "update(s) to re-fold)",
      job->spec.name, job->version(), job->clients.size(), job->updates_total,
      job->recovered.size());
  if (take_over) {
    // Its logged updates are in the lost top's pool: their clients are asked again (a restored
    // client has no update in a round, so its next task trains). A fresh leaf id: this node's
    // ids are its own.
    job->recovered.clear();
    if (Status st = WriteFileAtomic(dir + "/updates.log", "", 0); !st.ok()) {
      // log.Open below appends after them: a restart here would meet the lost top's records.
      spdlog::error("fl job {}: emptying the update log of the lost top's updates: {}",
                    job->spec.name, st.ToString());
    }
    SHOAL_RETURN_IF_ERROR(job->log.Open(job->dir));
    job->leaf_id = next_leaf_id_--;
  }
  jobs_[job->spec.name] = job;
  return {};
}

Status FlCoordinator::Recover(
    const std::function<Result<SharedPool*>(const std::string&)>& pool_for) {
  std::vector<std::shared_ptr<JobState>> jobs;
  {
    std::lock_guard lock(mu_);
    for (auto& [name, j] : jobs_) jobs.push_back(j);
  }
  std::map<SharedPool*, std::set<uint64_t>> kept;  // per pool: the buffers the logs still name
  for (auto& job : jobs) {
    std::lock_guard jl(job->mu);
    auto pool = pool_for(job->spec.tenant);
    if (!pool.ok()) return pool.status();
    SharedPool* sp = *pool;
    std::set<uint64_t>& keep = kept[sp];
    if (job->recovered.empty()) continue;
    job->pool = sp;
    const std::vector<uint64_t> held = sp->HeldBy(kCoordinatorSlot);
    const std::set<uint64_t> held_set(held.begin(), held.end());
    const size_t bytes = job->mspec.num_params() * sizeof(float);
    uint64_t max_round = 0;
    size_t refolded = 0;
    // durability partialSums: the updates' buffers went back to the pool once folded; the
    // partial-sum checkpoints stand for them, and the clients of the others send again.
    std::map<uint64_t, uint64_t> checkpointed;
    if (job->PartialSums()) {
      auto loaded = job->LoadPartialCheckpoints(*sp);
      if (!loaded.ok()) return loaded.status();
      checkpointed = std::move(*loaded);
    }
    for (const LogRecord& r : job->recovered) {
      const std::string client(r.client, strnlen(r.client, sizeof r.client));
      if (job->PartialSums() && job->clients.count(client) != 0) {
        auto cp = checkpointed.find(r.seq);
        if (cp == checkpointed.end()) {
          job->AskToResend(client, r.round, r.seq, "restart");
          continue;
        }
        uint64_t id;
        {
          std::lock_guard lock(mu_);
          id = next_ticket_++;
        }
        job->TakeCheckpointed(r, client, cp->second, id);
        max_round = std::max(max_round, r.round);
        ++refolded;
        continue;
      }
      if (held_set.count(r.buffer) == 0 || job->clients.count(client) == 0) {
        spdlog::error(
            "fl job {}: logged update {} of client {} is not in the pool any more "
            "(was the pool recreated?): lost",
            job->spec.name, r.seq, client);
        continue;
      }
      JobState::Round& round = job->rounds[r.round];
      const uint64_t key = job->Robust() ? 0 : job->PartialKey(kRefoldedPartial, r.base_version);
      auto pit = round.partials.find(key);
      if (pit == round.partials.end() && job->Robust()) {
        // Nothing to re-fold: the rule reads the update from the pool at commit.
        pit = round.partials.emplace(key, JobState::Partial{0, {}, r.base_version}).first;
      } else if (pit == round.partials.end()) {
        auto off = ZeroedPartial(*sp, bytes);
        if (!off.ok()) return off.status();
        pit = round.partials.emplace(key, JobState::Partial{*off, {}, r.base_version}).first;
      }
      JobState::Ticket t = JobState::LoggedTicket(r, client, key);
      uint64_t id;
      {
        std::lock_guard lock(mu_);
        id = next_ticket_++;
      }
      job->tickets[id] = t;
      const bool kept =
          job->Robust() ? model::ParseUpdate(ReadPayload(sp->Data(r.buffer)).body, job->mspec).ok()
                        : job->Refold(reinterpret_cast<float*>(sp->Data(pit->second.offset).data()),
                                      {id}, job->tickets) == 1;
      if (!kept) {
        spdlog::error("fl job {}: logged update {} of client {} no longer parses: lost",
                      job->spec.name, r.seq, client);
        job->tickets.erase(id);
        continue;
      }
      keep.insert(r.buffer);
      pit->second.tickets.push_back(id);
      ++round.admitted;
      ++round.acked;
      JobState::Client& c = job->clients[client];
      c.submitted_round = r.round;
      job->SetSamples(c, r.num_samples);
      c.last_base_version = r.base_version;  // its staleness on arrival is not logged
      ++c.updates;
      job->Changed(c);
      ++job->updates_total;
      max_round = std::max(max_round, r.round);
      ++refolded;
    }
    job->recovered.clear();
    if (job->PartialSums()) {
      // The records of the updates asked for again go: a second restart must not ask again.
      job->log.Rewrite(job->spec.name, job->dir, job->LogBytes());
    }
    // Which recovered rounds are closed: every round but the open one (rounds open one at a
    // time), and the open one when it is due; FedCompass: all but the open groups' and the
    // general buffer's.
    std::set<uint64_t> open_compass;
    for (const auto& [g, r] : job->group_round) open_compass.insert(r);
    if (job->general_round != 0) open_compass.insert(job->general_round);
    const double now = job->Elapsed();
    for (auto& [rid, round] : job->rounds) {
      if (job->Compass()) {
        if (open_compass.count(rid) == 0) round.closed = true;
      } else if (rid < max_round || rid < job->open_round) {
        round.closed = true;
      } else {
        round.closed = job->Sync() ? round.admitted >= job->Needed()
                                   : job->algo->ShouldCommit(round.admitted, now) &&
                                         job->algo->NextCommitTime() == std::nullopt;
      }
    }
    if (!job->Compass()) {
      job->open_round = std::max(job->open_round, max_round);
      if (job->rounds.count(job->open_round) && job->rounds[job->open_round].closed) {
        ++job->open_round;
      }
    } else {
      job->open_round = std::max(job->open_round, max_round + 1);
      // A client whose update the checkpoint's scheduler does not know as waiting in a group
      // would wait for nothing: it trains again from the current model.
      for (auto& [id, t] : job->tickets) {
        if (open_compass.count(t.round) != 0) continue;
        auto a = job->scheduler->assignment(NumericId(t.client));
        job->SetTask(a ? *a
                       : agg::CompassAssignment{NumericId(t.client), job->spec.local_steps, 0});
      }
    }
    spdlog::info(
        "fl job {}: re-folded {} acknowledged update(s) from the update log (rounds "
        "up to {}, open round {})",
        job->spec.name, refolded, max_round, job->open_round);
  }
  // Buffers held for updates that were admitted but never acknowledged: their clients got no
  // 202 and send them again.
  for (auto& [sp, keep] : kept) {
    size_t released = 0;
    for (uint64_t off : sp->HeldBy(kCoordinatorSlot)) {
      if (keep.count(off) == 0 && sp->Release(off, kCoordinatorSlot).ok()) ++released;
    }
    if (released > 0) spdlog::info("fl: released {} unacknowledged update buffer(s)", released);
  }
  for (auto& job : jobs) Enqueue(job);
  return {};
}

}  // namespace shoal
