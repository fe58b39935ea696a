// A fresh temporary directory for one test, removed with everything in it
// when the TempDir goes.
//
// Header-only, so that tests linking only a production library can use it.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace ptstore::testing {

class TempDir {
 public:
  // Creates "<parent>/<prefix>-XXXXXX". When that fails the current test
  // has a fatal failure (so a fixture holding a TempDir does not run its
  // test body) and path() is empty.
  explicit TempDir(const std::string& prefix = "ptstore-test", const std::string& parent = "/tmp") {
    std::string templ = parent + "/" + prefix + "-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      Fail(templ, errno);
      return;
    }
    path_ = std::move(templ);
  }
  ~TempDir() {
    if (path_.empty() || (keep_if_failed_ && ::testing::Test::HasFailure())) return;
    std::filesystem::remove_all(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + name
  std::string Join(const std::string& name) const { return path_ + "/" + name; }
  // Leaves the directory for a post-mortem when the test has failed.
  void KeepIfFailed() { keep_if_failed_ = true; }

 private:
  // FAIL() returns from this function only.
  static void Fail(const std::string& templ, int err) { FAIL() << "mkdtemp " << templ << ": " << std::strerror(err); }

  std::string path_;
  bool keep_if_failed_ = false;
};

}  // namespace ptstore::testing
