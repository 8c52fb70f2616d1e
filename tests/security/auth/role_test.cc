// The authorization rule: every role against every action, in and out of its scope.
#include "shoal/security/auth/role.h"

#include <gtest/gtest.h>

namespace shoal::auth {
namespace {

Principal P(Role role, std::string ns = {}, std::string job = {}) {
  return Principal{"0123456789ab", "t", role, std::move(ns), std::move(job)};
}

TEST(Authorize, AdminMayDoEverything) {
  for (Action a : {Action::kRead, Action::kReadNode, Action::kWrite, Action::kLogs, Action::kInvoke,
                   Action::kFlClient, Action::kManageTokens}) {
    EXPECT_TRUE(Authorize(P(Role::kAdmin), a, "any", "job").ok()) << ActionName(a);
  }
}

TEST(Authorize, ViewerOnlyReads) {
  EXPECT_TRUE(Authorize(P(Role::kViewer), Action::kRead, "a").ok());
  EXPECT_TRUE(Authorize(P(Role::kViewer), Action::kReadNode, "").ok());
  for (Action a :
       {Action::kWrite, Action::kLogs, Action::kInvoke, Action::kFlClient, Action::kManageTokens}) {
    Status st = Authorize(P(Role::kViewer), a, "a");
    EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << ActionName(a);
  }
  EXPECT_EQ(Authorize(P(Role::kViewer), Action::kWrite, "a").message(),
            "token 't' (viewer) may not deploy or delete in namespace 'a'");
}

TEST(Authorize, DeployerActsInItsNamespaceOnly) {
  const Principal d = P(Role::kDeployer, "a");
  for (Action a : {Action::kRead, Action::kWrite, Action::kLogs, Action::kInvoke}) {
    EXPECT_TRUE(Authorize(d, a, "a").ok()) << ActionName(a);
    EXPECT_FALSE(Authorize(d, a, "b").ok()) << ActionName(a);
    EXPECT_FALSE(Authorize(d, a, "").ok()) << ActionName(a);
  }
  EXPECT_TRUE(Authorize(d, Action::kFlClient, "a", "job-in-a").ok());
  EXPECT_FALSE(Authorize(d, Action::kFlClient, "b", "job-in-b").ok());
  EXPECT_TRUE(Authorize(d, Action::kReadNode, "").ok());
  EXPECT_FALSE(Authorize(d, Action::kManageTokens, "a").ok());
  EXPECT_EQ(Authorize(d, Action::kWrite, "b").message(),
            "token 't' (deployer of namespace 'a') may not deploy or delete in namespace 'b'");
}

TEST(Authorize, InvokerOnlyInvokesInItsNamespace) {
  const Principal i = P(Role::kInvoker, "a");
  EXPECT_TRUE(Authorize(i, Action::kInvoke, "a").ok());
  EXPECT_FALSE(Authorize(i, Action::kInvoke, "b").ok());
  EXPECT_FALSE(Authorize(i, Action::kRead, "a").ok());
  EXPECT_FALSE(Authorize(i, Action::kReadNode, "").ok());
}

TEST(Authorize, FlClientActsOnItsJobOnly) {
  const Principal c = P(Role::kFlClient, "", "x");
  EXPECT_TRUE(Authorize(c, Action::kFlClient, "ns", "x").ok());
  Status st = Authorize(c, Action::kFlClient, "ns", "y");
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(st.message(),
            "token 't' (fl-client of FL job 'x') may not act as an FL client on FL job 'y'");
  EXPECT_FALSE(Authorize(c, Action::kFlClient, "ns", "").ok());
  EXPECT_FALSE(Authorize(c, Action::kRead, "ns", "x").ok());
  EXPECT_FALSE(Authorize(c, Action::kInvoke, "ns").ok());
}

TEST(Role, NamesRoundTripAndUnknownIsNamed) {
  for (Role r : {Role::kAdmin, Role::kDeployer, Role::kViewer, Role::kInvoker, Role::kFlClient}) {
    auto back = ParseRole(RoleName(r));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, r);
  }
  auto bad = ParseRole("root");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "role: must be admin, deployer, viewer, invoker or fl-client, got 'root'");
}

}  // namespace
}  // namespace shoal::auth
