// The inference handler's serving side without an executor: the Open Inference Protocol codec
// (request parsing with every bad-request message, response bytes, the binary extension,
// metadata) and the dynamic batcher (shared batches, each request its own rows, hot swap
// between batches) over a small fake Executable defined here.
#include <gtest/gtest.h>
#include <zlib.h>

#include <atomic>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "shoal/serving/oip/dynamic_batcher.h"
#include "shoal/serving/oip/oip.h"
#include "tests/support/oip_for_test.h"
#include "tests/support/threads_for_test.h"

namespace shoal {
namespace {

using Json = nlohmann::json;

oip::ModelInfo Info() { return testing::OipModel("fmnist", {2, 2}, {3}, 4); }

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// Parses with the fast data path and checks that the general parser agrees exactly.
Status Parse(const std::string& body, oip::InferRequest* out, std::vector<float>& scratch,
             std::optional<size_t> header = std::nullopt) {
  const testing::BothParses parsed =
      testing::ParseBothWays(Bytes(body), header, Info(), scratch, out);
  EXPECT_EQ(parsed.disagreement, "") << body;
  return parsed.status;
}

std::string Req(const std::string& input_fields, const std::string& extra = "") {
  return "{\"id\":\"r1\",\"inputs\":[{" + input_fields + "}]" + extra + "}";
}

// A request parsed into `r` with `scratch`, fresh for each test.
class OipTest : public ::testing::Test {
 protected:
  std::vector<float> scratch;
  oip::InferRequest r;
};

TEST_F(OipTest, ParsesFlatAndNestedData) {
  ASSERT_TRUE(Parse(Req(R"("name":"input","shape":[1,2,2],"datatype":"FP32","data":[1,2,3,4.5])"),
                    &r, scratch)
                  .ok());
  EXPECT_EQ(r.id, "r1");
  EXPECT_EQ(r.batch, 1);
  ASSERT_EQ(r.input.size(), 4u);
  EXPECT_FLOAT_EQ(r.input[3], 4.5f);
  ASSERT_TRUE(Parse(Req(R"("name":"input","shape":[2,2,2],"datatype":"FP32",)"
                        R"("data":[[[1,2],[3,4]],[[5,6],[7,8]]])"),
                    &r, scratch)
                  .ok());
  EXPECT_EQ(r.batch, 2);
  ASSERT_EQ(r.input.size(), 8u);
  EXPECT_FLOAT_EQ(r.input[7], 8.0f);
  EXPECT_FALSE(r.binary_output);
}

struct BadCase {
  const char* what;
  std::string body;
  std::string message;
};

TEST_F(OipTest, FastDataPathHandlesWhitespaceExponentsAndKeyOrder) {
  // data before shape, odd whitespace, exponents, negative zero, an unrelated "data" key in the
  // outputs and inside a string.
  const std::string body =
      "{ \"outputs\": [{\"name\": \"logits\", \"data\": [9]}], \"inputs\" : [ {\"data\" :\n"
      "[ [1.5e1 , -0.0] ,[ 2E-1,\t3 ] ], \"name\":\"input\", \"x\":\"\\\"data\\\": [1]\", "
      "\"shape\":[1,2,2],\"datatype\":\"FP32\"} ] }";
  ASSERT_TRUE(Parse(body, &r, scratch).ok()) << body;
  ASSERT_EQ(r.input.size(), 4u);
  EXPECT_FLOAT_EQ(r.input[0], 15.0f);
  EXPECT_FLOAT_EQ(r.input[2], 0.2f);
  EXPECT_FLOAT_EQ(r.input[3], 3.0f);
  // Not JSON numbers: the general parser's message.
  for (const char* bad : {"[01,2,3,4]", "[1.,2,3,4]", "[.5,2,3,4]", "[1,2,3,4,]", "[1,2,3,+4]",
                          "[1,2,3,NaN]", "[[1,2],[3,4]"}) {
    Status st =
        Parse(Req(std::string(R"("name":"input","shape":[1,2,2],"datatype":"FP32","data":)") + bad),
              &r, scratch);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_TRUE(st.message().starts_with("malformed JSON")) << bad << ": " << st.message();
  }
}

TEST(Oip, EveryBadRequestIsRefusedNamingWhatIsWrong) {
  const std::string ok_data = R"("data":[1,2,3,4])";
  const std::vector<BadCase> cases = {
      {"malformed JSON", "{\"inputs\": [", "malformed JSON: "},
      {"not an object", "[1,2]", "the request must be a JSON object"},
      {"no inputs", "{\"id\":\"x\"}", "missing \"inputs\" (an array of tensors)"},
      {"empty inputs", "{\"inputs\":[]}", "missing input 'input'"},
      {"unknown input", Req(R"("name":"pixels","shape":[1,2,2],"datatype":"FP32",)" + ok_data),
       "unknown input 'pixels' (the model's input is 'input')"},
      {"wrong datatype", Req(R"("name":"input","shape":[1,2,2],"datatype":"INT64",)" + ok_data),
       "input 'input': wrong datatype INT64 (the model takes FP32)"},
      {"missing datatype", Req(R"("name":"input","shape":[1,2,2],)" + ok_data),
       "input 'input': missing \"datatype\" (FP32)"},
      {"wrong shape", Req(R"("name":"input","shape":[1,4],"datatype":"FP32",)" + ok_data),
       "input 'input': wrong shape [1,4] (the model takes [-1,2,2])"},
      {"wrong dim", Req(R"("name":"input","shape":[1,2,3],"datatype":"FP32",)" + ok_data),
       "input 'input': wrong shape [1,2,3] (the model takes [-1,2,2])"},
      {"negative dim", Req(R"("name":"input","shape":[-1,2,2],"datatype":"FP32",)" + ok_data),
       "input 'input': shape must be an array of non-negative integers"},
      {"batch over max", Req(R"("name":"input","shape":[5,2,2],"datatype":"FP32",)" + ok_data),
       "input 'input': batch of 5 is over the max batch size 4"},
      {"zero batch", Req(R"("name":"input","shape":[0,2,2],"datatype":"FP32","data":[])"),
       "input 'input': batch dimension is 0"},
      {"too few values", Req(R"("name":"input","shape":[1,2,2],"datatype":"FP32","data":[1,2,3])"),
       "input 'input': shape [1,2,2] needs 4 values, got 3"},
      {"too many elements",
       Req(R"("name":"input","shape":[1,2,2],"datatype":"FP32","data":[1,2,3,4,5])"),
       "input 'input': too many elements: more than the 4 its shape holds"},
      {"non-numeric data",
       Req(R"("name":"input","shape":[1,2,2],"datatype":"FP32","data":[1,"two",3,4])"),
       "input 'input': data element 1 is not a number (\"two\")"},
      {"missing data", Req(R"("name":"input","shape":[1,2,2],"datatype":"FP32")"),
       "input 'input': missing \"data\""},
      {"twice",
       "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,2,2],\"datatype\":\"FP32\"," + ok_data +
           "},{\"name\":\"input\",\"shape\":[1,2,2],\"datatype\":\"FP32\"," + ok_data + "}]}",
       "input 'input' is given twice"},
      {"unknown output",
       Req(R"("name":"input","shape":[1,2,2],"datatype":"FP32",)" + ok_data,
           R"(,"outputs":[{"name":"probs"}])"),
       "unknown output 'probs' (the model's output is 'logits')"},
      {"classification extension",
       Req(R"("name":"input","shape":[1,2,2],"datatype":"FP32",)" + ok_data,
           R"(,"outputs":[{"name":"logits","parameters":{"classification":3}}])"),
       "output 'logits': classification 3 (Triton's classification extension) is not "
       "supported: ask for the output itself"},
      {"id not a string", "{\"id\":7,\"inputs\":[]}", "\"id\" must be a string"},
      {"binary without header",
       Req(R"("name":"input","shape":[1,2,2],"datatype":"FP32","parameters":{"binary_data_size":16})"),
       "input 'input': binary_data_size needs the Inference-Header-Content-Length header"},
  };
  for (const BadCase& c : cases) {
    std::vector<float> scratch;
    oip::InferRequest r;
    Status st = Parse(c.body, &r, scratch);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_TRUE(st.message().starts_with(c.message))
        << c.what << ": got \"" << st.message() << "\", want \"" << c.message << "\"";
    EXPECT_EQ(HttpStatusFor(st.code()), 400) << c.what;
  }
}

TEST_F(OipTest, BinaryExtensionRequestAndResponse) {
  const std::string header =
      R"({"inputs":[{"name":"input","shape":[1,2,2],"datatype":"FP32","parameters":{"binary_data_size":16}}],)"
      R"("outputs":[{"name":"logits","parameters":{"binary_data":true}}]})";
  const float values[4] = {1.5f, -2.0f, 3.25f, 4.0f};
  std::string body = header;
  body.append(reinterpret_cast<const char*>(values), sizeof values);

  auto len = oip::BinaryHeaderLength("x=1&inference_header_content_length=" +
                                     std::to_string(header.size()));
  ASSERT_TRUE(len.ok());
  ASSERT_TRUE(len->has_value());
  EXPECT_EQ(**len, header.size());
  EXPECT_FALSE(oip::BinaryHeaderLength("")->has_value());
  EXPECT_FALSE(oip::BinaryHeaderLength("inference_header_content_length=x").ok());

  ASSERT_TRUE(Parse(body, &r, scratch, header.size()).ok());
  ASSERT_EQ(r.input.size(), 4u);
  EXPECT_EQ(std::memcmp(r.input.data(), values, sizeof values), 0);
  EXPECT_TRUE(r.binary_output);

  // Wrong size, truncated body, header longer than the body.
  std::string wrong = header;
  wrong.replace(wrong.find("16"), 2, "12");
  std::string wrong_body = wrong + std::string(reinterpret_cast<const char*>(values), 12);
  Status st = Parse(wrong_body, &r, scratch, wrong.size());
  EXPECT_EQ(st.message(),
            "input 'input': binary_data_size 12 does not match shape [1,2,2] of FP32 (16 bytes)");
  st = Parse(header + "abc", &r, scratch, header.size());
  EXPECT_EQ(st.message(),
            "input 'input': binary data of 16 bytes runs past the end of the body (3 bytes "
            "after the JSON)");
  st = Parse(header, &r, scratch, header.size() + 1);
  EXPECT_TRUE(st.message().starts_with("Inference-Header-Content-Length")) << st.message();

  // The response: JSON header, then the raw float32 output.
  ASSERT_TRUE(Parse(body, &r, scratch, header.size()).ok());
  const float out[3] = {0.25f, 1.0f, -7.5f};
  std::string resp;
  size_t json_len = 0;
  oip::WriteInferResponse(Info(), r, 9, out, resp, &json_len);
  const std::string expect_json =
      R"({"model_name":"fmnist","model_version":"9","outputs":[{"name":"logits","datatype":"FP32",)"
      R"("shape":[1,3],"parameters":{"binary_data_size":12}}]})";
  EXPECT_EQ(resp.substr(0, json_len), expect_json);
  ASSERT_EQ(resp.size(), json_len + 12);
  EXPECT_EQ(std::memcmp(resp.data() + json_len, out, 12), 0);
}

// `text` compressed by zlib's deflate with `window_bits` (15 + 16 gzip, 15 zlib, -15 raw), as
// Python's gzip.compress / zlib.compress write it.
std::string Compressed(const std::string& text, int window_bits) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, text.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string Text(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

TEST(Oip, GzipAndDeflateBodiesAreInflatedOthersRefusedNamingTheCoding) {
  // A request as tritonclient compresses it (request_compression_algorithm): a binary header
  // and its float bytes, incompressible tail included.
  std::string body = Req(R"("name":"input","shape":[1,2,2],"datatype":"FP32",)"
                         R"("parameters":{"binary_data_size":16})");
  const float values[4] = {1.5f, -2.0f, 3.25f, 4.0f};
  body.append(reinterpret_cast<const char*>(values), sizeof values);
  std::string scratch;
  for (const auto& [coding, bits] : std::vector<std::pair<std::string, int>>{
           {"gzip", 15 + 16}, {"x-gzip", 15 + 16}, {"deflate", 15}, {"deflate", -15}}) {
    const std::string z = Compressed(body, bits);
    ASSERT_NE(z, body);
    auto out = oip::DecodeBody("inference_header_content_length=9&content_encoding=" + coding,
                               Bytes(z), 1 << 20, scratch);
    ASSERT_TRUE(out.ok()) << coding << " " << bits << ": " << out.status().ToString();
    EXPECT_EQ(Text(*out), body) << coding << " " << bits;
  }
  // None or identity: the body itself, not a copy.
  for (const std::string q : {"", "x=1", "content_encoding=identity", "content_encoding="}) {
    auto out = oip::DecodeBody(q, Bytes(body), 1 << 20, scratch);
    ASSERT_TRUE(out.ok()) << q;
    EXPECT_EQ(out->data(), Bytes(body).data()) << q;
    EXPECT_EQ(out->size(), body.size()) << q;
  }
  const std::string gz = Compressed(body, 15 + 16);
  auto refused = [&](const std::string& query, const std::string& bytes, size_t max) {
    auto out = oip::DecodeBody(query, Bytes(bytes), max, scratch);
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << query;
    return out.ok() ? std::string() : out.status().message();
  };
  EXPECT_EQ(refused("content_encoding=br", gz, 1 << 20),
            "Content-Encoding 'br' is not supported (gzip, deflate or none)");
  EXPECT_EQ(refused("content_encoding=invalid", gz, 1 << 20),
            "Content-Encoding 'invalid' is not supported (gzip, deflate or none)");
  EXPECT_EQ(refused("content_encoding=gzip", body, 1 << 20),
            "Content-Encoding gzip: the body is not gzip data (incorrect header check)");
  EXPECT_EQ(refused("content_encoding=gzip", gz.substr(0, gz.size() / 2), 1 << 20),
            "Content-Encoding gzip: the body is not gzip data (truncated)");
  EXPECT_EQ(refused("content_encoding=gzip", gz, body.size() - 1),
            "Content-Encoding gzip: the body inflates to more than " +
                std::to_string(body.size() - 1) + " bytes");
  // A body that inflates to exactly the limit is taken.
  auto exact = oip::DecodeBody("content_encoding=gzip", Bytes(gz), body.size(), scratch);
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  EXPECT_EQ(Text(*exact), body);
}

TEST_F(OipTest, JsonResponseBytesAndMetadata) {
  ASSERT_TRUE(
      Parse(Req(R"("name":"input","shape":[2,2,2],"datatype":"FP32","data":[1,2,3,4,5,6,7,8])"), &r,
            scratch)
          .ok());
  const float out[6] = {0.5f, -1.0f, 2.0f, 0.1f, 3.0f, 1e-7f};
  std::string resp;
  size_t json_len = 0;
  oip::WriteInferResponse(Info(), r, 12, out, resp, &json_len);
  EXPECT_EQ(resp,
            R"({"model_name":"fmnist","model_version":"12","id":"r1","outputs":[{"name":"logits",)"
            R"("datatype":"FP32","shape":[2,3],"data":[0.5,-1,2,0.1,3,1e-07]}]})"
            "\n");
  EXPECT_EQ(json_len, resp.size());
  auto parsed = Json::parse(resp);
  EXPECT_FLOAT_EQ(parsed["outputs"][0]["data"][3].get<float>(), 0.1f);

  auto meta = Json::parse(oip::ModelMetadataJson(Info(), 12));
  EXPECT_EQ(meta["name"], "fmnist");
  EXPECT_EQ(meta["versions"], Json::array({"12"}));
  EXPECT_EQ(meta["inputs"][0]["name"], "input");
  EXPECT_EQ(meta["inputs"][0]["datatype"], "FP32");
  EXPECT_EQ(meta["inputs"][0]["shape"], Json::array({-1, 2, 2}));
  EXPECT_EQ(meta["outputs"][0]["shape"], Json::array({-1, 3}));
  EXPECT_EQ(oip::ErrorJson("bad \"x\""), "{\"error\":\"bad \\\"x\\\"\"}\n");
}

// out[r] = {sum of row r, version, batch size}: each request can check it got its own rows,
// which version ran it, and that it shared a batch.
class FakeExecutable final : public inference::Executable {
 public:
  FakeExecutable(float version, std::atomic<int>* running = nullptr)
      : version_(version), running_(running) {}
  Status Run(const inference::BatchIO& io) override {
    if (io.batch <= 0 || io.input.size() != size_t(io.batch) * 4 ||
        io.output.size() != size_t(io.batch) * 3) {
      return InvalidArgument("bad spans");
    }
    if (running_ && running_->fetch_add(1) != 0) return Internal("two batches at once");
    std::this_thread::sleep_for(std::chrono::microseconds(300));  // a batch takes a while
    for (int64_t r = 0; r < io.batch; ++r) {
      float s = 0;
      for (int k = 0; k < 4; ++k) s += io.input[r * 4 + k];
      io.output[r * 3] = s;
      io.output[r * 3 + 1] = version_;
      io.output[r * 3 + 2] = static_cast<float>(io.batch);
    }
    if (running_) running_->fetch_sub(1);
    return {};
  }
  const std::vector<int64_t>& input_shape() const override { return in_; }
  const std::vector<int64_t>& output_shape() const override { return out_; }

 private:
  float version_;
  std::atomic<int>* running_;
  std::vector<int64_t> in_ = {2, 2};
  std::vector<int64_t> out_ = {3};
};

std::shared_ptr<const ServingModel> Version(uint64_t v, std::atomic<int>* running = nullptr) {
  auto m = std::make_shared<ServingModel>();
  m->executable = std::make_shared<FakeExecutable>(static_cast<float>(v), running);
  m->version = v;
  return m;
}

// oip.cc writes its JSON with common's escaper (json_escape.h): a model name or message with
// invalid UTF-8 comes out as U+FFFD and the body still parses (nlohmann rejects invalid UTF-8),
// control characters as \u00XX so an id round-trips.
TEST_F(OipTest, InvalidUtf8InNamesAndMessagesIsReplacedAndTheJsonParses) {
  EXPECT_EQ(oip::ErrorJson("model 'fm\xFFnist\xC3' not found\n"),
            "{\"error\":\"model 'fm\xEF\xBF\xBDnist\xEF\xBF\xBD' not found\\u000a\"}\n");
  EXPECT_EQ(Json::parse(oip::ErrorJson("\xC0\xAF \xE2\x82\xAC"))["error"],
            "\xEF\xBF\xBD\xEF\xBF\xBD \xE2\x82\xAC");

  // The parser quotes the first 40 bytes of a bad element: here 19 two-byte characters and the
  // first byte of the 20th.
  std::string long_text;
  for (int i = 0; i < 30; ++i) long_text += "\xC3\xA9";
  const Status st = Parse(
      Req(R"("name":"input","shape":[1,2,2],"datatype":"FP32","data":[")" + long_text + "\"]"), &r,
      scratch);
  ASSERT_FALSE(st.ok());
  const std::string cut = "\"" + long_text.substr(0, 38) + "\xEF\xBF\xBD)";  // the message's end
  const std::string body = oip::ErrorJson(st.message());
  EXPECT_NE(body.find("\\" + cut + "\"}"), std::string::npos) << body;
  const std::string error = Json::parse(body)["error"];
  ASSERT_GE(error.size(), cut.size());
  EXPECT_EQ(error.substr(error.size() - cut.size()), cut);

  ASSERT_TRUE(Parse("{\"id\":\"a\\nb\",\"inputs\":[{\"name\":\"input\",\"shape\":[1,2,2],"
                    "\"datatype\":\"FP32\",\"data\":[1,2,3,4]}]}",
                    &r, scratch)
                  .ok());
  oip::ModelInfo info = Info();
  info.name = "fm\xFFnist";
  info.output_name = "lo\xE2\x82gits";
  const float out[3] = {1, 2, 3};
  std::string resp;
  size_t json_len = 0;
  oip::WriteInferResponse(info, r, 3, out, resp, &json_len);
  EXPECT_EQ(resp,
            "{\"model_name\":\"fm\xEF\xBF\xBDnist\",\"model_version\":\"3\",\"id\":\"a\\u000ab\","
            "\"outputs\":[{\"name\":\"lo\xEF\xBF\xBD\xEF\xBF\xBDgits\",\"datatype\":\"FP32\","
            "\"shape\":[1,3],"
            "\"data\":[1,2,3]}]}\n");
  const Json parsed = Json::parse(resp);
  EXPECT_EQ(parsed["id"], "a\nb");
  EXPECT_EQ(parsed["model_name"], "fm\xEF\xBF\xBDnist");

  const Json meta = Json::parse(oip::ModelMetadataJson(info, 3));
  EXPECT_EQ(meta["name"], "fm\xEF\xBF\xBDnist");
  EXPECT_EQ(meta["outputs"][0]["name"], "lo\xEF\xBF\xBDgits");
}

TEST(DynamicBatcher, ConcurrentRequestsShareBatchesAndEachGetsItsRows) {
  std::atomic<int> running{0};
  DynamicBatcher batcher({8, std::chrono::milliseconds(5)}, Version(1, &running));
  constexpr int kThreads = 16, kPerThread = 20;
  std::atomic<int> wrong{0}, shared{0};
  testing::Threads(kThreads, [&](int t) {
    for (int i = 0; i < kPerThread; ++i) {
      const int64_t rows = 1 + (t + i) % 2;
      std::vector<float> in(rows * 4), out(rows * 3);
      for (int64_t r = 0; r < rows; ++r) {
        for (int k = 0; k < 4; ++k) in[r * 4 + k] = float(t * 1000 + i * 10 + r);
      }
      auto v = batcher.Infer(in, rows, out);
      if (!v.ok() || *v != 1) {
        ++wrong;
        continue;
      }
      for (int64_t r = 0; r < rows; ++r) {
        if (out[r * 3] != 4.0f * float(t * 1000 + i * 10 + r) || out[r * 3 + 1] != 1.0f) ++wrong;
      }
      if (out[2] > float(rows)) ++shared;
    }
  }).Join();
  EXPECT_EQ(wrong.load(), 0);
  const BatcherStats s = batcher.stats();
  EXPECT_EQ(s.requests, uint64_t(kThreads * kPerThread));
  EXPECT_LT(s.batches, s.requests / 2) << "requests from many threads should share batches";
  EXPECT_GT(shared.load(), 0);
  EXPECT_EQ(s.failed_batches, 0u);
  uint64_t hist_batches = 0, hist_rows = 0;
  for (size_t rows = 0; rows < s.batch_rows_histogram.size(); ++rows) {
    hist_batches += s.batch_rows_histogram[rows];
    hist_rows += rows * s.batch_rows_histogram[rows];
  }
  EXPECT_EQ(hist_batches, s.batches);
  EXPECT_EQ(hist_rows, s.rows);
  EXPECT_EQ(s.batch_rows_histogram[0], 0u);
}

TEST(DynamicBatcher, FirstRequestWaitsAtMostTheQueueDelay) {
  DynamicBatcher batcher({32, std::chrono::milliseconds(20)}, Version(1));
  std::vector<float> in(4, 1.0f), out(3);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(batcher.Infer(in, 1, out).ok());
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, std::chrono::milliseconds(19));
  EXPECT_LT(waited, std::chrono::seconds(2));
  EXPECT_EQ(out[2], 1.0f);
  EXPECT_FALSE(batcher.Infer(in, 0, out).ok());
  EXPECT_FALSE(batcher.Infer(in, 33, out).ok());
}

TEST(DynamicBatcher, HotSwapUnderLoadVersionsOnlyGoUpAndNothingFails) {
  DynamicBatcher batcher({8, std::chrono::microseconds(500)}, Version(1));
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0}, regressions{0}, mismatched{0};
  testing::Threads callers(8, [&](int) {
    uint64_t last = 0;
    std::vector<float> in(4, 2.0f), out(3);
    while (!stop.load()) {
      auto v = batcher.Infer(in, 1, out);
      if (!v.ok()) {
        ++failures;
        continue;
      }
      if (*v < last) ++regressions;
      if (out[1] != float(*v)) ++mismatched;  // the version that ran is the one reported
      last = *v;
    }
  });
  for (uint64_t v = 2; v <= 20; ++v) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    batcher.Swap(Version(v));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop = true;
  callers.Join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(regressions.load(), 0);
  EXPECT_EQ(mismatched.load(), 0);
  EXPECT_EQ(batcher.current()->version, 20u);
  EXPECT_EQ(batcher.stats().swaps, 19u);
}

}  // namespace
}  // namespace shoal
