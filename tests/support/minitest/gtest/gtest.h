// minitest: the subset of GoogleTest's macros the GPU tests use, for machines without GoogleTest
// (the GPU-only build needs only CUDA and CMake). Same spelling, so a test file compiles against
// either. The process exits 1 when any test failed, else 77 (ctest's SKIP_RETURN_CODE) when any
// was skipped, so ctest never shows a partly skipped binary as passed; 0 when all passed.
#pragma once

#include <cmath>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <type_traits>

namespace minitest {

struct Message {
  std::ostringstream os;
  template <typename T>
  Message& operator<<(const T& v) {
    os << v;
    return *this;
  }
};

void RegisterTest(const char* suite, const char* name, void (*fn)());
void ReportFailure(const char* file, int line, const std::string& what, const std::string& msg);
void ReportSkip(const std::string& msg);

struct FailHelper {
  const char* file;
  int line;
  std::string what;
  void operator=(const Message& m) const { ReportFailure(file, line, what, m.os.str()); }
};
struct SkipHelper {
  void operator=(const Message& m) const { ReportSkip(m.os.str()); }
};

// Values print with operator<< where they have one, enums as their number, others as "?".
template <typename T>
void PrintValue(std::ostream& os, const T& v) {
  if constexpr (requires { os << v; }) {
    os << v;
  } else if constexpr (std::is_enum_v<T>) {
    os << static_cast<long long>(v);
  } else {
    os << "?";
  }
}

template <typename A, typename B>
std::string Describe(const char* ea, const char* eb, const A& a, const B& b, const char* op) {
  std::ostringstream os;
  os << ea << " " << op << " " << eb << " (";
  PrintValue(os, a);
  os << " vs ";
  PrintValue(os, b);
  os << ")";
  return os.str();
}

}  // namespace minitest

#define TEST(suite, name)                                            \
  static void suite##_##name##_Body();                               \
  static const bool suite##_##name##_registered = [] {               \
    ::minitest::RegisterTest(#suite, #name, &suite##_##name##_Body); \
    return true;                                                     \
  }();                                                               \
  static void suite##_##name##_Body()

#define MINITEST_CHECK(cond, what, ret) \
  if (cond) {                           \
  } else                                \
    ret ::minitest::FailHelper{__FILE__, __LINE__, what} = ::minitest::Message()

#define MINITEST_CMP(a, b, op, ret) \
  MINITEST_CHECK((a)op(b), ::minitest::Describe(#a, #b, (a), (b), #op), ret)

#define EXPECT_TRUE(c) MINITEST_CHECK(static_cast<bool>(c), #c " is false", )
#define EXPECT_FALSE(c) MINITEST_CHECK(!static_cast<bool>(c), #c " is true", )
#define ASSERT_TRUE(c) MINITEST_CHECK(static_cast<bool>(c), #c " is false", return)
#define ASSERT_FALSE(c) MINITEST_CHECK(!static_cast<bool>(c), #c " is true", return)
#define EXPECT_EQ(a, b) MINITEST_CMP(a, b, ==, )
#define EXPECT_NE(a, b) MINITEST_CMP(a, b, !=, )
#define EXPECT_LT(a, b) MINITEST_CMP(a, b, <, )
#define EXPECT_LE(a, b) MINITEST_CMP(a, b, <=, )
#define EXPECT_GT(a, b) MINITEST_CMP(a, b, >, )
#define EXPECT_GE(a, b) MINITEST_CMP(a, b, >=, )
#define ASSERT_EQ(a, b) MINITEST_CMP(a, b, ==, return)
#define ASSERT_NE(a, b) MINITEST_CMP(a, b, !=, return)
#define ASSERT_LE(a, b) MINITEST_CMP(a, b, <=, return)
#define ASSERT_GE(a, b) MINITEST_CMP(a, b, >=, return)
#define EXPECT_NEAR(a, b, tol) \
  MINITEST_CHECK(std::fabs((a) - (b)) <= (tol), ::minitest::Describe(#a, #b, (a), (b), "~="), )
#define ASSERT_NEAR(a, b, tol)                                                                \
  MINITEST_CHECK(std::fabs((a) - (b)) <= (tol), ::minitest::Describe(#a, #b, (a), (b), "~="), \
                 return)
#define FAIL() return ::minitest::FailHelper{__FILE__, __LINE__, "FAIL()"} = ::minitest::Message()
#define GTEST_SKIP() return ::minitest::SkipHelper{} = ::minitest::Message()
