// Tests of Status, Result<T> and the code registry (include/ptstore/status.h).
#include "ptstore/status.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace ptstore {
namespace {

constexpr Code kLastCode = Code::kUnimplemented;

std::vector<Code> AllCodes() {
  std::vector<Code> codes;
  for (uint16_t v = 0; v <= static_cast<uint16_t>(kLastCode); ++v) codes.push_back(static_cast<Code>(v));
  return codes;
}

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Code::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "ok");
  EXPECT_TRUE(Status::OK().ok());
}

TEST(StatusTest, OkCodeWithMessageIsStillOk) {
  // An OK status has no state at all: the message is dropped.
  Status s(Code::kOk, "ignored");
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.message(), "");
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status s = NotFound("namespace 'foo' does not exist");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.message(), "namespace 'foo' does not exist");
  EXPECT_EQ(s.ToString(), "not_found: namespace 'foo' does not exist");
}

TEST(StatusTest, FactoriesSetTheirCodes) {
  EXPECT_EQ(NotFound("x").code(), Code::kNotFound);
  EXPECT_EQ(InvalidArgument("x").code(), Code::kInvalidArgument);
  EXPECT_EQ(AlreadyExists("x").code(), Code::kAlreadyExists);
  EXPECT_EQ(PermissionDenied("x").code(), Code::kPermissionDenied);
  EXPECT_EQ(ResourceExhausted("x").code(), Code::kResourceExhausted);
  EXPECT_EQ(Unavailable("x").code(), Code::kUnavailable);
  EXPECT_EQ(DeadlineExceeded("x").code(), Code::kDeadlineExceeded);
  EXPECT_EQ(Corruption("x").code(), Code::kCorruption);
  EXPECT_EQ(ProtocolError("x").code(), Code::kProtocol);
  EXPECT_EQ(IOError("x").code(), Code::kIOError);
  EXPECT_EQ(Aborted("x").code(), Code::kAborted);
  EXPECT_EQ(Internal("x").code(), Code::kInternal);
  EXPECT_EQ(Unimplemented("x").code(), Code::kUnimplemented);
}

TEST(StatusTest, CopyIsDeepAndIndependent) {
  Status a = Corruption("bad block");
  Status b(a);
  EXPECT_EQ(b.code(), Code::kCorruption);
  EXPECT_EQ(b.message(), "bad block");
  // The copy owns its own state: changing one leaves the other alone.
  a = Status::OK();
  EXPECT_TRUE(a.ok());
  EXPECT_EQ(b.message(), "bad block");
  EXPECT_NE(&a.message(), &b.message());

  Status c;
  c = b;
  EXPECT_EQ(c.ToString(), "corruption: bad block");
  EXPECT_NE(&c.message(), &b.message());
  c = Status();  // copy-assign OK over an error
  EXPECT_TRUE(c.ok());
}

TEST(StatusTest, SelfCopyAssignKeepsState) {
  Status a = Aborted("lost race");
  Status& ref = a;
  a = ref;
  EXPECT_EQ(a.code(), Code::kAborted);
  EXPECT_EQ(a.message(), "lost race");
}

TEST(StatusTest, MoveTransfersStateAndLeavesOk) {
  Status a = IOError("write failed");
  const std::string* msg = &a.message();
  Status b(std::move(a));
  EXPECT_EQ(b.code(), Code::kIOError);
  EXPECT_EQ(&b.message(), msg);  // no reallocation: the state moved
  EXPECT_TRUE(a.ok());           // NOLINT(bugprone-use-after-move): documented moved-from state

  Status c;
  c = std::move(b);
  EXPECT_EQ(c.message(), "write failed");
  EXPECT_TRUE(b.ok());  // NOLINT(bugprone-use-after-move)
}

TEST(StatusTest, StatusIsOnePointer) {
  // OK costs one null pointer (the header's promise).
  EXPECT_EQ(sizeof(Status), sizeof(void*));
}

TEST(StatusTest, WithContextPrefixesMessageAndKeepsCode) {
  Status s = PermissionDenied("mode 0700");
  Status t = s.WithContext("open 'ns'");
  EXPECT_EQ(t.code(), Code::kPermissionDenied);
  EXPECT_EQ(t.message(), "open 'ns': mode 0700");
  EXPECT_EQ(s.message(), "mode 0700");  // the original is unchanged
  EXPECT_EQ(t.WithContext("client").message(), "client: open 'ns': mode 0700");
  EXPECT_TRUE(Status::OK().WithContext("anything").ok());
}

TEST(StatusTest, ErrnoErrorMapsCommonErrnos) {
  Status s = ErrnoError("open /x", ENOENT);
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.message(), std::string("open /x: ") + std::strerror(ENOENT));
  EXPECT_EQ(ErrnoError("x", EACCES).code(), Code::kPermissionDenied);
  EXPECT_EQ(ErrnoError("x", EPERM).code(), Code::kPermissionDenied);
  EXPECT_EQ(ErrnoError("x", ENOSPC).code(), Code::kResourceExhausted);
  EXPECT_EQ(ErrnoError("x", ENOMEM).code(), Code::kResourceExhausted);
  EXPECT_EQ(ErrnoError("x", EDQUOT).code(), Code::kResourceExhausted);
  EXPECT_EQ(ErrnoError("x", EEXIST).code(), Code::kAlreadyExists);  // what env.cc's own table said
  EXPECT_EQ(ErrnoError("x", ECONNREFUSED).code(), Code::kUnavailable);
  EXPECT_EQ(ErrnoError("x", ECONNRESET).code(), Code::kUnavailable);
  EXPECT_EQ(ErrnoError("x", EPIPE).code(), Code::kUnavailable);
  EXPECT_EQ(ErrnoError("x", ETIMEDOUT).code(), Code::kDeadlineExceeded);
  EXPECT_EQ(ErrnoError("x", EIO).code(), Code::kIOError);
  EXPECT_EQ(ErrnoError("x", EBADF).code(), Code::kIOError);
}

TEST(CodeRegistryTest, EveryCodeHasAUniqueSnakeCaseName) {
  std::set<std::string_view> names;
  for (Code c : AllCodes()) {
    std::string_view name = CodeName(c);
    SCOPED_TRACE(static_cast<int>(c));
    EXPECT_NE(name, "unknown");
    EXPECT_FALSE(name.empty());
    for (char ch : name) EXPECT_TRUE((ch >= 'a' && ch <= 'z') || ch == '_') << name;
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
  }
  EXPECT_EQ(CodeName(Code::kOk), "ok");
  EXPECT_EQ(CodeName(Code::kProtocol), "protocol_error");
  EXPECT_EQ(CodeName(static_cast<Code>(999)), "unknown");
}

TEST(CodeRegistryTest, EveryErrorCodeHasAnErrno) {
  EXPECT_EQ(ToErrno(Code::kOk), 0);
  for (Code c : AllCodes()) {
    if (c == Code::kOk) continue;
    SCOPED_TRACE(CodeName(c));
    EXPECT_GT(ToErrno(c), 0);
  }
  EXPECT_EQ(ToErrno(Code::kNotFound), ENOENT);
  EXPECT_EQ(ToErrno(Code::kInvalidArgument), EINVAL);
  EXPECT_EQ(ToErrno(Code::kAlreadyExists), EEXIST);
  EXPECT_EQ(ToErrno(Code::kPermissionDenied), EACCES);
  EXPECT_EQ(ToErrno(Code::kResourceExhausted), ENOSPC);
  EXPECT_EQ(ToErrno(Code::kUnavailable), ENOTCONN);
  EXPECT_EQ(ToErrno(Code::kDeadlineExceeded), ETIMEDOUT);
  EXPECT_EQ(ToErrno(Code::kCorruption), EIO);
  EXPECT_EQ(ToErrno(Code::kProtocol), EPROTO);
  EXPECT_EQ(ToErrno(Code::kIOError), EIO);
  EXPECT_EQ(ToErrno(Code::kAborted), EAGAIN);
  EXPECT_EQ(ToErrno(Code::kInternal), EIO);
  EXPECT_EQ(ToErrno(Code::kUnimplemented), ENOSYS);
  EXPECT_EQ(ToErrno(static_cast<Code>(999)), EIO);
}

TEST(CodeRegistryTest, WireValuesAreStable) {
  // These values cross the wire: they must never change.
  EXPECT_EQ(static_cast<uint16_t>(Code::kOk), 0);
  EXPECT_EQ(static_cast<uint16_t>(Code::kNotFound), 1);
  EXPECT_EQ(static_cast<uint16_t>(Code::kInvalidArgument), 2);
  EXPECT_EQ(static_cast<uint16_t>(Code::kAlreadyExists), 3);
  EXPECT_EQ(static_cast<uint16_t>(Code::kPermissionDenied), 4);
  EXPECT_EQ(static_cast<uint16_t>(Code::kResourceExhausted), 5);
  EXPECT_EQ(static_cast<uint16_t>(Code::kUnavailable), 6);
  EXPECT_EQ(static_cast<uint16_t>(Code::kDeadlineExceeded), 7);
  EXPECT_EQ(static_cast<uint16_t>(Code::kCorruption), 8);
  EXPECT_EQ(static_cast<uint16_t>(Code::kProtocol), 9);
  EXPECT_EQ(static_cast<uint16_t>(Code::kIOError), 10);
  EXPECT_EQ(static_cast<uint16_t>(Code::kAborted), 11);
  EXPECT_EQ(static_cast<uint16_t>(Code::kInternal), 12);
  EXPECT_EQ(static_cast<uint16_t>(Code::kUnimplemented), 13);
}

TEST(CodeRegistryTest, CodeFromWireRoundTripsKnownValues) {
  for (Code c : AllCodes()) EXPECT_EQ(CodeFromWire(static_cast<uint16_t>(c)), c);
}

TEST(CodeRegistryTest, CodeFromWireMapsUnknownValuesToProtocol) {
  for (uint32_t v : {14u, 15u, 100u, 255u, 256u, 0x7fffu, 0x8000u, 0xfffeu, 0xffffu}) {
    EXPECT_EQ(CodeFromWire(static_cast<uint16_t>(v)), Code::kProtocol) << v;
  }
}

TEST(ResultTest, HoldsValue) {
  Result<std::string> r(std::string("hello"));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.status().ok());
  EXPECT_EQ(r.value(), "hello");
  EXPECT_EQ(*r, "hello");
  EXPECT_EQ(r->size(), 5u);
  r.value() += "!";
  EXPECT_EQ(*r, "hello!");
  std::string moved = std::move(r).value();
  EXPECT_EQ(moved, "hello!");
}

TEST(ResultTest, HoldsError) {
  Result<int> r(NotFound("no such lease"));
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_EQ(r.status().message(), "no such lease");
}

TEST(ResultTest, OkStatusWithoutValueBecomesInternal) {
  Result<int> r(Status::OK());
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInternal);
}

TEST(ResultTest, CopyAndMove) {
  Result<std::string> a(std::string(100, 'a'));
  Result<std::string> b = a;
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->size(), 100u);
  Result<std::string> c = std::move(a);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, std::string(100, 'a'));
  Result<std::string> e(Corruption("x"));
  Result<std::string> f = e;
  EXPECT_EQ(f.status().code(), Code::kCorruption);
}

Status FailIf(bool fail) { return fail ? Unavailable("peer gone") : Status::OK(); }
Result<int> Half(int v) {
  if (v % 2) return InvalidArgument("odd value " + std::to_string(v));
  return v / 2;
}

Status ChainReturnIfError(bool fail, int* reached) {
  PTS_RETURN_IF_ERROR(FailIf(fail));
  *reached = 1;
  return Status::OK();
}

Result<int> ChainAssignOrReturn(int v) {
  PTS_ASSIGN_OR_RETURN(int h, Half(v));
  PTS_ASSIGN_OR_RETURN(int q, Half(h));  // two uses in one function
  return q;
}

TEST(MacrosTest, ReturnIfError) {
  int reached = 0;
  EXPECT_TRUE(ChainReturnIfError(false, &reached).ok());
  EXPECT_EQ(reached, 1);
  reached = 0;
  Status s = ChainReturnIfError(true, &reached);
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_EQ(reached, 0);
}

TEST(MacrosTest, AssignOrReturn) {
  Result<int> ok = ChainAssignOrReturn(8);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 2);
  Result<int> bad1 = ChainAssignOrReturn(7);
  EXPECT_EQ(bad1.status().message(), "odd value 7");
  Result<int> bad2 = ChainAssignOrReturn(6);
  EXPECT_EQ(bad2.status().message(), "odd value 3");
}

}  // namespace
}  // namespace ptstore
