#include "shoal/client/oip_classifier.h"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

namespace shoal::client {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  std::string_view line(data, size * n);
  static constexpr std::string_view kName = "inference-header-content-length:";
  if (line.size() > kName.size()) {
    std::string lower(line.substr(0, kName.size()));
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    if (lower == kName) {
      *static_cast<size_t*>(user) = std::strtoull(std::string(line.substr(kName.size())).c_str(),
                                                  nullptr, 10);
    }
  }
  return size * n;
}

// One keep-alive connection.
class Connection {
 public:
  explicit Connection(const std::string& url) : url_(url), handle_(curl_easy_init()) {
    curl_easy_setopt(handle_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(handle_, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(handle_, CURLOPT_WRITEFUNCTION, &OnBody);
    curl_easy_setopt(handle_, CURLOPT_WRITEDATA, &body_);
    curl_easy_setopt(handle_, CURLOPT_HEADERFUNCTION, &OnHeader);
    curl_easy_setopt(handle_, CURLOPT_HEADERDATA, &json_length_);
  }
  ~Connection() { curl_easy_cleanup(handle_); }

  // GET when `request` is empty. Returns the HTTP status, or 0 with *error set.
  long Send(const std::string& path, const std::string& request, size_t request_json_length,
            std::string* error) {
    body_.clear();
    json_length_ = 0;
    const std::string url = url_ + path;
    curl_easy_setopt(handle_, CURLOPT_URL, url.c_str());
    curl_slist* headers = nullptr;
    std::string h;
    if (request.empty()) {
      curl_easy_setopt(handle_, CURLOPT_HTTPGET, 1L);
    } else {
      curl_easy_setopt(handle_, CURLOPT_POST, 1L);
      curl_easy_setopt(handle_, CURLOPT_POSTFIELDS, request.data());
      curl_easy_setopt(handle_, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.size()));
      h = "Inference-Header-Content-Length: " + std::to_string(request_json_length);
      headers = curl_slist_append(headers, "Content-Type: application/octet-stream");
      headers = curl_slist_append(headers, h.c_str());
      headers = curl_slist_append(headers, "Expect:");
    }
    curl_easy_setopt(handle_, CURLOPT_HTTPHEADER, headers);
    const CURLcode rc = curl_easy_perform(handle_);
    curl_easy_setopt(handle_, CURLOPT_HTTPHEADER, nullptr);
    curl_slist_free_all(headers);
    if (rc != CURLE_OK) {
      *error = std::string("cannot reach ") + url_ + ": " + curl_easy_strerror(rc);
      return 0;
    }
    long status = 0;
    curl_easy_getinfo(handle_, CURLINFO_RESPONSE_CODE, &status);
    return status;
  }
  const std::string& body() const { return body_; }
  size_t json_length() const { return json_length_; }

 private:
  std::string url_;
  CURL* handle_;
  std::string body_;
  size_t json_length_ = 0;
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
  curl_global_init(CURL_GLOBAL_DEFAULT);
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
  std::atomic<int> phase{0};  // 0 cycling, 1 final pass, 2 finished
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
           (version > shared.last_version_logged && now - shared.last_log >= std::chrono::seconds(5)))) {
        shared.last_version_logged = version;
        shared.last_log = now;
        *o.log << "shoal-client: infer: model '" << o.model << "' answers with version "
               << version << std::endl;
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
