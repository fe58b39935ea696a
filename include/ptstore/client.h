// libptstore: the client API of the local ptstored.
//
//   auto client = ptstore::Client::Connect({}).value();
//   client->CreateNamespace("mistral-7b", ptstore::MistralLayout());
//   client->Save("mistral-7b", tokens, kv.data(), kv.size());
//   uint64_t got = client->Load("mistral-7b", tokens, dst, dst_bytes).value();
//
// Prefixes are token-id sequences; only whole blocks of the namespace's
// block_tokens count (a partial last block is ignored, never an error). KV
// bytes are token-major: bytes_per_token per token, in token order.
//
// A cache miss is not an error: Load returns the number of tokens it filled
// (possibly 0), always a whole number of blocks from the start of the prompt.
//
// Thread safety: a Client may be used from many threads at once; requests
// run in parallel over up to max_connections connections. A PinnedPrefix is
// used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ptstore/layout.h"
#include "ptstore/options.h"
#include "ptstore/quota.h"
#include "ptstore/status.h"
#include "ptstore/types.h"

namespace ptstore {

namespace client {
class Connection;
class ClientCore;
class Internals;  // libptstore's own access to the pieces below (the GPU copy path)
}  // namespace client

// The extents of a prefix pinned in the server's arena: they cannot be
// evicted until this object is released or destroyed (or its lease runs
// out: lease_ms from the Hello, 30 s by default). Move-only.
class PinnedPrefix {
 public:
  PinnedPrefix() = default;
  PinnedPrefix(PinnedPrefix&& other) noexcept;
  PinnedPrefix& operator=(PinnedPrefix&& other) noexcept;
  ~PinnedPrefix();  // Release(), errors ignored

  uint64_t tokens() const { return tokens_; }
  uint64_t bytes() const;
  const std::vector<Extent>& extents() const { return extents_; }
  // Read-only pointer to an extent's bytes in the mapped arena.
  const uint8_t* data(const Extent& e) const;
  // Copies the first `bytes` bytes of the prefix into dst (bytes <= bytes()).
  Status CopyTo(void* dst, uint64_t bytes) const;
  // Unpins now. A second call is a no-op.
  Status Release();
  bool pinned() const { return lease_ != 0; }

 private:
  friend class Client;
  friend class client::Internals;
  std::shared_ptr<client::ClientCore> core_;
  std::shared_ptr<client::Connection> conn_;
  uint64_t lease_ = 0;
  uint64_t tokens_ = 0;
  std::vector<Extent> extents_;
};

// One piece of a copy out of the mapped arena (Client::CopyFromArena):
// `length` bytes at `arena_offset` go to `dst_offset` of the destination.
struct ArenaPiece {
  uint64_t arena_offset = 0;
  uint64_t length = 0;
  uint64_t dst_offset = 0;
};

// A buffer shared with the server (a memfd both sides map). Saves from it
// and copied loads into it cost one copy, made by the server. Move-only;
// valid while its Client lives.
class RegisteredBuffer {
 public:
  RegisteredBuffer() = default;
  RegisteredBuffer(RegisteredBuffer&&) noexcept = default;
  RegisteredBuffer& operator=(RegisteredBuffer&& other) noexcept;
  ~RegisteredBuffer();  // unregisters it from the server
  uint8_t* data() const;
  uint64_t size() const;

 private:
  friend class Client;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

class Client {
 public:
  // Connects and says Hello. Unavailable when no server listens there.
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();

  // True when loads copy straight out of the mapped arena.
  bool mapped() const;
  uint32_t node_id() const;
  // Which arena this client maps: the same number in every client of one
  // ptstored, another one once that ptstored restarted (a new arena); 0
  // without the mapping. Extents (Extent::arena_offset) are offsets in it.
  uint64_t arena_id() const;
  // Copies `pieces` of the mapped arena into `dst` (`dst_bytes` long): the
  // bytes of extents pinned by this client or by another of the same
  // arena_id, which must keep them pinned until the copy returns (the
  // arena does not know who reads it). PermissionDenied without the
  // mapping; InvalidArgument, naming the piece, for one outside the arena
  // or outside dst (nothing is copied then).
  Status CopyFromArena(std::span<const ArenaPiece> pieces, void* dst, uint64_t dst_bytes) const;

  // Creates a namespace (owned by the caller's uid/gid). With exist_ok, an
  // existing one with the same layout and salt is returned as is.
  Result<NamespaceInfo> CreateNamespace(const std::string& name, const Layout& layout, const std::string& salt = "",
                                        uint32_t mode = 0755, bool exist_ok = true);
  Result<NamespaceInfo> GetNamespace(const std::string& name);
  Result<std::vector<NamespaceInfo>> ListNamespaces();
  Result<RemoveResult> DropNamespace(const std::string& name);

  // Saves the KV of the whole blocks of `tokens`; `kv` holds exactly
  // whole_blocks * bytes_per_block bytes (InvalidArgument otherwise). Only
  // blocks past what is already stored are written.
  Result<SaveResult> Save(const std::string& ns, std::span<const uint32_t> tokens, const void* kv, uint64_t bytes);
  Result<SaveResult> Save(const std::string& ns, std::span<const uint32_t> tokens, const RegisteredBuffer& buf,
                          uint64_t offset, uint64_t bytes);

  // Longest stored prefix: matched tokens and its extents (no pin, no hit).
  Result<PrefixInfo> Lookup(const std::string& ns, std::span<const uint32_t> tokens);

  // Pins the longest stored prefix (mapped clients only). A miss gives an
  // unpinned PinnedPrefix with tokens() == 0.
  Result<PinnedPrefix> Pin(const std::string& ns, std::span<const uint32_t> tokens);

  // Loads the longest stored prefix that fits in `capacity` bytes into dst;
  // returns the tokens loaded (0 on a miss).
  Result<uint64_t> Load(const std::string& ns, std::span<const uint32_t> tokens, void* dst, uint64_t capacity);
  // Same, into a registered buffer (the server copies; no arena mapping).
  Result<uint64_t> Load(const std::string& ns, std::span<const uint32_t> tokens, const RegisteredBuffer& buf,
                        uint64_t offset, uint64_t capacity);

  // Removes the increment holding the prefix's last block and all below it.
  Result<RemoveResult> Remove(const std::string& ns, std::span<const uint32_t> tokens);
  Result<RemoveResult> RemoveByKey(const std::string& ns, const ChainKey& key);

  Result<StoreStats> Stats();
  // The members of the cluster as this node sees them (enabled == false on
  // a node without a cluster file).
  Result<ClusterStatus> GetClusterStatus();
  // Where these increments (chain keys as ListTree names them) are in the
  // cluster: their owner and every node holding their bytes.
  Result<std::vector<IncrementLocation>> Locate(const std::string& ns, const std::vector<ChainKey>& keys);
  // Where the longest match of `tokens` is in the cluster, run by run: each
  // run's owner and every node holding its bytes (the scheduler's locality
  // probe; HeldBy(node) is what an instance beside that node loads
  // locally). Not counted as a lookup. A miss is matched_tokens == 0.
  Result<PrefixLocation> LocatePrefix(const std::string& ns, std::span<const uint32_t> tokens);
  // Increments below `parent` (zero key: the namespace root).
  Result<std::vector<PrefixNodeInfo>> ListTree(const std::string& ns, const ChainKey& parent = {},
                                               bool recursive = false);

  // A buffer of at least `bytes` bytes registered with the server.
  Result<RegisteredBuffer> AllocateBuffer(uint64_t bytes);

  // One increment of a namespace's tree by its chain key (the names
  // ListTree gives): its listing entry and its own token ids. NotFound if
  // there is no such increment.
  Result<IncrementInfo> GetIncrement(const std::string& ns, const ChainKey& key);
  // Sets the increment's atime and mtime (nanoseconds since the epoch; 0
  // leaves that one as it is), as touch(1) does on a mount; its ctime
  // becomes now. A later atime also becomes its ancestors' (a use of an
  // increment uses its prefix). Needs write permission on the namespace.
  // Returns its listing entry afterwards; NotFound if there is no such
  // increment.
  Result<PrefixNodeInfo> SetTimes(const std::string& ns, const ChainKey& key, uint64_t atime_ns, uint64_t mtime_ns);
  // Namespace quotas on this node (ptstore/quota.h). SetQuota sets the
  // tiers `change` names (0: no limit) and returns the quotas and use
  // afterwards; only the namespace's owner or root may (PermissionDenied
  // naming the namespace otherwise). InvalidArgument for a quota above
  // kMaxQuotaBytes, an SSD quota on a node without an SSD tier, or a change
  // that names no tier. A quota below the namespace's use evicts its own
  // increments at once.
  Result<NamespaceQuota> SetQuota(const std::string& ns, const QuotaChange& change);
  // The quotas and use of one namespace, or (empty `ns`) of every one.
  Result<std::vector<NamespaceQuota>> Quotas(const std::string& ns = "");
  // The changes of this node's index (increments that appeared or went,
  // uses, namespaces created or dropped; TreeChanges) from position `since`
  // of log `epoch` on, at most `max` (0: the server's limit, 4096): what a
  // mount polls to keep the kernel's cache exact. Start with epoch 0 (the
  // reply is `lost`, empty, and says where the log is); go on from `next`
  // with the reply's epoch. Only changes of namespaces this client may
  // read are reported (and every namespace's creation and drop).
  Result<TreeChanges> Changes(uint64_t epoch, uint64_t since, uint32_t max = 0);
  // Pins the increment's bytes (with `whole_prefix`, those of the whole
  // prefix that ends with it) in the mapped arena. NotFound if it is gone;
  // PermissionDenied for a client without the mapping.
  Result<PinnedPrefix> PinIncrement(const std::string& ns, const ChainKey& key, bool whole_prefix = false);

  // Loads the prefix that ends at `path`, an increment directory of a
  // PTStore mount (ptstore(7)), into `dst`, through the mount's ioctl
  // (include/ptstore/ioctl.h; no read(2) of kv files): pins it (on the
  // increment's kv file), copies it out of this client's arena mapping,
  // unpins (the kv file's own pin, held while it is open, goes moments
  // later: FUSE sends the release of a closed file asynchronously). The
  // mount must front the
  // same ptstored as this client (checked by node id and arena size), and
  // this client must map the arena. Returns the tokens loaded; `capacity`
  // below the prefix's bytes is InvalidArgument. Paths longer than PATH_MAX
  // (trees deeper than ~120 levels) are opened component by component.
  Result<uint64_t> LoadPath(const std::string& path, void* dst, uint64_t capacity);

 private:
  friend class client::Internals;
  explicit Client(std::shared_ptr<client::ClientCore> core);
  // A PinnedPrefix for a lease taken over `conn` (checks the extents lie
  // in the arena).
  Result<PinnedPrefix> MakePinned(const std::shared_ptr<client::Connection>& conn, uint64_t lease, uint64_t tokens,
                                  std::vector<Extent> extents);
  std::shared_ptr<client::ClientCore> core_;
};

}  // namespace ptstore
