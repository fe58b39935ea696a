// Tests of the cluster file (core/membership.h): both forms, form detection,
// and every validation error naming its line or entry.
#include "core/membership.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::core {
namespace {

void ExpectError(const Result<Membership>& r, Code code, const std::string& needle) {
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << needle << "'";
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
}

TEST(MembershipTest, TomlForm) {
  auto m = Membership::Parse(R"(
# a comment
secret_file = "/etc/ptstore/secret"
[[node]]
id = 2
address = "10.0.0.3:7401"
[[node]]
id = 0
address = "node-a"
[[node]]
id = 16777215
address = "[fe80::1]:9000"
)", "cluster.conf");
  ASSERT_OK(m);
  EXPECT_EQ(m->secret_file(), "/etc/ptstore/secret");
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ(m->node_ids(), (std::vector<uint32_t>{0, 2, 16777215}));
  EXPECT_EQ(m->members()[0], (Member{0, "node-a", 7400}));
  EXPECT_EQ(m->members()[1], (Member{2, "10.0.0.3", 7401}));
  EXPECT_EQ(m->members()[2], (Member{16777215, "fe80::1", 9000}));
  EXPECT_EQ(m->members()[2].Address(), "[fe80::1]:9000");
  EXPECT_EQ(m->members()[1].Address(), "10.0.0.3:7401");
  ASSERT_NE(m->Find(2), nullptr);
  EXPECT_EQ(m->Find(2)->host, "10.0.0.3");
  EXPECT_EQ(m->Find(1), nullptr);
  auto self = m->Self(0);
  ASSERT_OK(self);
  EXPECT_EQ(self->host, "node-a");
  auto none = m->Self(5);
  ASSERT_FALSE(none.ok());
  EXPECT_ERROR(none, Code::kNotFound);
  EXPECT_NE(none.status().message().find("node id 5 is not in cluster file cluster.conf"), std::string::npos);
}

TEST(MembershipTest, NodeListForm) {
  auto m = Membership::Parse("# scontrol show hostnames\nnid001\n\n  nid002:7500  # fat node\nnid003\n",
                             "hosts");
  ASSERT_OK(m);
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ(m->members()[0], (Member{0, "nid001", 7400}));
  EXPECT_EQ(m->members()[1], (Member{1, "nid002", 7500}));
  EXPECT_EQ(m->members()[2], (Member{2, "nid003", 7400}));
  EXPECT_EQ(m->secret_file(), "");
}

TEST(MembershipTest, FormIsChosenByExtensionThenContent) {
  // A .toml name forces TOML even when the text looks like a node list.
  ExpectError(Membership::Parse("nid001\n", "c.toml"), Code::kInvalidArgument, "c.toml");
  // '[' or '=' on the first content line selects TOML.
  EXPECT_OK(Membership::Parse("# x\n[[node]]\nid = 1\naddress = \"a:1\"\n", "c"));
  EXPECT_OK(Membership::Parse("secret_file = \"/s\"\n[[node]]\nid = 1\naddress = \"a\"\n", "c"));
  // Otherwise a node list.
  EXPECT_EQ(Membership::Parse("[fe80::1]:7400\n[fe80::2]\n", "c")->size(), 2u);
  auto list = Membership::Parse("a\nb\n", "c");
  ASSERT_OK(list);
  EXPECT_EQ(list->size(), 2u);
}

TEST(MembershipTest, LoadReadsAFile) {
  testing::TempDir dir;
  {
    std::ofstream(dir.Join("nodes")) << "h1\nh2:7000\n";
    std::ofstream(dir.Join("cluster.toml")) << "[[node]]\nid = 4\naddress = \"h:1\"\n";
  }
  auto a = Membership::Load(dir.Join("nodes"));
  ASSERT_OK(a);
  EXPECT_EQ(a->size(), 2u);
  auto b = Membership::Load(dir.Join("cluster.toml"));
  ASSERT_OK(b);
  EXPECT_EQ(b->node_ids(), std::vector<uint32_t>{4});
  ExpectError(Membership::Load(dir.Join("missing")), Code::kNotFound, "missing: No such file");
}

TEST(MembershipTest, EmptyFiles) {
  ExpectError(Membership::Parse("", "f"), Code::kInvalidArgument, "cluster file f: no nodes");
  ExpectError(Membership::Parse("# only\n\n  \n", "f"), Code::kInvalidArgument, "no nodes");
  ExpectError(Membership::Parse("", "f.toml"), Code::kInvalidArgument, "no [[node]] entries");
  ExpectError(Membership::Parse("node = []\n", "f"), Code::kInvalidArgument, "no nodes");
}

TEST(MembershipTest, NodeListErrorsNameTheLine) {
  ExpectError(Membership::Parse("a\nb\na\n", "f"), Code::kInvalidArgument,
              "line 3: duplicate address a:7400 (also cluster file f line 1)");
  // Same host on two ports is two nodes; same host:port written two ways is one.
  EXPECT_OK(Membership::Parse("a:1\na:2\n", "f"));
  ExpectError(Membership::Parse("a\na:7400\n", "f"), Code::kInvalidArgument, "duplicate address");
  ExpectError(Membership::Parse("a\nb:0\n", "f"), Code::kInvalidArgument, "line 2: bad port '0'");
  ExpectError(Membership::Parse("b:65536\n", "f"), Code::kInvalidArgument, "line 1: bad port '65536'");
  ExpectError(Membership::Parse("b:x1\n", "f"), Code::kInvalidArgument, "bad port 'x1'");
  ExpectError(Membership::Parse("b:\n", "f"), Code::kInvalidArgument, "bad port ''");
  ExpectError(Membership::Parse("x\n:7400\n", "f"), Code::kInvalidArgument, "line 2: missing host");
  ExpectError(Membership::Parse("a b\n", "f"), Code::kInvalidArgument, "line 1: one host[:port] per line");
  ExpectError(Membership::Parse("fe80::1\n", "f"), Code::kInvalidArgument, "must be written [addr]:port");
  ExpectError(Membership::Parse("[fe80::1\n", "f"), Code::kInvalidArgument, "unterminated '['");
}

TEST(MembershipTest, TomlErrorsNameTheEntry) {
  const std::string ok_node = "[[node]]\nid = 0\naddress = \"a:1\"\n";
  ExpectError(Membership::Parse(ok_node + "[[node]]\nid = 0\naddress = \"b:1\"\n", "f.toml"),
              Code::kInvalidArgument, "[[node]] #2 (line 4): duplicate node id 0 (also cluster file f.toml [[node]] #1");
  ExpectError(Membership::Parse(ok_node + "[[node]]\nid = 1\naddress = \"a:1\"\n", "f.toml"),
              Code::kInvalidArgument, "[[node]] #2 (line 4): duplicate address a:1");
  ExpectError(Membership::Parse(ok_node + "[[node]]\naddress = \"b:1\"\n", "f.toml"), Code::kInvalidArgument,
              "[[node]] #2 (line 4): missing 'id'");
  ExpectError(Membership::Parse("[[node]]\nid = 3\n", "f.toml"), Code::kInvalidArgument,
              "[[node]] #1 (line 1): missing 'address'");
  ExpectError(Membership::Parse("[[node]]\nid = 16777216\naddress = \"a\"\n", "f.toml"), Code::kInvalidArgument,
              "id 16777216 out of range [0, 16777215]");
  ExpectError(Membership::Parse("[[node]]\nid = -1\naddress = \"a\"\n", "f.toml"), Code::kInvalidArgument,
              "id -1 out of range");
  ExpectError(Membership::Parse("[[node]]\nid = \"1\"\naddress = \"a\"\n", "f.toml"), Code::kInvalidArgument,
              "'id' must be an integer");
  ExpectError(Membership::Parse("[[node]]\nid = 1\naddress = 7\n", "f.toml"), Code::kInvalidArgument,
              "'address' must be a string");
  ExpectError(Membership::Parse("[[node]]\nid = 1\naddress = \"a:99999\"\n", "f.toml"), Code::kInvalidArgument,
              "[[node]] #1 (line 1): bad port '99999'");
  ExpectError(Membership::Parse("[[node]]\nid = 1\naddress = \"a\"\nport = 3\n", "f.toml"),
              Code::kInvalidArgument, "unknown key 'port' (want id, address)");
  ExpectError(Membership::Parse("secrets = \"x\"\n" + ok_node, "f.toml"), Code::kInvalidArgument,
              "unknown key 'secrets' at top level");
  ExpectError(Membership::Parse("secret_file = 3\n" + ok_node, "f.toml"), Code::kInvalidArgument,
              "secret_file must be a non-empty string");
  ExpectError(Membership::Parse("node = 3\n", "f.toml"), Code::kInvalidArgument, "array of tables");
  ExpectError(Membership::Parse("node = [1]\n", "f.toml"), Code::kInvalidArgument, "[[node]] #1 (line 1): not a table");
  ExpectError(Membership::Parse("[[node]\nid = 1\n", "f.toml"), Code::kInvalidArgument, "cluster file f.toml line 1");
}

TEST(MembershipTest, ParseMemberAddress) {
  auto a = ParseMemberAddress("  host.example:81 ", "x");
  ASSERT_OK(a);
  EXPECT_EQ(a->host, "host.example");
  EXPECT_EQ(a->port, 81);
  auto b = ParseMemberAddress("[::1]", "x");
  ASSERT_OK(b);
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, kDefaultClusterPort);
  EXPECT_FALSE(ParseMemberAddress("[::1]x", "x").ok());
  EXPECT_FALSE(ParseMemberAddress("", "x").ok());
  EXPECT_FALSE(ParseMemberAddress("a:1:", "x").ok());
}

}  // namespace
}  // namespace ptstore::core
