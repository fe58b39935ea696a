// path_info() and its PathInfo: what a PTStore mount says about one of its
// directories (the PTSTORE_IOC_INFO ioctl, ptstore/ioctl.h). A grouped
// namespace's layout does not fit the ioctl's struct: it is read from the
// .layout file of the namespace directory above. The query runs with the
// GIL released; errors are NotFound, PermissionDenied, InvalidArgument (not
// a directory of a mount), Unimplemented (another ioctl ABI version).
#include <fcntl.h>
#include <pybind11/stl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "ptstore/ioctl.h"
#include "ptstore/layout.h"
#include "ptstore/types.h"
#include "python/src/bindings.h"

namespace ptstore::python {

namespace {

// What PTSTORE_IOC_INFO says about a directory of a mount.
struct PathInfo {
  std::string kind;  // "root", "namespace", "increment"
  std::string ns;
  std::optional<Layout> layout;
  uint32_t ns_uid = 0, ns_gid = 0, ns_mode = 0;
  std::string key, parent;  // hex; empty unless an increment
  uint64_t start_token = 0, tokens = 0, bytes = 0, hits = 0, tensor = 0;
  std::string tier;
  uint32_t children = 0;
  uint64_t arena_bytes = 0;
  uint32_t node_id = 0;
};

std::string KeyHex(const uint8_t* b) {
  static const char* digits = "0123456789abcdef";
  std::string s(32, '0');
  for (int i = 0; i < 16; ++i) {
    s[2 * i] = digits[b[i] >> 4];
    s[2 * i + 1] = digits[b[i] & 15];
  }
  return s;
}

// The layout in the .layout file of the namespace directory at or above the
// directory `path` of a mount (an increment's directory is below its
// parent's, the top ones below the namespace's).
Result<Layout> NamespaceLayoutAbove(const std::string& path) {
  int dir = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return ErrnoError("open " + path, errno);
  struct stat mount_st {};
  if (::fstat(dir, &mount_st) != 0) mount_st.st_dev = 0;
  for (;;) {
    struct stat st {};
    if (::fstat(dir, &st) != 0 || st.st_dev != mount_st.st_dev) break;  // left the mount
    const int fd = ::openat(dir, ".layout", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      std::string text;
      char buf[4096];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
      const int err = errno;
      ::close(fd);
      ::close(dir);
      if (n < 0) return ErrnoError("read the .layout above " + path, err);
      return Layout::Parse(text);
    }
    const int up = ::openat(dir, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const int err = errno;
    ::close(dir);
    if (up < 0) return ErrnoError("open the parent of a directory above " + path, err);
    dir = up;
  }
  ::close(dir);
  return NotFound("no namespace .layout file above " + path + " on its mount");
}

Result<PathInfo> QueryPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFound("no such directory: " + path);
    if (err == EACCES) return PermissionDenied("cannot open " + path + ": " + std::strerror(err));
    if (err == ENOTDIR) return InvalidArgument(path + " is not a directory (give an increment's directory)");
    return ErrnoError("open " + path, err);
  }
  ptstore_ioc_info info{};
  info.version = PTSTORE_IOCTL_VERSION;
  const int rc = ::ioctl(fd, PTSTORE_IOC_INFO, &info);
  const int err = errno;
  ::close(fd);
  if (rc != 0) {
    if (err == ENOTTY || err == EINVAL) {
      return InvalidArgument(path + " is not a directory of a PTStore mount (PTSTORE_IOC_INFO: " +
                             std::strerror(err) + ")");
    }
    if (err == ENOENT) return NotFound("PTSTORE_IOC_INFO on " + path + ": " + std::strerror(err));
    if (err == EPROTO) return Unimplemented("the mount at " + path + " speaks another version of the ioctl ABI");
    return ErrnoError("PTSTORE_IOC_INFO on " + path, err);
  }
  PathInfo p;
  p.kind = info.kind == PTSTORE_KIND_ROOT        ? "root"
           : info.kind == PTSTORE_KIND_NAMESPACE ? "namespace"
           : info.kind == PTSTORE_KIND_INCREMENT ? "increment"
                                                 : "unknown";
  p.ns.assign(info.ns, strnlen(info.ns, sizeof(info.ns)));
  if (info.kind >= PTSTORE_KIND_NAMESPACE) {
    Layout l;
    l.layers = info.layers;
    l.kv_heads = info.kv_heads;
    l.head_dim = info.head_dim;
    l.dtype = static_cast<DType>(info.dtype);
    l.block_tokens = info.block_tokens;
    if (l.layers == 0 && info.dtype == 0) {
      // A grouped layout: the ioctl's struct has only the dense fields (and
      // bytes_per_token); its groups are in the namespace's .layout file.
      PTS_ASSIGN_OR_RETURN(l, NamespaceLayoutAbove(path));
    }
    p.layout = l;
    p.ns_uid = info.ns_uid;
    p.ns_gid = info.ns_gid;
    p.ns_mode = info.ns_mode;
  }
  if (info.kind == PTSTORE_KIND_INCREMENT) {
    p.key = KeyHex(info.key);
    p.parent = KeyHex(info.parent);
    p.start_token = info.start_token;
    p.tokens = info.tokens;
    p.bytes = info.bytes;
    p.hits = info.hits;
    p.tensor = info.tensor;
    p.tier = TierName(static_cast<uint8_t>(info.tier));
    p.children = info.children;
  }
  p.arena_bytes = info.arena_bytes;
  p.node_id = info.node_id;
  return p;
}

}  // namespace

void BindPathInfo(py::module_& m) {
  using namespace pybind11::literals;

  py::class_<PathInfo>(m, "PathInfo", "What a PTStore mount says about one of its directories (path_info()).")
      .def_readonly("kind", &PathInfo::kind, "'root', 'namespace' or 'increment'.")
      .def_readonly("namespace", &PathInfo::ns, "Namespace name ('' for the root).")
      .def_readonly("layout", &PathInfo::layout, "The namespace's Layout (None for the root).")
      .def_readonly("ns_uid", &PathInfo::ns_uid, "Namespace owner uid.")
      .def_readonly("ns_gid", &PathInfo::ns_gid, "Namespace owner gid.")
      .def_readonly("ns_mode", &PathInfo::ns_mode, "Namespace mode bits.")
      .def_readonly("key", &PathInfo::key, "Increment: chain key at its last block ('' otherwise).")
      .def_readonly("parent", &PathInfo::parent, "Increment: its parent's key.")
      .def_readonly("start_token", &PathInfo::start_token, "Increment: depth of its first token.")
      .def_readonly("tokens", &PathInfo::tokens, "Increment: its own tokens.")
      .def_property_readonly(
          "prefix_tokens", [](const PathInfo& p) { return p.start_token + p.tokens; },
          "Increment: tokens of the whole prefix ending at it (what load_path fills).")
      .def_readonly("bytes", &PathInfo::bytes, "Increment: its own bytes.")
      .def_readonly("hits", &PathInfo::hits, "Increment: loads that used it.")
      .def_readonly("tensor", &PathInfo::tensor, "Increment: id of its tensor.")
      .def_readonly("tier", &PathInfo::tier, "Increment: 'dram', 'ssd', ...")
      .def_readonly("children", &PathInfo::children, "Increment: continuations below it.")
      .def_readonly("arena_bytes", &PathInfo::arena_bytes, "The store's arena size.")
      .def_readonly("node_id", &PathInfo::node_id, "The store's node id.")
      .def("__repr__", [](const PathInfo& p) {
        return "PathInfo(kind='" + p.kind + "', namespace='" + p.ns + "', start_token=" + std::to_string(p.start_token) +
               ", tokens=" + std::to_string(p.tokens) + ", key='" + p.key + "')";
      });
  m.def(
      "path_info", [](const std::string& path) { return Unwrap(NoGil([&] { return QueryPath(path); })); }, "path"_a,
      "Asks a PTStore mount (ioctl PTSTORE_IOC_INFO) what the directory at `path` is. InvalidArgument when it "
      "is not on a PTStore mount; NotFound when it does not exist.");
}

}  // namespace ptstore::python
