#include "shoal/fl/client/oip_classifier.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "shoal/common/http/http_client.h"

namespace shoal::client {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// One keep-alive connection to the OIP server.
class Connection {
 public:
  explicit Connection(const std::string& url) : http_(url) {}

  // GET when `request` is empty, else POST of the binary OIP body whose JSON head is
  // `request_json_length` bytes. Returns the HTTP status, or 0 with *error set.
  long Send(const std::string& path, const std::string& request, size_t request_json_length,
            std::string* error) {
    HttpRequest r;
    r.path = path;
    r.timeout_ms = 30000;
    if (!request.empty()) {
      r.method = "POST";
      r.body = request;
      r.headers = {"Content-Type: application/octet-stream",
                   "Inference-Header-Content-Length: " + std::to_string(request_json_length)};
    }
    std::string why;
    std::optional<HttpResponse> reply = http_.Send(r, &why);
    if (!reply) {
      *error = "cannot reach " + http_.base_url() + ": " + why;
      reply_ = HttpResponse{};
      return 0;
    }
    reply_ = std::move(*reply);
    return reply_.status;
  }
  const std::string& body() const { return reply_.body; }
  // The reply's Inference-Header-Content-Length (0 when it has none).
  size_t json_length() const {
    auto it = reply_.headers.find("inference-header-content-length");
    return it == reply_.headers.end() ? 0 : std::strtoull(it->second.c_str(), nullptr, 10);
  }

 private:
  HttpClient http_;
  HttpResponse reply_;
};

struct Shared {
  std::mutex mu;
  OipClassifySummary summary;
  std::vector<double> latencies_ms;
  uint64_t last_version_logged = UINT64_MAX;
  Clock::time_point last_log;
};

}  // namespace

Result<OipClassifySummary> ClassifyOverOip(const OipClassifyOptions& o, const Dataset& data) {
  if (data.num_samples == 0) return InvalidArgument("no images to classify");
  // The model's metadata names its input and output (OIP clients do not guess them).
  Connection meta_conn(o.server);
  std::string error;
  const long st = meta_conn.Send("/v2/models/" + o.model, {}, 0, &error);
  if (st == 0) return Unavailable(error);
  if (st != 200) {
    return NotFound("model '" + o.model + "': HTTP " + std::to_string(st) + " " + meta_conn.body());
  }
  const Json meta = Json::parse(meta_conn.body(), nullptr, false);
  if (!meta.is_object() || !meta.contains("inputs") || !meta.contains("outputs")) {
    return Internal("model '" + o.model + "': metadata without inputs/outputs");
  }
  const std::string input = meta["inputs"][0].value("name", "input");
  const std::string output = meta["outputs"][0].value("name", "output");
  int64_t features = 1;
  for (size_t k = 1; k < meta["inputs"][0]["shape"].size(); ++k) {
    features *= meta["inputs"][0]["shape"][k].get<int64_t>();
  }
  int64_t classes = 1;
  for (size_t k = 1; k < meta["outputs"][0]["shape"].size(); ++k) {
    classes *= meta["outputs"][0]["shape"][k].get<int64_t>();
  }
  if (features != static_cast<int64_t>(data.num_features)) {
    return InvalidArgument("model '" + o.model + "' takes " + std::to_string(features) +
                           " features per sample, the data has " +
                           std::to_string(data.num_features));
  }
  // No request larger than the model takes.
  int batch = std::max(1, o.batch);
  if (meta.contains("parameters") && meta["parameters"].is_object()) {
    const int64_t max = meta["parameters"].value("max_batch_size", int64_t{0});
    if (max > 0 && batch > max) batch = static_cast<int>(max);
  }
  std::vector<int64_t> dims;
  for (size_t k = 1; k < meta["inputs"][0]["shape"].size(); ++k) {
    dims.push_back(meta["inputs"][0]["shape"][k].get<int64_t>());
  }

  Shared shared;
  std::atomic<uint64_t> next{0};        // cycling: the next image, modulo n
  std::atomic<uint64_t> final_next{0};  // the final pass: the next image, up to n
  std::atomic<int> phase{0};            // 0 cycling, 1 final pass, 2 finished
  const uint64_t n = data.num_samples;
  const auto t0 = Clock::now();

  auto worker = [&] {
    Connection conn(o.server);
    std::string request;
    std::vector<uint32_t> rows;
    std::vector<double> lat;
    for (;;) {
      const int ph = phase.load();
      if (ph == 2) break;
      const uint64_t start = (ph == 1 ? final_next : next).fetch_add(static_cast<uint64_t>(batch));
      rows.clear();
      if (ph == 1) {
        if (start >= n) break;
        for (uint64_t i = start; i < std::min<uint64_t>(start + batch, n); ++i) rows.push_back(i);
      } else {
        for (int k = 0; k < batch; ++k) rows.push_back(static_cast<uint32_t>((start + k) % n));
      }
      const int64_t b = static_cast<int64_t>(rows.size());
      Json shape = Json::array({b});
      for (int64_t d : dims) shape.push_back(d);
      const Json header = {
          {"inputs",
           {{{"name", input},
             {"shape", shape},
             {"datatype", "FP32"},
             {"parameters", {{"binary_data_size", b * features * 4}}}}}},
          {"outputs", {{{"name", output}, {"parameters", {{"binary_data", true}}}}}}};
      request = header.dump();
      const size_t json_length = request.size();
      for (uint32_t r : rows) {
        request.append(reinterpret_cast<const char*>(data.Row(r)), features * sizeof(float));
      }
      const auto t = Clock::now();
      std::string err;
      const long status = conn.Send("/v2/models/" + o.model + "/infer", request, json_length, &err);
      lat.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
      const std::string& body = conn.body();
      const size_t jl = conn.json_length();
      bool ok = status == 200 && jl > 0 && body.size() == jl + size_t(b * classes) * 4;
      Json answer = ok ? Json::parse(body.substr(0, jl), nullptr, false) : Json();
      ok = ok && answer.is_object() && answer.contains("model_version");
      std::lock_guard lock(shared.mu);
      ++shared.summary.requests;
      if (!ok) {
        ++shared.summary.failed;
        // A request the server refuses will be refused again: stop instead of repeating it.
        if (status >= 400 && status < 500) phase.store(2);
        if (shared.summary.first_error.empty()) {
          shared.summary.first_error =
              status == 0 ? err : "HTTP " + std::to_string(status) + ": " + body.substr(0, 200);
        }
        continue;
      }
      const uint64_t version =
          std::strtoull(answer["model_version"].get<std::string>().c_str(), nullptr, 10);
      VersionScore& score =
          (ph == 1 ? shared.summary.final_by_version : shared.summary.by_version)[version];
      for (int64_t k = 0; k < b; ++k) {
        const float* logits = reinterpret_cast<const float*>(body.data() + jl) + k * classes;
        float best = 0;
        int64_t arg = 0;
        for (int64_t c = 0; c < classes; ++c) {
          float v;
          std::memcpy(&v, logits + c, sizeof v);
          if (c == 0 || v > best) {
            best = v;
            arg = c;
          }
        }
        ++score.images;
        if (arg == data.labels[rows[k]]) ++score.correct;
      }
      // A line when a newer version answers, at most every 5 s (a job commits many).
      const auto now = Clock::now();
      if (o.log && ph == 0 &&
          (shared.last_version_logged == UINT64_MAX ||
           (version > shared.last_version_logged &&
            now - shared.last_log >= std::chrono::seconds(5)))) {
        shared.last_version_logged = version;
        shared.last_log = now;
        *o.log << "shoal-client: infer: model '" << o.model << "' answers with version " << version
               << std::endl;
      }
    }
    std::lock_guard lock(shared.mu);
    shared.latencies_ms.insert(shared.latencies_ms.end(), lat.begin(), lat.end());
  };

  std::vector<std::thread> threads;
  for (int i = 0; i < std::max(1, o.connections); ++i) threads.emplace_back(worker);
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    if (phase.load() == 2 || elapsed >= o.max_seconds || (o.done && o.done())) break;
  }
  // The final pass: every image once, on whatever version is served now (unless stopped).
  int cycling = 0;
  phase.compare_exchange_strong(cycling, 1);
  for (auto& t : threads) t.join();
  phase.store(2);

  OipClassifySummary s = std::move(shared.summary);
  s.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  auto& lat = shared.latencies_ms;
  if (!lat.empty()) {
    std::sort(lat.begin(), lat.end());
    s.p50_ms = lat[lat.size() / 2];
    s.p99_ms = lat[std::min(lat.size() - 1, lat.size() * 99 / 100)];
  }
  return s;
}

}  // namespace shoal::client
