#include "bench/demo_mount.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "bench/bench_util.h"
#include "bench/workload.h"
#include "tests/testing/mount.h"

namespace ptstore::bench {

namespace fsys = std::filesystem;

Result<MountTour> TourTheMount(Client& client, const std::string& socket, const std::string& ns,
                               uint64_t bytes_per_token) {
  MountTour t;
  testing::Mount::Options mo;  // this build's ptstore-fuse, no -o option but the socket
  mo.options = "";
  t.skipped_because = testing::WhyNoMount(testing::PtstoreFusePath());
  if (!t.skipped_because.empty()) return t;
  t.mountpoint = Format("/tmp/ptstore-demo-mnt-%d", static_cast<int>(getpid()));
  std::error_code ec;
  fsys::create_directories(t.mountpoint, ec);
  if (ec) return IOError("cannot create " + t.mountpoint + ": " + ec.message());
  struct RemoveDir {
    std::string dir;
    ~RemoveDir() {
      std::error_code e;
      fsys::remove(dir, e);
    }
  } remove{t.mountpoint};
  mo.mountpoint = t.mountpoint;
  testing::Mount mount;  // unmounted before `remove` goes
  PTS_RETURN_IF_ERROR(mount.Start(socket, mo));
  t.mounted = true;

  // Walk it as any shell tool would, and find the deepest increment.
  fsys::path deepest;
  size_t deepest_depth = 0;
  const fsys::path root = fsys::path(t.mountpoint) / ns;
  for (auto it = fsys::recursive_directory_iterator(root, ec); !ec && it != fsys::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->path().filename() != "kv") continue;
    t.increments++;
    t.kv_bytes += fsys::file_size(it->path());
    if (static_cast<size_t>(it.depth()) >= deepest_depth) {
      deepest_depth = it.depth();
      deepest = it->path().parent_path();
    }
  }
  if (ec) return IOError("walking " + root.string() + ": " + ec.message());
  if (t.increments == 0) return t;

  // The prompt of the deepest increment: the tokens files along its path.
  std::vector<uint32_t> tokens;
  std::vector<fsys::path> chain;
  for (fsys::path p = deepest; p != root; p = p.parent_path()) chain.push_back(p);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    std::ifstream in(*it / "tokens", std::ios::binary);
    std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t old = tokens.size();
    tokens.resize(old + raw.size() / 4);
    std::memcpy(tokens.data() + old, raw.data(), raw.size() / 4 * 4);
  }
  PTS_ASSIGN_OR_RETURN(HostBuffer buf, HostBuffer::Allocate(tokens.size() * bytes_per_token));
  const auto t0 = Clock::now();
  PTS_ASSIGN_OR_RETURN(t.deepest_tokens, client.LoadPath(deepest.string(), buf.data(), buf.size()));
  t.load_seconds = SecondsSince(t0);
  if (t.deepest_tokens != tokens.size()) {
    return Internal("LoadPath of " + deepest.string() + " loaded " + std::to_string(t.deepest_tokens) +
                    " tokens; its tokens files hold " + std::to_string(tokens.size()));
  }
  if (auto bad = VerifyKv(tokens, 0, bytes_per_token, buf.data())) {
    return Corruption("the prefix loaded by path through the mount has a wrong byte");
  }
  return t;
}

}  // namespace ptstore::bench
