// The status assertions of tests/testing/status_matchers.h: each passes on
// what it should, fails (fatally or not, as named) on what it should not, and
// its failure message carries the status.
#include "tests/testing/status_matchers.h"

#include <memory>
#include <string>

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

namespace ptstore {
namespace {

Result<int> Value(int v) { return v; }
Result<int> Missing() { return NotFound("no such prompt 'p1'"); }
Result<std::unique_ptr<int>> MoveOnly() { return std::make_unique<int>(7); }

int evaluations = 0;
Status Counted() {
  ++evaluations;
  return Status::OK();
}

TEST(StatusMatchersTest, OkPassesForOkStatusAndResult) {
  EXPECT_OK(Status::OK());
  ASSERT_OK(Status::OK());
  EXPECT_OK(Value(3));
  ASSERT_OK(Value(3));
  ASSERT_OK(MoveOnly());
  const Result<int> r = Value(4);
  ASSERT_OK(r) << "streamed text is allowed";
}

TEST(StatusMatchersTest, ExpressionIsEvaluatedOnce) {
  evaluations = 0;
  EXPECT_OK(Counted());
  ASSERT_ERROR(Counted(), Code::kOk);
  EXPECT_EQ(evaluations, 2);
}

TEST(StatusMatchersTest, ExpectOkFailsNonFatallyAndPrintsTheStatus) {
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(NotFound("namespace 'foo' does not exist")),
                          "namespace 'foo' does not exist");
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(Missing()), "no such prompt 'p1'");
}

TEST(StatusMatchersTest, AssertOkFailsFatallyAndPrintsTheStatus) {
  EXPECT_FATAL_FAILURE(ASSERT_OK(InvalidArgument("block_tokens must be > 0")), "block_tokens must be > 0");
  EXPECT_FATAL_FAILURE(ASSERT_OK(Missing()), "Missing()");
}

TEST(StatusMatchersTest, ErrorPassesOnTheSameCode) {
  EXPECT_ERROR(NotFound("x"), Code::kNotFound);
  ASSERT_ERROR(Missing(), Code::kNotFound);
}

TEST(StatusMatchersTest, ErrorFailsOnAnotherCodeOrOk) {
  EXPECT_NONFATAL_FAILURE(EXPECT_ERROR(InvalidArgument("bad layout"), Code::kNotFound), "bad layout");
  EXPECT_NONFATAL_FAILURE(EXPECT_ERROR(Value(1), Code::kNotFound), "got OK");
  EXPECT_FATAL_FAILURE(ASSERT_ERROR(Status::OK(), Code::kCorruption), "Code::kCorruption");
}

TEST(StatusMatchersTest, AssertReturnsFromTheTestFunction) {
  // A fatal failure must stop the function: the line after it never runs.
  static bool reached = false;
  EXPECT_FATAL_FAILURE(
      {
        ASSERT_OK(NotFound("gone"));
        reached = true;
      },
      "gone");
  EXPECT_FALSE(reached);
}

}  // namespace
}  // namespace ptstore
