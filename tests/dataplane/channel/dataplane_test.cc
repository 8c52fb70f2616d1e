// The data plane against the real kernel and real processes: descriptors cross a fork()ed
// child and come back, in both modes; errors for missing targets; the BPF counters; pins.
// Sockmap cases skip, with the reason, where BPF cannot be loaded.
#include "shoal/dataplane/channel/dataplane.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "shoal/dataplane/channel/channel.h"
#include "shoal/dataplane/channel/sockmap_channel.h"
#include "shoal/dataplane/channel/sockmap_dataplane.h"
#include "tests/support/bpf_capability.h"

namespace shoal {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kGateway = GatewayEndpoint(0);
constexpr uint32_t kInstance = 0x00010002u;

NodeConfig TestConfig(DataPlaneMode mode) {
  static int counter = 0;
  NodeConfig c;
  ++counter;
  c.node_name = "dp-test-" + std::to_string(getpid()) + "-" + std::to_string(counter);
  c.bpf_pin_root =
      "/sys/fs/bpf/shoal-test-" + std::to_string(getpid()) + "-" + std::to_string(counter);
  c.dataplane = mode;
  return c;
}

EventDescriptor MakeDescriptor(uint32_t target, uint32_t source, EventKind kind, uint32_t fid,
                               uint64_t i) {
  EventDescriptor d{};
  d.target = target;
  d.version = kDescriptorVersion;
  d.kind = static_cast<uint16_t>(kind);
  d.function_id = fid;
  d.source = source;
  d.request_id = 0x1000000000ull + i;
  d.offset = 4096 * i;
  d.length = 100 + i;
  d.status = 0;
  d.aux_value = static_cast<float>(i * 3);
  d.timestamp_ns = 777 + i;
  d.aux_offset = ~i;
  return d;
}

// Receives exactly `n` descriptors, waiting in poll() (no busy loop), or fails after 5 s idle.
Result<std::vector<EventDescriptor>> ReceiveN(DescriptorChannel& ch, size_t n) {
  std::vector<EventDescriptor> got;
  EventDescriptor buf[64];
  while (got.size() < n) {
    pollfd p{ch.fd(), POLLIN, 0};
    int r = poll(&p, 1, 5000);
    if (r == 0) {
      return Status(StatusCode::kDeadlineExceeded,
                    "received " + std::to_string(got.size()) + " of " + std::to_string(n));
    }
    auto k = ch.Receive(std::span(buf, std::min<size_t>(64, n - got.size())));
    if (!k.ok()) return k.status();
    got.insert(got.end(), buf, buf + *k);
  }
  return got;
}

class DataPlaneTest : public ::testing::TestWithParam<DataPlaneKind> {
 protected:
  void SetUp() override {
    config_ = TestConfig(GetParam() == DataPlaneKind::kSockmap ? DataPlaneMode::kSockmap
                                                               : DataPlaneMode::kUnix);
    if (GetParam() == DataPlaneKind::kSockmap) {
      if (const std::string absent = bpf_test::BpfCapabilityAbsent(); !absent.empty()) {
        GTEST_SKIP() << "sockmap data plane cannot run here: " << absent;
      }
    }
    // With the capability present (checked above), a sockmap data plane that fails to load
    // is a failure, not a skip.
    auto dp = CreateDataPlane(config_);
    ASSERT_TRUE(dp.ok()) << dp.status().ToString();
    dp_ = std::move(dp).value();
    ASSERT_EQ(dp_->kind(), GetParam());
  }
  void TearDown() override {
    dp_.reset();
    std::error_code ec;
    fs::remove_all(config_.bpf_pin_root, ec);
  }
  std::unique_ptr<DescriptorChannel> Channel(const Endpoint& ep) {
    return OpenChannel(dup(ep.fd()), dp_->kind(), config_.node_name);
  }

  NodeConfig config_;
  std::unique_ptr<DataPlane> dp_;
};

// The child echoes each request back to its source as a response, changing only target,
// source, kind and status; the parent compares every field.
TEST_P(DataPlaneTest, DescriptorsCrossAProcessBoundaryAndComeBack) {
  auto gw = dp_->CreateEndpoint(kGateway);
  ASSERT_TRUE(gw.ok()) << gw.status().ToString();
  auto inst = dp_->CreateEndpoint(kInstance);
  ASSERT_TRUE(inst.ok()) << inst.status().ToString();
  constexpr size_t kCount = 200;

  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto ch = OpenChannel(inst->ReleaseFd(), dp_->kind(), config_.node_name);
    auto got = ReceiveN(*ch, kCount);
    if (!got.ok()) _exit(2);
    for (EventDescriptor d : *got) {
      d.target = d.source;
      d.source = kInstance;
      d.kind = static_cast<uint16_t>(EventKind::kResponse);
      d.status = 200;
      Status st;
      while ((st = ch->Send(d)).code() == StatusCode::kResourceExhausted) usleep(100);
      if (!st.ok()) _exit(3);
    }
    _exit(0);
  }

  auto ch = Channel(*gw);
  for (size_t i = 0; i < kCount; ++i) {
    Status st;
    auto d = MakeDescriptor(kInstance, kGateway, EventKind::kRequest, 5, i);
    // unix mode: the child's queue holds net.unix.max_dgram_qlen datagrams; wait for room.
    while ((st = ch->Send(d)).code() == StatusCode::kResourceExhausted) usleep(100);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  auto got = ReceiveN(*ch, kCount);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), kCount);
  for (size_t i = 0; i < kCount; ++i) {
    const EventDescriptor want = MakeDescriptor(kInstance, kGateway, EventKind::kRequest, 5, i);
    const EventDescriptor& d = (*got)[i];
    EXPECT_EQ(d.target, kGateway);
    EXPECT_EQ(d.source, kInstance);
    EXPECT_EQ(d.kind, static_cast<uint16_t>(EventKind::kResponse));
    EXPECT_EQ(d.status, 200u);
    EXPECT_EQ(d.version, want.version);
    EXPECT_EQ(d.function_id, want.function_id);
    EXPECT_EQ(d.request_id, want.request_id) << i;
    EXPECT_EQ(d.offset, want.offset);
    EXPECT_EQ(d.length, want.length);
    EXPECT_EQ(d.aux_value, want.aux_value);
    EXPECT_EQ(d.timestamp_ns, want.timestamp_ns);
    EXPECT_EQ(d.aux_offset, want.aux_offset);
  }
}

TEST_P(DataPlaneTest, SendingToAMissingEndpointIsUnavailable) {
  auto gw = dp_->CreateEndpoint(kGateway);
  ASSERT_TRUE(gw.ok()) << gw.status().ToString();
  auto ch = Channel(*gw);
  Status st = ch->Send(MakeDescriptor(0x00ABCDEFu, kGateway, EventKind::kRequest, 9, 1));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();

  // A removed endpoint is missing too (sockmap: deleted from the SOCKHASH; unix: its socket
  // closed).
  {
    auto inst = dp_->CreateEndpoint(kInstance);
    ASSERT_TRUE(inst.ok()) << inst.status().ToString();
    ASSERT_TRUE(ch->Send(MakeDescriptor(kInstance, kGateway, EventKind::kRequest, 9, 2)).ok());
    dp_->RemoveEndpoint(kInstance);
  }
  st = ch->Send(MakeDescriptor(kInstance, kGateway, EventKind::kRequest, 9, 3));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();

  if (auto c = dp_->Counters(9)) {
    EXPECT_EQ(c->drops, 2u);
  }
}

TEST_P(DataPlaneTest, DuplicateOrReplacedEndpointKeepsRouting) {
  // Creating an endpoint twice: sockmap replaces the registration, unix refuses the name.
  auto a = dp_->CreateEndpoint(kInstance);
  ASSERT_TRUE(a.ok());
  auto b = dp_->CreateEndpoint(kInstance);
  if (dp_->kind() == DataPlaneKind::kUnix) {
    EXPECT_EQ(b.status().code(), StatusCode::kAlreadyExists);
  } else {
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    auto gw = dp_->CreateEndpoint(kGateway);
    ASSERT_TRUE(gw.ok());
    auto ch = Channel(*gw);
    ASSERT_TRUE(ch->Send(MakeDescriptor(kInstance, kGateway, EventKind::kPing, 1, 1)).ok());
    auto rb = Channel(*b);
    auto got = ReceiveN(*rb, 1);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ((*got)[0].request_id, MakeDescriptor(0, 0, EventKind::kPing, 1, 1).request_id);
  }
}

TEST_P(DataPlaneTest, EndpointFdsAreCloseOnExec) {
  auto ep = dp_->CreateEndpoint(kInstance);
  ASSERT_TRUE(ep.ok());
  EXPECT_TRUE(fcntl(ep->fd(), F_GETFD) & FD_CLOEXEC);
}

INSTANTIATE_TEST_SUITE_P(Modes, DataPlaneTest,
                         ::testing::Values(DataPlaneKind::kSockmap, DataPlaneKind::kUnix),
                         [](const auto& info) {
                           return std::string(DataPlaneKindName(info.param));
                         });

class SockmapCountersTest : public DataPlaneTest {};

TEST_P(SockmapCountersTest, CountsEventsBytesRequestsResponsesExactly) {
  constexpr uint32_t kFn = 77;
  auto gw = dp_->CreateEndpoint(kGateway);
  auto inst = dp_->CreateEndpoint(kInstance);
  ASSERT_TRUE(gw.ok() && inst.ok());
  auto gch = Channel(*gw);
  auto ich = Channel(*inst);

  auto before = dp_->Counters(kFn);
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->events, 0u);

  for (uint64_t i = 0; i < 1000; ++i) {
    auto d = MakeDescriptor(kInstance, kGateway, EventKind::kRequest, kFn, i);
    d.length = 4096;
    ASSERT_TRUE(gch->Send(d).ok());
  }
  auto c = dp_->Counters(kFn);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->events, 1000u);
  EXPECT_EQ(c->bytes, 4096000u);
  EXPECT_EQ(c->inflight, 1000);
  EXPECT_EQ(c->drops, 0u);

  auto reqs = ReceiveN(*ich, 1000);
  ASSERT_TRUE(reqs.ok()) << reqs.status().ToString();
  for (size_t i = 0; i < 1000; ++i) {
    auto d = (*reqs)[i];
    d.target = kGateway;
    d.source = kInstance;
    d.kind = static_cast<uint16_t>(i % 10 == 0 ? EventKind::kError : EventKind::kResponse);
    ASSERT_TRUE(ich->Send(d).ok());
  }
  // Other kinds and other functions count as events only, for their own function.
  ASSERT_TRUE(gch->Send(MakeDescriptor(kInstance, kGateway, EventKind::kPing, kFn, 1)).ok());
  ASSERT_TRUE(gch->Send(MakeDescriptor(kInstance, kGateway, EventKind::kRequest, kFn + 1, 1)).ok());
  // Function ids beyond the map are redirected but not counted.
  ASSERT_TRUE(
      gch->Send(MakeDescriptor(kInstance, kGateway, EventKind::kRequest, kMaxFunctions, 1)).ok());

  c = dp_->Counters(kFn);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->events, 2001u);
  EXPECT_EQ(c->bytes, 4096000u);  // responses name no request bytes
  EXPECT_EQ(c->inflight, 0);
  EXPECT_EQ(c->drops, 0u);
  auto other = dp_->Counters(kFn + 1);
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->events, 1u);
  EXPECT_EQ(other->inflight, 1);
  EXPECT_FALSE(dp_->Counters(kMaxFunctions).has_value());

  auto back = ReceiveN(*gch, 1000);
  ASSERT_TRUE(back.ok());
  auto rest = ReceiveN(*ich, 3);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ((*rest)[2].function_id, kMaxFunctions);
}

// SendMany: runs for two targets, interleaved, each reach their target whole and in order (one
// message per run of up to 64, each descriptor counted); a missing target stops it there.
TEST_P(SockmapCountersTest, SendManyDeliversEachTargetsDescriptorsInOrderAndStopsAtAMissingOne) {
  constexpr uint32_t kOther = kInstance + 1;
  auto gw = dp_->CreateEndpoint(kGateway);
  auto a = dp_->CreateEndpoint(kInstance);
  auto b = dp_->CreateEndpoint(kOther);
  ASSERT_TRUE(gw.ok() && a.ok() && b.ok());
  auto ch = Channel(*gw);
  // 150 descriptors: runs of 1, 2, ..., alternating targets, more than 64 in the last run.
  std::vector<EventDescriptor> out, want_a, want_b;
  for (uint64_t run = 1, i = 0; i < 150; ++run) {
    const uint32_t target = run % 2 ? kInstance : kOther;
    for (uint64_t k = 0; k < (run < 9 ? run : 150) && i < 150; ++k, ++i) {
      out.push_back(MakeDescriptor(target, kGateway, EventKind::kRequest, 11, i));
      (target == kInstance ? want_a : want_b).push_back(out.back());
    }
  }
  ASSERT_GT(want_a.size(), 64u);
  Status st;
  ASSERT_EQ(ch->SendMany(out, &st), out.size()) << st.ToString();
  for (auto [ep, want] : {std::pair{&*a, &want_a}, std::pair{&*b, &want_b}}) {
    auto got = ReceiveN(*Channel(*ep), want->size());
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    for (size_t i = 0; i < want->size(); ++i) {
      EXPECT_EQ(std::memcmp(&(*got)[i], &(*want)[i], sizeof(EventDescriptor)), 0) << i;
    }
  }
  {
    auto c = dp_->Counters(11);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->events, 150u);
    EXPECT_EQ(c->inflight, 150);  // 150 requests, no response yet
    uint64_t bytes = 0;
    for (const auto& d : out) bytes += d.length;
    EXPECT_EQ(c->bytes, bytes);
    EXPECT_EQ(c->drops, 0u);
  }

  // Two for kInstance, three for a missing target, one more for kInstance: two go, then the
  // missing target's first is the error.
  std::vector<EventDescriptor> gap = {
      MakeDescriptor(kInstance, kGateway, EventKind::kRequest, 12, 1),
      MakeDescriptor(kInstance, kGateway, EventKind::kRequest, 12, 2),
      MakeDescriptor(0x00ABCDEFu, kGateway, EventKind::kRequest, 12, 3),
      MakeDescriptor(0x00ABCDEFu, kGateway, EventKind::kRequest, 12, 4),
      MakeDescriptor(0x00ABCDEFu, kGateway, EventKind::kRequest, 12, 5),
      MakeDescriptor(kInstance, kGateway, EventKind::kRequest, 12, 6)};
  EXPECT_EQ(ch->SendMany(gap, &st), 2u);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find(std::to_string(0x00ABCDEFu)), std::string::npos) << st.message();
  auto got = ReceiveN(*Channel(*a), 2);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)[0].request_id, gap[0].request_id);
  EXPECT_EQ((*got)[1].request_id, gap[1].request_id);
}

TEST_P(SockmapCountersTest, PinsExistWhileLoadedAndGoAfterwards) {
  auto* sockmap = dynamic_cast<SockmapDataPlane*>(dp_.get());
  ASSERT_NE(sockmap, nullptr);
  const std::string dir = config_.bpf_pin_root + "/" + config_.node_name;
  EXPECT_EQ(sockmap->pin_dir(), dir);
  EXPECT_NE(dp_->Description().find(dir), std::string::npos) << dp_->Description();
  for (const char* name : {"sock_hash", "fn_counters", "shoal_redirect"}) {
    EXPECT_TRUE(fs::exists(fs::path(dir) / name)) << name;
  }
  dp_.reset();
  EXPECT_FALSE(fs::exists(dir));
}

TEST_P(SockmapCountersTest, BounceKeyIsReserved) {
  auto ep = dp_->CreateEndpoint(0xFFFFFFFFu);
  EXPECT_EQ(ep.status().code(), StatusCode::kInvalidArgument);
}

TEST_P(SockmapCountersTest, ShortMessagesPassToTheAnchorUncounted) {
  auto gw = dp_->CreateEndpoint(kGateway);
  ASSERT_TRUE(gw.ok());
  const char hello[] = "not a descriptor";
  ASSERT_EQ(send(gw->fd(), hello, sizeof(hello), MSG_DONTWAIT),
            static_cast<ssize_t>(sizeof(hello)));
  auto c = dp_->Counters(0);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->events, 0u);
  EXPECT_EQ(c->drops, 0u);
}

INSTANTIATE_TEST_SUITE_P(Sockmap, SockmapCountersTest, ::testing::Values(DataPlaneKind::kSockmap),
                         [](const auto&) { return std::string("sockmap"); });

TEST(DataPlaneAuto, PicksSockmapWhenBpfLoadsElseUnixWithTheReason) {
  NodeConfig config = TestConfig(DataPlaneMode::kAuto);
  auto dp = CreateDataPlane(config);
  ASSERT_TRUE(dp.ok()) << dp.status().ToString();
  if (bpf_test::BpfCapabilityAbsent().empty()) {
    EXPECT_EQ((*dp)->kind(), DataPlaneKind::kSockmap) << (*dp)->Description();
  } else {
    EXPECT_EQ((*dp)->kind(), DataPlaneKind::kUnix);
    EXPECT_NE((*dp)->Description().find("BPF unavailable"), std::string::npos);
  }
  dp->reset();
  std::error_code ec;
  fs::remove_all(config.bpf_pin_root, ec);
}

TEST(DataPlaneAuto, ExplicitSockmapFailureIsAnErrorNotAFallback) {
  NodeConfig config = TestConfig(DataPlaneMode::kSockmap);
  config.bpf_pin_root = "/proc/shoal-cannot-pin-here";
  auto dp = CreateDataPlane(config);
  EXPECT_FALSE(dp.ok());
  config.dataplane = DataPlaneMode::kAuto;
  auto fallback = CreateDataPlane(config);
  ASSERT_TRUE(fallback.ok()) << fallback.status().ToString();
  EXPECT_EQ((*fallback)->kind(), DataPlaneKind::kUnix);
  EXPECT_FALSE((*fallback)->Counters(0).has_value());
  EXPECT_NE((*fallback)->Description().find("BPF unavailable"), std::string::npos)
      << (*fallback)->Description();
}

TEST(UnixDataPlane, FullReceiverQueueIsResourceExhausted) {
  NodeConfig config = TestConfig(DataPlaneMode::kUnix);
  auto dp = CreateDataPlane(config);
  ASSERT_TRUE(dp.ok());
  auto gw = (*dp)->CreateEndpoint(kGateway);
  auto inst = (*dp)->CreateEndpoint(kInstance);
  ASSERT_TRUE(gw.ok() && inst.ok());
  auto ch = OpenChannel(gw->ReleaseFd(), DataPlaneKind::kUnix, config.node_name);
  Status st;
  int sent = 0;
  for (; sent < 1'000'000; ++sent) {
    st = ch->Send(MakeDescriptor(kInstance, kGateway, EventKind::kRequest, 1, sent));
    if (!st.ok()) break;
  }
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString() << " after " << sent;
  EXPECT_GT(sent, 0);
}

TEST(SockmapChannel, ReturnsOnlyWholeDescriptorsAndKeepsTheRemainder) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  SockmapChannel ch(sv[0]);
  EventDescriptor d[2] = {MakeDescriptor(1, 2, EventKind::kRequest, 3, 4),
                          MakeDescriptor(5, 6, EventKind::kResponse, 7, 8)};
  const auto* bytes = reinterpret_cast<const unsigned char*>(d);
  ASSERT_EQ(write(sv[1], bytes, 100), 100);
  EventDescriptor out[4];
  auto n = ch.Receive(out);
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 1u);
  EXPECT_EQ(std::memcmp(&out[0], &d[0], 64), 0);
  n = ch.Receive(out);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  ASSERT_EQ(write(sv[1], bytes + 100, 28), 28);
  n = ch.Receive(out);
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 1u);
  EXPECT_EQ(std::memcmp(&out[0], &d[1], 64), 0);
  close(sv[1]);
  n = ch.Receive(out);
  EXPECT_EQ(n.status().code(), StatusCode::kUnavailable);
}

TEST(Endpoint, MoveTransfersOwnershipAndReleaseFdGivesItUp) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  {
    Endpoint a(7, sv[0], sv[1]);
    Endpoint b(std::move(a));
    EXPECT_EQ(a.fd(), -1);  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(b.key(), 7u);
    EXPECT_EQ(b.fd(), sv[0]);
    Endpoint c;
    c = std::move(b);
    EXPECT_EQ(c.ReleaseFd(), sv[0]);
    EXPECT_EQ(c.fd(), -1);
  }
  // The anchor was closed by the destructor, the released fd was not.
  EXPECT_EQ(fcntl(sv[1], F_GETFD), -1);
  EXPECT_GE(fcntl(sv[0], F_GETFD), 0);
  close(sv[0]);
}

TEST(DataPlaneKind, NamesRoundTrip) {
  for (auto k : {DataPlaneKind::kSockmap, DataPlaneKind::kUnix}) {
    auto parsed = ParseDataPlaneKind(DataPlaneKindName(k));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, k);
  }
  EXPECT_EQ(ParseDataPlaneKind("dpdk").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shoal
