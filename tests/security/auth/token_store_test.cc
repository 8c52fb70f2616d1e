// TokenStore: tokens authenticate to their principal, the store keeps only hashes in a 0600
// file, revocation is immediate and durable, and bad input is refused with the field named.
#include "shoal/security/auth/token_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "tests/support/temp_dir.h"

namespace shoal::auth {
namespace {

class TokenStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { path_ = tmp_ / "tokens.json"; }
  std::string Read() {
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  shoal::testing::TempDir tmp_{"shoal-auth"};
  std::string path_;
};

TEST_F(TokenStoreTest, ATokenAuthenticatesToItsPrincipalAndOnlyItsHashIsStored) {
  auto store = TokenStore::Open(path_);
  ASSERT_TRUE(store.ok());
  auto t = (*store)->Create({"ci", Role::kDeployer, "team-a", ""});
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->token.size(), 6u + 12 + 1 + 64);
  EXPECT_EQ(t->token.substr(0, 6), "shoal_");
  EXPECT_EQ(t->token.substr(6, 12), t->info.id);
  auto who = (*store)->Authenticate(t->token);
  ASSERT_TRUE(who.ok());
  EXPECT_EQ(who->role, Role::kDeployer);
  EXPECT_EQ(who->ns, "team-a");
  EXPECT_EQ(who->name, "ci");
  EXPECT_EQ(who->token_id, t->info.id);

  const std::string file = Read();
  EXPECT_EQ(file.find(t->token.substr(19)), std::string::npos) << "secret stored in clear";
  EXPECT_NE(file.find(t->info.id), std::string::npos);
  EXPECT_NE(file.find("\"sha256\""), std::string::npos);
  struct stat st {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // A restart reads the same tokens back.
  auto again = TokenStore::Open(path_);
  ASSERT_TRUE(again.ok());
  auto who2 = (*again)->Authenticate(t->token);
  ASSERT_TRUE(who2.ok());
  EXPECT_EQ(who2->ns, "team-a");
  EXPECT_TRUE((*again)->HasRole(Role::kDeployer));
  EXPECT_FALSE((*again)->HasRole(Role::kAdmin));
}

TEST_F(TokenStoreTest, WrongMalformedAndRevokedTokensAre401) {
  auto store = TokenStore::Open(path_);
  ASSERT_TRUE(store.ok());
  auto t = (*store)->Create({"", Role::kViewer, "", ""});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->info.name, t->info.id);
  std::string flipped = t->token;
  flipped.back() = flipped.back() == '0' ? '1' : '0';
  std::string other_id = t->token;
  other_id[6] = other_id[6] == 'a' ? 'b' : 'a';
  for (const std::string& bad : {flipped, other_id, std::string(""), std::string("shoal_"),
                                 t->token + "0", t->token.substr(1), std::string("Bearer x")}) {
    auto r = (*store)->Authenticate(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated);
    EXPECT_EQ(r.status().message(),
              "the bearer token is not valid (malformed, unknown or revoked)");
  }
  ASSERT_TRUE((*store)->Revoke(t->info.id).ok());
  EXPECT_FALSE((*store)->Authenticate(t->token).ok());
  EXPECT_EQ((*store)->Revoke(t->info.id).code(), StatusCode::kNotFound);
  auto reopened = TokenStore::Open(path_);
  ASSERT_TRUE(reopened.ok());
  EXPECT_FALSE((*reopened)->Authenticate(t->token).ok());
  EXPECT_TRUE((*reopened)->List().empty());
}

TEST_F(TokenStoreTest, ScopeFieldsMustMatchTheRole) {
  auto store = TokenStore::Open(path_);
  ASSERT_TRUE(store.ok());
  struct Case {
    TokenRequest req;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {{"", Role::kDeployer, "", ""}, "namespace: role deployer needs a namespace"},
           {{"", Role::kInvoker, "Bad_NS", ""}, "namespace: role invoker needs a namespace"},
           {{"", Role::kAdmin, "a", ""}, "namespace: only deployer and invoker tokens have one"},
           {{"", Role::kFlClient, "", ""}, "job: role fl-client needs an FL job name"},
           {{"", Role::kViewer, "", "x"}, "job: only fl-client tokens have one"},
           {{"a\nb", Role::kViewer, "", ""}, "name: control characters are not allowed"}}) {
    auto r = (*store)->Create(c.req);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().rfind(c.error, 0), 0u) << r.status().message();
  }
  EXPECT_TRUE((*store)->List().empty());
}

TEST_F(TokenStoreTest, EphemeralTokensWorkButAreNeverWritten) {
  auto store = TokenStore::Open(path_);
  ASSERT_TRUE(store.ok());
  auto e = (*store)->Create({"instance:f", Role::kFlClient, "", "job-1"}, /*ephemeral=*/true);
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE((*store)->Authenticate(e->token).ok());
  EXPECT_TRUE((*store)->List().empty());
  EXPECT_FALSE(std::filesystem::exists(path_));
  ASSERT_TRUE((*store)->Create({"p", Role::kAdmin, "", ""}).ok());
  EXPECT_EQ(Read().find(e->info.id), std::string::npos);
  auto reopened = TokenStore::Open(path_);
  ASSERT_TRUE(reopened.ok());
  EXPECT_FALSE((*reopened)->Authenticate(e->token).ok());
}

TEST_F(TokenStoreTest, ADamagedFileIsRefusedAndALooseModeIsTightened) {
  { std::ofstream(path_) << "{\"tokens\": [{\"id\": \"x\"}]}"; }
  auto bad = TokenStore::Open(path_);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("malformed token record"), std::string::npos)
      << bad.status().message();
  { std::ofstream(path_) << "not json"; }
  EXPECT_FALSE(TokenStore::Open(path_).ok());
  { std::ofstream(path_) << "{\"tokens\": []}"; }
  chmod(path_.c_str(), 0644);
  ASSERT_TRUE(TokenStore::Open(path_).ok());
  struct stat st {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// A cluster's tokens: records made by one store (a controller's) accepted by another (a node's)
// as shared ones, beside its own; replaced, removed and refused when malformed.
TEST_F(TokenStoreTest, SharedRecordsAuthenticateBesideTheStoresOwnAndCarryNoSecret) {
  auto issuer = TokenStore::Open("");  // a controller's: in memory only
  ASSERT_TRUE(issuer.ok());
  auto made = (*issuer)->Create({"c1", Role::kFlClient, "", "mix"}, /*ephemeral=*/true);
  ASSERT_TRUE(made.ok());
  const std::string record = (*issuer)->RecordJson(made->info.id);
  EXPECT_NE(record.find("\"sha256\""), std::string::npos) << record;
  EXPECT_NE(record.find("\"job\":\"mix\""), std::string::npos) << record;
  EXPECT_EQ(record.find(made->token.substr(19)), std::string::npos) << "secret in the record";
  EXPECT_EQ((*issuer)->RecordJson("000000000000"), "");

  auto node = TokenStore::Open(path_);
  ASSERT_TRUE(node.ok());
  auto own = (*node)->Create({"local", Role::kViewer, "", ""});
  ASSERT_TRUE(own.ok());
  EXPECT_FALSE((*node)->Authenticate(made->token).ok());
  ASSERT_TRUE((*node)->SetShared({record}).ok());
  auto who = (*node)->Authenticate(made->token);
  ASSERT_TRUE(who.ok());
  EXPECT_EQ(who->role, Role::kFlClient);
  EXPECT_EQ(who->job, "mix");
  EXPECT_TRUE((*node)->Authenticate(own->token).ok());
  // Shared records are listed apart and never written to the node's file.
  ASSERT_EQ((*node)->ListShared().size(), 1u);
  EXPECT_EQ((*node)->ListShared()[0].name, "c1");
  EXPECT_EQ((*node)->List().size(), 1u);
  EXPECT_EQ(Read().find(made->info.id), std::string::npos);
  // A wrong secret for a shared id is 401 like any other.
  std::string wrong = made->token;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  EXPECT_EQ((*node)->Authenticate(wrong).status().code(), StatusCode::kUnauthenticated);

  // A malformed record is left out and named; the good ones are still taken.
  Status st = (*node)->SetShared({record, R"({"id": "abc", "role": "admin"})"});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("shared tokens left out"), std::string::npos) << st.message();
  EXPECT_TRUE((*node)->Authenticate(made->token).ok());
  // Revoked in the cluster: replaced by a set without it, or removed one by one.
  ASSERT_TRUE((*node)->SetShared({}).ok());
  EXPECT_FALSE((*node)->Authenticate(made->token).ok());
  ASSERT_TRUE((*node)->AddShared(record).ok());
  EXPECT_TRUE((*node)->Authenticate(made->token).ok());
  (*node)->RemoveShared(made->info.id);
  EXPECT_FALSE((*node)->Authenticate(made->token).ok());
  EXPECT_EQ((*node)->AddShared("not json").code(), StatusCode::kInvalidArgument);
}

TEST(TokenRequestFromJson, NamesTheFieldThatIsWrong) {
  auto ok = TokenRequestFromJson(R"({"role": "fl-client", "job": "mix", "name": "c"})");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->role, Role::kFlClient);
  EXPECT_EQ(ok->job, "mix");
  EXPECT_EQ(ok->name, "c");
  EXPECT_EQ(TokenRequestFromJson("[1]").status().message().substr(0, 5), "body:");
  EXPECT_EQ(TokenRequestFromJson(R"({"role": "admin", "color": "red"})").status().message(),
            "color: unknown field (role, namespace, job, name)");
  EXPECT_EQ(TokenRequestFromJson(R"({"role": 3})").status().message(), "role: must be a string");
  EXPECT_EQ(TokenRequestFromJson(R"({"name": "x"})").status().message(),
            "role: required (admin, deployer, viewer, invoker or fl-client)");
  EXPECT_FALSE(TokenRequestFromJson(R"({"role": "wizard"})").ok());
}

TEST(BearerToken, ParsesTheSchemeCaseInsensitively) {
  const std::pair<const char*, const char*> kHeaders[] = {
      {"Bearer abc", "abc"},
      {"bearer   abc  ", "abc"},
      {"BEARER abc\r\n", "abc"},
      {"Basic abc", ""},
      {"Bearer", ""},
      {"", ""},
  };
  for (const auto& [header, token] : kHeaders) EXPECT_EQ(BearerToken(header), token) << header;
}

TEST(ValidScopeName, IsADnsLabel) {
  EXPECT_TRUE(ValidScopeName("team-a"));
  EXPECT_TRUE(ValidScopeName("a"));
  EXPECT_FALSE(ValidScopeName(""));
  EXPECT_FALSE(ValidScopeName("-a"));
  EXPECT_FALSE(ValidScopeName("a-"));
  EXPECT_FALSE(ValidScopeName("A"));
  EXPECT_FALSE(ValidScopeName("a.b"));
  EXPECT_FALSE(ValidScopeName(std::string(64, 'a')));
}

}  // namespace
}  // namespace shoal::auth
