// GoogleTest assertions on ptstore::Status and ptstore::Result<T>
// (include/ptstore/status.h), so that a failed check prints the status:
//
//   ASSERT_OK(expr) / EXPECT_OK(expr)
//     passes when `expr` (a Status or a Result<T>) is ok(); the failure
//     message names the expression and its Status::ToString().
//   ASSERT_ERROR(expr, code) / EXPECT_ERROR(expr, code)
//     passes when the code of `expr`'s status equals `code` (a Code); the
//     failure names the expression, the expected code and the status.
//
// Each is the same condition as the hand-written form it replaces:
//   ASSERT_OK(r)            == ASSERT_TRUE(r.ok()) << r.status().ToString()
//   EXPECT_ERROR(s, Code::kX) == EXPECT_EQ(s.code(), Code::kX) << s.ToString()
// ASSERT_* are fatal (return from the test function), EXPECT_* are not.
// `expr` is evaluated once. More text can be streamed: ASSERT_OK(x) << "why".
// Thread safety: as GoogleTest's own assertions.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "ptstore/status.h"

namespace ptstore::testing {

inline const Status& StatusOf(const Status& s) { return s; }
template <typename T>
const Status& StatusOf(const Result<T>& r) {
  return r.status();
}

// Predicate-formatters for GoogleTest's ASSERT_PRED_FORMATn.
template <typename S>
::testing::AssertionResult IsOk(const char* text, const S& s) {
  const Status& st = StatusOf(s);
  if (st.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << text << " is not OK: " << st.ToString();
}

template <typename S>
::testing::AssertionResult HasCode(const char* text, const char* code_text, const S& s, Code code) {
  const Status& st = StatusOf(s);
  if (st.code() == code) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << text << ": expected " << code_text << " (" << CodeName(code)
                                       << "), got " << (st.ok() ? std::string("OK") : st.ToString());
}

}  // namespace ptstore::testing

#define ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::ptstore::testing::IsOk, expr)
#define EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::ptstore::testing::IsOk, expr)
#define ASSERT_ERROR(expr, code) ASSERT_PRED_FORMAT2(::ptstore::testing::HasCode, expr, code)
#define EXPECT_ERROR(expr, code) EXPECT_PRED_FORMAT2(::ptstore::testing::HasCode, expr, code)
