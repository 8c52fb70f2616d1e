#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shoal/common/assign_or_return.h"
#include "shoal/common/config.h"
#include "shoal/common/descriptor.h"
#include "shoal/common/file_io.h"
#include "shoal/common/http_status.h"
#include "shoal/common/json_escape.h"
#include "shoal/common/payload.h"
#include "shoal/common/query_string.h"
#include "shoal/common/status.h"

namespace shoal {
namespace {

TEST(Status, CodesMapToHttp) {
  EXPECT_EQ(HttpStatusFor(StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(StatusCode::kResourceExhausted), 503);
  EXPECT_EQ(HttpStatusFor(StatusCode::kTooLarge), 413);
  EXPECT_EQ(HttpStatusFor(StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(NotFound("x").ToString(), "NOT_FOUND: x");
  EXPECT_EQ(ErrnoStatus("open", ENOENT).code(), StatusCode::kNotFound);
  Result<int> r = 5;
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(*r, 5);
  Result<int> e = InvalidArgument("bad");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), "bad");
}

// SHOAL_ASSIGN_OR_RETURN's callers: each counts how far it got, so a test sees whether the
// statements after the macro ran.
Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}
Result<std::unique_ptr<std::string>> Boxed(std::string s) {
  if (s.empty()) return NotFound("empty");
  return std::make_unique<std::string>(std::move(s));
}
Result<int> Quarter(int x, int* steps) {
  SHOAL_ASSIGN_OR_RETURN(int half, Half(x));
  ++*steps;
  SHOAL_ASSIGN_OR_RETURN(half, Half(half));  // an existing variable
  ++*steps;
  return half;
}
Status Unbox(std::string s, std::string* out) {
  SHOAL_ASSIGN_OR_RETURN(auto box, Boxed(std::move(s)));  // move-only
  *out = *box;
  return Status::Ok();
}
Result<size_t> CountOf(int key) {
  // An expression with a top-level comma (template arguments) needs no extra parentheses.
  SHOAL_ASSIGN_OR_RETURN(auto m, Result<std::map<int, int>>(std::map<int, int>{{1, 2}, {3, 4}}));
  return m.count(key);
}

TEST(Status, AssignOrReturnGivesTheValue) {
  int steps = 0;
  Result<int> r = Quarter(12, &steps);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 3);
  EXPECT_EQ(steps, 2);
  Result<size_t> n = CountOf(3);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1U);
}

TEST(Status, AssignOrReturnPropagatesTheErrorWithItsMessage) {
  int steps = 0;
  Result<int> first = Quarter(7, &steps);  // fails at the first macro
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(first.status().message(), "odd: 7");
  EXPECT_EQ(steps, 0);
  Result<int> second = Quarter(6, &steps);  // 6 -> 3, then fails at the second
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(), "odd: 3");
  EXPECT_EQ(steps, 1);
}

TEST(Status, AssignOrReturnMovesMoveOnlyValues) {
  std::string out;
  ASSERT_TRUE(Unbox("payload", &out).ok());
  EXPECT_EQ(out, "payload");
  Status st = Unbox("", &out);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_EQ(st.message(), "empty");
  EXPECT_EQ(out, "payload");  // untouched on error
}

TEST(Status, HttpStatusesReadBackToTheirCodes) {
  for (StatusCode c :
       {StatusCode::kOk, StatusCode::kInvalidArgument, StatusCode::kNotFound,
        StatusCode::kAlreadyExists, StatusCode::kResourceExhausted, StatusCode::kUnavailable,
        StatusCode::kDeadlineExceeded, StatusCode::kTooLarge, StatusCode::kPermissionDenied,
        StatusCode::kUnauthenticated, StatusCode::kInternal}) {
    EXPECT_EQ(StatusCodeForHttp(HttpStatusFor(c)), c) << StatusCodeName(c);
  }
  EXPECT_EQ(StatusCodeForHttp(401), StatusCode::kUnauthenticated);
  EXPECT_EQ(StatusCodeForHttp(502), StatusCode::kUnavailable);
  EXPECT_EQ(StatusCodeForHttp(418), std::nullopt);
  EXPECT_EQ(StatusCodeForHttp(429), std::nullopt);
  EXPECT_STREQ(StatusCodeName(StatusCode::kTooLarge), "TOO_LARGE");
  EXPECT_STREQ(StatusCodeName(static_cast<StatusCode>(99)), "UNKNOWN");
  EXPECT_EQ(HttpStatusFor(static_cast<StatusCode>(99)), 500);
}

TEST(Config, DefaultsAndOverrides) {
  auto c = NodeConfig::LoadString("listen_port: 9000\ndataplane: unix\nnode_name: n1\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listen_port, 9000);
  EXPECT_EQ(c->dataplane, DataPlaneMode::kUnix);
  EXPECT_EQ(c->node_name, "n1");
  EXPECT_EQ(c->pool_bytes, 1ull << 30);  // default untouched
  EXPECT_EQ(c->instance_start, InstanceStart::kZygote);
  auto spawn = NodeConfig::LoadString("instance_start: spawn\nzygote_timeout_ms: 500\n");
  ASSERT_TRUE(spawn.ok());
  EXPECT_EQ(spawn->instance_start, InstanceStart::kSpawn);
  EXPECT_EQ(spawn->zygote_timeout_ms, 500u);
  EXPECT_FALSE(c->pool_prefault);
  auto prefault = NodeConfig::LoadString("pool_prefault: true\n");
  ASSERT_TRUE(prefault.ok());
  EXPECT_TRUE(prefault->pool_prefault);
  EXPECT_NE(prefault->ToYaml().find("pool_prefault: true"), std::string::npos);
  EXPECT_EQ(c->pool_warm_bytes, uint64_t{256} << 20);
  auto cold = NodeConfig::LoadString("pool_warm_bytes: 0\n");
  ASSERT_TRUE(cold.ok());
  EXPECT_EQ(cold->pool_warm_bytes, 0u);
  EXPECT_NE(cold->ToYaml().find("pool_warm_bytes: 0"), std::string::npos);
  // The printed config loads back to the same values.
  auto again = NodeConfig::LoadString(c->ToYaml());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ToYaml(), c->ToYaml());
}

TEST(Config, ErrorsNameTheKey) {
  auto unknown = NodeConfig::LoadString("listen_port: 1\nlisten_prot: 2\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(), "config: unknown key 'listen_prot' (line 2)");
  auto bad = NodeConfig::LoadString("listen_port: many\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "config: listen_port: bad value (line 1)");
  auto mode = NodeConfig::LoadString("dataplane: rdma\n");
  EXPECT_EQ(mode.status().message(),
            "config: dataplane: must be auto, sockmap or unix, not 'rdma'");
  auto start = NodeConfig::LoadString("instance_start: fork\n");
  EXPECT_EQ(start.status().message(),
            "config: instance_start: must be zygote or spawn, not 'fork'");
  EXPECT_EQ(NodeConfig::LoadString("pool_prefault: sometimes\n").status().message(),
            "config: pool_prefault: bad value (line 1)");
  EXPECT_EQ(NodeConfig::LoadString("pool_warm_bytes: lots\n").status().message(),
            "config: pool_warm_bytes: bad value (line 1)");
  auto small = NodeConfig::LoadString("pool_bytes: 1000\n");
  EXPECT_EQ(small.status().message(), "config: pool_bytes: must be >= 16 MiB");
  EXPECT_EQ(NodeConfig::LoadString("detect: true\ndetect_syscalls: sometimes\n").status().message(),
            "config: detect_syscalls: must be true, false or sampled, not 'sometimes' (line 2)");
  EXPECT_EQ(NodeConfig::LoadString("detect_sample_percent: 0\n").status().message(),
            "config: detect_sample_percent: must be 1 to 100");
  EXPECT_EQ(NodeConfig::LoadString("detect_sample_percent: half\n").status().message(),
            "config: detect_sample_percent: bad value (line 1)");
}

TEST(Config, DetectSyscallsModes) {
  auto c = NodeConfig::LoadString("");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->detect_syscalls, DetectSyscalls::kSampled);  // the default (bench-detect)
  EXPECT_EQ(c->detect_sample_percent, 10u);
  const std::pair<const char*, DetectSyscalls> modes[] = {{"true", DetectSyscalls::kOn},
                                                          {"false", DetectSyscalls::kOff},
                                                          {"sampled", DetectSyscalls::kSampled}};
  for (const auto& [word, mode] : modes) {
    auto m = NodeConfig::LoadString(std::string("detect_syscalls: ") + word +
                                    "\ndetect_sample_percent: 25\n");
    ASSERT_TRUE(m.ok()) << word << ": " << m.status().ToString();
    EXPECT_EQ(m->detect_syscalls, mode) << word;
    EXPECT_EQ(m->detect_sample_percent, 25u);
    EXPECT_NE(m->ToYaml().find(std::string("detect_syscalls: ") + word), std::string::npos);
    auto again = NodeConfig::LoadString(m->ToYaml());
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->detect_syscalls, mode) << word;
  }
}

TEST(FileIo, ReadFileBytesReturnsEveryByteOrNulloptWhenItCannotOpen) {
  const std::string path = "/tmp/shoal-file-io-test-" + std::to_string(getpid());
  std::string bytes("a\0b\r\n\xff", 6);  // a NUL, a CR LF and a byte above 0x7f
  bytes += std::string(70000, 'z');
  ASSERT_TRUE(WriteFileAtomic(path, bytes).ok());
  const auto read = ReadFileBytes(path);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(*read, bytes);
  ASSERT_TRUE(WriteFileAtomic(path, "").ok());
  EXPECT_EQ(ReadFileBytes(path), std::optional<std::string>(""));
  unlink(path.c_str());
  EXPECT_EQ(ReadFileBytes(path), std::nullopt);
}

TEST(Descriptor, LayoutIsFixed) {
  EXPECT_EQ(sizeof(EventDescriptor), 64u);
  EXPECT_EQ(offsetof(EventDescriptor, target), 0u);
  EXPECT_EQ(offsetof(EventDescriptor, kind), 6u);
  EXPECT_EQ(offsetof(EventDescriptor, function_id), 8u);
  EXPECT_EQ(offsetof(EventDescriptor, length), 32u);
  EXPECT_TRUE(IsGatewayEndpoint(GatewayEndpoint(3)));
  EXPECT_FALSE(IsGatewayEndpoint(kManagerEndpoint));
}

TEST(Payload, HeadRoundTripsAndRejectsDamage) {
  std::vector<std::byte> buf(4096);
  const size_t off = PayloadBodyOffset(4, 3, 10);
  EXPECT_EQ(off % 64, 0u);
  WritePayloadHead(buf, 3, 201, "/a/b", "x=1", "text/plain", 100);
  PayloadView v = ReadPayload(buf);
  ASSERT_TRUE(v.valid);
  EXPECT_EQ(v.path, "/a/b");
  EXPECT_EQ(v.query, "x=1");
  EXPECT_EQ(v.content_type, "text/plain");
  EXPECT_EQ(v.status, 201);
  EXPECT_EQ(v.method, 3);
  EXPECT_EQ(v.body.size(), 100u);
  EXPECT_EQ(v.body.data(), buf.data() + off);
  // A head that claims more body than the buffer holds is refused.
  WritePayloadHead(buf, 3, 200, "", "", "", 5000);
  EXPECT_FALSE(ReadPayload(buf).valid);
  buf[0] = std::byte{0};
  EXPECT_FALSE(ReadPayload(buf).valid);
  EXPECT_FALSE(ReadPayload(std::span<std::byte>(buf.data(), 8)).valid);
}

}  // namespace
}  // namespace shoal

// A message quoting a client's bytes stays valid JSON: schemathesis sent a PNG to
// /v2/models/{m}/infer, and the handler's "malformed JSON ... last read: '<0x89>'" error went out
// as a body no JSON parser accepts.
TEST(JsonEscapeTest, InvalidUtf8BecomesTheReplacementCharacter) {
  std::string out;
  shoal::AppendJsonEscaped(out,
                           "a\"b\\c\n\x89PNG \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"
                           " \xC0\xAF \xED\xA0\x80 \xF4\x90\x80\x80 \xE2\x82");
  EXPECT_EQ(out,
            "a\\\"b\\\\c \xEF\xBF\xBDPNG \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 "
            "\xEF\xBF\xBD\xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD "
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD");
}

// kEscape (oip.cc's JSON): control characters as \u00XX instead of spaces, the rest the same.
TEST(JsonEscapeTest, EscapeModeWritesControlCharactersAsUnicodeEscapes) {
  std::string out;
  shoal::AppendJsonEscaped(out, "a\n\x01\x1F\"\\\xFF\xC3\xA9", shoal::JsonControl::kEscape);
  EXPECT_EQ(out, "a\\u000a\\u0001\\u001f\\\"\\\\\xEF\xBF\xBD\xC3\xA9");
}

namespace shoal {
namespace {

TEST(QueryString, ValuesByExactKeyFirstOccurrenceWins) {
  const std::string_view q = "max=10&maxx=3&flag&empty=&token=a%2Bb+c%zz&max=99";
  EXPECT_EQ(RawQueryValue(q, "max"), "10");
  EXPECT_EQ(RawQueryValue(q, "maxx"), "3");
  EXPECT_EQ(RawQueryValue(q, "flag"), "");
  EXPECT_EQ(RawQueryValue(q, "empty"), "");
  EXPECT_EQ(RawQueryValue(q, "ma"), std::nullopt);
  EXPECT_EQ(RawQueryValue("", "max"), std::nullopt);
  // %XX decoded, '+' kept, a malformed escape left as it is.
  EXPECT_EQ(QueryValue(q, "token"), "a+b+c%zz");
  EXPECT_EQ(QueryValue(q, "absent"), std::nullopt);
}

TEST(QueryString, UintIsAWholeDecimalNumberOrRefused) {
  uint64_t v = 7;
  EXPECT_TRUE(QueryUint("a=1", "offset", &v));  // absent: left as it is
  EXPECT_EQ(v, 7u);
  EXPECT_TRUE(QueryUint("offset=42", "offset", &v));
  EXPECT_EQ(v, 42u);
  for (const char* bad : {"offset=", "offset", "offset=-1", "offset=1.5", "offset=3x",
                          "offset=18446744073709551616"}) {
    EXPECT_FALSE(QueryUint(bad, "offset", &v)) << bad;
    EXPECT_EQ(v, 42u) << bad;
  }
}

}  // namespace
}  // namespace shoal
