#include "fs/ioctl_handler.h"

#include <cerrno>
#include <cstring>

#include "fs/errors.h"

namespace ptstore::fs {

uint64_t LeaseSet::Add(Lease lease) {
  core::MutexLock lock(mu_);
  uint64_t id = next_++;
  leases_.emplace(id, std::move(lease));
  return id;
}

bool LeaseSet::Remove(uint64_t id) {
  PinnedPrefix gone;  // released outside the lock
  {
    core::MutexLock lock(mu_);
    auto it = leases_.find(id);
    if (it == leases_.end()) return false;
    gone = std::move(it->second.pin);
    leases_.erase(it);
  }
  return true;
}

size_t LeaseSet::size() const {
  core::MutexLock lock(mu_);
  return leases_.size();
}

namespace {

void PutKey(const ChainKey& k, uint8_t out[16]) {
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<uint8_t>(k.hi >> (56 - 8 * i));
    out[8 + i] = static_cast<uint8_t>(k.lo >> (56 - 8 * i));
  }
}

template <typename T>
int ReadArg(const void* in, size_t in_size, T* arg) {
  if (in == nullptr || in_size < sizeof(T)) return EINVAL;
  std::memcpy(arg, in, sizeof(T));
  if (arg->version != PTSTORE_IOCTL_VERSION) return EPROTO;
  return 0;
}

template <typename T>
void WriteArg(const T& arg, std::vector<uint8_t>* out) {
  out->resize(sizeof(T));
  std::memcpy(out->data(), &arg, sizeof(T));
}

// Read permission on the namespace, for the process that made the call (the
// kernel checked it at open; the mode may have changed since).
int CheckRead(TreeView& tree, const std::string& ns, const local::Credentials& caller, NamespaceInfo* info) {
  auto got = tree.Namespace(ns);
  if (!got.ok()) return ErrnoOf(got.status());
  if (!local::CheckAccess(*got, caller, local::Access::kRead).ok()) return EACCES;
  *info = std::move(*got);
  return 0;
}

int Info(TreeView& tree, const NodeRef& dir, const local::Credentials& caller, const void* in, size_t in_size,
         std::vector<uint8_t>* out) {
  ptstore_ioc_info arg;
  if (int err = ReadArg(in, in_size, &arg)) return err;
  std::memset(&arg, 0, sizeof(arg));
  arg.version = PTSTORE_IOCTL_VERSION;
  auto stats = tree.client()->Stats();
  if (!stats.ok()) return ErrnoOf(stats.status());
  arg.arena_bytes = stats->arena_bytes;
  arg.node_id = tree.client()->node_id();
  if (dir.kind == NodeKind::kRoot) {
    arg.kind = PTSTORE_KIND_ROOT;
    WriteArg(arg, out);
    return 0;
  }
  NamespaceInfo ns;
  if (int err = CheckRead(tree, dir.ns, caller, &ns)) return err;
  arg.kind = dir.kind == NodeKind::kNamespace ? PTSTORE_KIND_NAMESPACE : PTSTORE_KIND_INCREMENT;
  std::strncpy(arg.ns, ns.name.c_str(), sizeof(arg.ns) - 1);
  arg.layers = ns.layout.layers;
  arg.kv_heads = ns.layout.kv_heads;
  arg.head_dim = ns.layout.head_dim;
  arg.dtype = static_cast<uint32_t>(ns.layout.dtype);
  arg.block_tokens = ns.layout.block_tokens;
  arg.ns_uid = ns.uid;
  arg.ns_gid = ns.gid;
  arg.ns_mode = ns.mode;
  arg.bytes_per_token = ns.layout.BytesPerToken();
  if (dir.kind == NodeKind::kIncrement) {
    auto inc = tree.Increment(dir.ns, dir.key);
    if (!inc.ok()) return ErrnoOf(inc.status());
    const PrefixNodeInfo& n = inc->node;
    PutKey(n.key, arg.key);
    PutKey(n.parent, arg.parent);
    arg.start_token = n.start_token;
    arg.tokens = n.tokens;
    arg.bytes = n.bytes;
    arg.hits = n.hits;
    arg.tensor = n.tensor.value;
    arg.tier = n.tier;
    arg.children = n.children;
  }
  WriteArg(arg, out);
  return 0;
}

void FillPage(const LeaseSet::Lease& lease, uint32_t first, ptstore_ioc_pin* arg) {
  arg->total = static_cast<uint32_t>(lease.extents.size());
  arg->tokens = lease.tokens;
  arg->bytes = lease.bytes;
  arg->first = first;
  arg->count = 0;
  for (size_t i = first; i < lease.extents.size() && arg->count < PTSTORE_IOC_MAX_EXTENTS; ++i) {
    arg->extents[arg->count++] = lease.extents[i];
  }
}

int Pin(TreeView& tree, const NodeRef& dir, LeaseSet* held, const local::Credentials& caller, const void* in,
        size_t in_size, std::vector<uint8_t>* out) {
  auto arg = std::make_unique<ptstore_ioc_pin>();
  if (int err = ReadArg(in, in_size, arg.get())) return err;
  if (held == nullptr) return EISDIR;  // pins are held by an open kv file
  LeaseSet& leases = *held;
  if ((arg->flags & ~PTSTORE_PIN_WHOLE_PREFIX) != 0) return EINVAL;
  if (dir.kind != NodeKind::kIncrement) return EINVAL;  // only increments have bytes
  NamespaceInfo ns;
  if (int err = CheckRead(tree, dir.ns, caller, &ns)) return err;
  const uint32_t first = arg->first;
  if (arg->lease == 0) {
    if (first != 0) return EINVAL;
    auto pin = tree.client()->PinIncrement(dir.ns, dir.key, (arg->flags & PTSTORE_PIN_WHOLE_PREFIX) != 0);
    if (!pin.ok()) return ErrnoOf(pin.status());
    LeaseSet::Lease lease;
    lease.tokens = pin->tokens();
    lease.bytes = pin->bytes();
    for (const Extent& e : pin->extents()) lease.extents.push_back(ptstore_ioc_extent{e.arena_offset, e.length});
    lease.pin = std::move(*pin);
    FillPage(lease, 0, arg.get());
    arg->lease = leases.Add(std::move(lease));
  } else {
    int err = 0;
    bool found = leases.With(arg->lease, [&](const LeaseSet::Lease& lease) {
      if (first > lease.extents.size()) {
        err = EINVAL;
        return;
      }
      FillPage(lease, first, arg.get());
    });
    if (!found) return EINVAL;
    if (err) return err;
  }
  WriteArg(*arg, out);
  return 0;
}

int Unpin(LeaseSet* leases, const void* in, size_t in_size, std::vector<uint8_t>* out) {
  ptstore_ioc_unpin arg;
  if (int err = ReadArg(in, in_size, &arg)) return err;
  if (leases == nullptr) return EISDIR;
  if (!leases->Remove(arg.lease)) return EINVAL;
  out->clear();
  return 0;
}

}  // namespace

int HandleIoctl(TreeView& tree, const NodeRef& node, LeaseSet* leases, const local::Credentials& caller,
                unsigned int cmd, const void* in, size_t in_size, std::vector<uint8_t>* out) {
  NodeRef dir = node;
  if (node.kind == NodeKind::kKvFile) {
    dir.kind = NodeKind::kIncrement;  // a kv file speaks for its increment
  } else if (!node.IsDir()) {
    return ENOTTY;
  }
  switch (cmd) {
    case PTSTORE_IOC_INFO: return Info(tree, dir, caller, in, in_size, out);
    case PTSTORE_IOC_PIN: return Pin(tree, dir, leases, caller, in, in_size, out);
    case PTSTORE_IOC_UNPIN: return Unpin(leases, in, in_size, out);
    default: return ENOTTY;
  }
}

}  // namespace ptstore::fs
