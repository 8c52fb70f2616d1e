// SHOAL_ASSIGN_OR_RETURN: the value of a Result<T>, or its Status returned from the caller; the
// counterpart of status.h's SHOAL_RETURN_IF_ERROR for calls that yield a value.
#pragma once

#include <utility>

#include "shoal/common/status.h"

// SHOAL_ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (a Result<T>); on error returns its Status
// from the enclosing function (which returns Status or any Result<U>), else moves the value into
// `lhs`, a declaration (`auto x`, `std::string s`) or an existing variable. The value is moved,
// so move-only types work. `lhs` must not contain a top-level comma (no structured bindings:
// assign to `auto pair` and unpack after); `expr` may. A statement, not an expression: never the
// lone body of an if or a loop. The hidden temporary is named after the line, so one per line.
#define SHOAL_ASSIGN_OR_RETURN(lhs, ...)                                                     \
  SHOAL_ASSIGN_OR_RETURN_IMPL_(SHOAL_ASSIGN_OR_RETURN_CONCAT_(shoal_result_, __LINE__), lhs, \
                               __VA_ARGS__)
#define SHOAL_ASSIGN_OR_RETURN_CONCAT_INNER_(a, b) a##b
#define SHOAL_ASSIGN_OR_RETURN_CONCAT_(a, b) SHOAL_ASSIGN_OR_RETURN_CONCAT_INNER_(a, b)
// `lhs` is a declaration or an lvalue, so it cannot be parenthesized.
#define SHOAL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, ...) \
  auto tmp = (__VA_ARGS__);                         \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()  // NOLINT(bugprone-macro-parentheses)
