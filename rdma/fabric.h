// One-sided RMA reads over libfabric (DESIGN.md §5, "Data path"): every node
// registers one region (its shared-memory arena) for remote reads, publishes
// its address, and pulls extents from its peers' regions with fi_read into
// its own region. The same code runs on verbs (InfiniBand/RoCE), cxi
// (Slingshot), efa (AWS) and, on any machine, tcp;ofi_rxm over loopback.
//
//   auto f = Fabric::Open({.provider = "tcp", .node = "10.0.0.7"});
//   f->RegisterRegion(arena, arena_bytes, /*requested_key=*/node_id + 1);
//   send (f->address(), f->region_key()) to the peers (RPC, cluster file);
//   uint64_t p = f->AddPeer(peer_address);
//   f->Read(p, peer_key, {{local_off, remote_off, len}, ...}, /*timeout_ms=*/500);
//
// Registration: remote offsets are always relative to the peer's region base.
// When the provider needs virtual addresses (FI_MR_VIRT_ADDR: verbs, efa)
// Read adds the peer's base, which travels in its address(); when it chooses
// keys itself (FI_MR_PROV_KEY) region_key() is its key, not the requested
// one. tcp;ofi_rxm needs neither: offsets and the requested key.
//
// Progress: one thread per Fabric polls the completion queue, because with
// manual data progress (tcp, verbs) a node only serves its peers' reads and
// finishes its own while someone polls. It spins while completions flow and
// blocks in fi_cq_sread (or sleeps, when the CQ has no wait object) when idle,
// so an idle Fabric costs no CPU. Completions go to the waiting Read by the
// op's context.
//
// Deadlines: a Read that is not done within its timeout returns
// DeadlineExceeded. Its reads still in flight are cancelled where the
// provider can (fi_cancel); where it cannot (tcp, verbs: RMA is not
// cancellable) they stay in flight and MAY STILL WRITE their destination
// ranges until they complete or fail (a dead peer's connection fails them
// all). Their bookkeeping stays owned by the Fabric, so no completion ever
// touches freed memory; reads_in_flight() counts them. A caller that reuses
// the destination of a timed-out Read must first wait for reads_in_flight()
// to drop, or accept that the bytes may change.
//
// libfabric 1.17 (Debian 12) tcp;ofi_rxm, known limits: a peer whose
// process is gone is never reported as such while connecting (rxm retries
// the connection on every post), so its reads end in DeadlineExceeded; a
// read past a region it does not know the size of, or with a wrong key,
// makes the target drop the whole connection, failing the other reads on
// it too (hence the size check against the address); and its tcp provider
// may complete a half-received read twice when its connection fails while
// sending (fixed in libfabric 1.18), which crashes rxm. The destructor
// avoids the one case of that it controls (fabric.cc).
//
// Errors: Unavailable when no provider fits or a peer is gone (its
// connection reset, its reads cancelled), IOError for other completion
// errors, InvalidArgument for bad ops (out of either region, unknown peer),
// DeadlineExceeded as above. Messages name the provider or peer and
// fi_strerror's text.
//
// Thread safety: every method may be called from any thread; many threads
// may Read at once (also from the same peer). RegisterRegion once, before
// the first Read. REQUIRES: no call in progress when the Fabric is destroyed.
//
// Build note: libfabric's own header is also named <rdma/fabric.h>. Include
// this one as "rdma/fabric.h"; only rdma/ may include libfabric's headers
// (rdma/CMakeLists.txt compiles it with the project root as an -iquote
// directory, so that <rdma/fabric.h> there is libfabric's).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "core/mutex.h"
#include "ptstore/status.h"

struct fi_info;
struct fid_fabric;
struct fid_domain;
struct fid_av;
struct fid_cq;
struct fid_ep;
struct fid_mr;

namespace ptstore::rdma {

struct FabricOptions {
  // fi_getinfo's provider name hint: "tcp" gives tcp;ofi_rxm for FI_EP_RDM;
  // "verbs", "cxi", "efa", "shm" elsewhere. Empty: let libfabric choose.
  std::string provider = "tcp";
  // The local address to bind (the host of the node's cluster address).
  // Empty: let the provider choose.
  std::string node = "127.0.0.1";
  // Largest single fi_read; larger ops are split. 0: the provider's
  // max_msg_size (unbounded on tcp). Smaller chunks keep a big op's pieces
  // in flight at once.
  uint64_t max_read_bytes = 0;
  // fi_reads one Read call keeps in flight at most.
  uint32_t read_window = 16;
  // Testing aid: offer only the legacy FI_MR_BASIC registration mode
  // (virtual addresses, provider keys), which tcp grants, to exercise the
  // path verbs and efa take on a machine without them.
  bool legacy_mr_basic = false;
};

// What Open would use, as fi_getinfo describes it.
struct FabricChoice {
  std::string provider;       // "tcp;ofi_rxm"
  std::string fabric;         // "127.0.0.1/32"
  std::string domain;         // "lo"
  std::string endpoint_type;  // "FI_EP_RDM"
  uint64_t max_msg_size = 0;
  bool virtual_addresses = false;  // FI_MR_VIRT_ADDR (or FI_MR_BASIC)
  bool provider_keys = false;      // FI_MR_PROV_KEY (or FI_MR_BASIC)
  bool local_registration = false; // FI_MR_LOCAL
  bool manual_progress = false;    // data_progress == FI_PROGRESS_MANUAL
};

// The first offer fi_getinfo makes for `options` (what Open would open),
// without opening anything. Unavailable naming the provider and node when
// there is none.
Result<FabricChoice> ChooseFabric(const FabricOptions& options);

class Fabric {
 public:
  // Opens fabric, domain, address vector, completion queue and an FI_EP_RDM
  // endpoint with FI_RMA|FI_READ|FI_REMOTE_READ, and starts the progress
  // thread. Unavailable when no provider offers that (naming provider, node
  // and fi_strerror), InvalidArgument for options libfabric refuses.
  static Result<std::unique_ptr<Fabric>> Open(const FabricOptions& options);
  // Gives reads still in flight up to 0.5 s, stops the progress thread,
  // closes everything (see fabric.cc for libfabric 1.17's tcp provider).
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // Registers [base, base + length) for remote reads by peers and as the
  // local destination of Read: one region (the node's arena; 4 GiB+ is
  // fine). `requested_key` is the key peers use unless the provider picks
  // keys itself (then region_key() says which). InvalidArgument for a second
  // call, an empty region, or a key wider than the provider's keys.
  Status RegisterRegion(uint8_t* base, uint64_t length, uint64_t requested_key) EXCLUDES(region_mu_);
  uint64_t region_key() const;  // REQUIRES: RegisterRegion succeeded

  // This endpoint's address (fi_getname) plus the base and length of the
  // registered region, as one opaque blob for AddPeer on the peers. Take it
  // after RegisterRegion: peers that read by virtual address need the base,
  // and every peer checks its reads against the length.
  std::vector<uint8_t> address() const;

  const std::string& provider() const { return choice_.provider; }
  const std::string& endpoint_type() const { return choice_.endpoint_type; }
  const std::string& fabric_name() const { return choice_.fabric; }
  const std::string& domain_name() const { return choice_.domain; }
  const FabricChoice& choice() const { return choice_; }
  // The size Read splits ops into.
  uint64_t max_read_bytes() const { return max_read_; }

  // Inserts a peer's address(); returns a handle for Read (never reused).
  // InvalidArgument for a malformed address. RemovePeer when the peer dies
  // or changes address: new Reads of the handle are InvalidArgument, those
  // running finish (the address leaves the AV after them).
  Result<uint64_t> AddPeer(std::span<const uint8_t> address) EXCLUDES(peers_mu_);
  void RemovePeer(uint64_t peer) EXCLUDES(peers_mu_);

  struct ReadOp {
    uint64_t local_offset;   // in this node's region
    uint64_t remote_offset;  // in the peer's region
    uint64_t length;
  };
  // Reads every op from `peer`'s region (key `remote_key`) into this node's
  // region, max_read_bytes() at a time with up to read_window of them in
  // flight, and returns when all completed (OK), one failed (its error,
  // after the others finished or the deadline passed), or timeout_ms passed
  // (DeadlineExceeded; see the header comment). timeout_ms < 0: no
  // deadline. Ops past the end of either region are InvalidArgument and
  // nothing is read.
  Status Read(uint64_t peer, uint64_t remote_key, std::span<const ReadOp> ops, int timeout_ms)
      EXCLUDES(peers_mu_, inflight_mu_);

  // fi_reads posted and not completed yet, those of timed-out Reads
  // included.
  uint64_t reads_in_flight() const EXCLUDES(inflight_mu_);

 private:
  struct Peer {
    uint64_t fi_addr = 0;
    std::string name;          // "fi_sockaddr_in://127.0.0.1:41234"
    uint64_t region_base = 0;  // the peer's, from its address()
    uint64_t region_length = 0;
    bool has_region = false;
  };
  struct ReadCall;
  struct OpContext;

  Fabric() = default;
  void ProgressLoop() EXCLUDES(inflight_mu_);
  // Dispatches the completion of one op (status OK or its error).
  void Complete(OpContext* op, Status status) EXCLUDES(inflight_mu_);
  void HandleCompletionError() EXCLUDES(inflight_mu_);
  // Whether closing the endpoint with reads in flight may crash libfabric.
  bool CloseMayCrash() const;
  // Read's steps: the ops checked against both regions (*total: their
  // bytes), and the DeadlineExceeded of a Read not done in time (its ops
  // still in flight cancelled where the provider can).
  Status CheckReadOps(const Peer& p, std::span<const ReadOp> ops, uint64_t* total) const;
  Status ReadTimedOut(const std::shared_ptr<ReadCall>& call, const Peer& p, size_t op_count, uint64_t total,
                      int timeout_ms, uint64_t left, uint64_t refusals, Status error) EXCLUDES(inflight_mu_);

  FabricOptions options_;
  FabricChoice choice_;
  uint64_t max_read_ = 0;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  bool cq_waitable_ = false;  // fi_cq_sread works (the CQ has a wait object)
  std::vector<uint8_t> name_;  // fi_getname

  // Guards RegisterRegion against itself. The region's fields are set once
  // under it, before any Read, and read without it from then on (published
  // by registered_), so only mr_ is GUARDED_BY it.
  core::Mutex region_mu_;
  fid_mr* mr_ GUARDED_BY(region_mu_) = nullptr;
  void* mr_desc_ = nullptr;
  uint8_t* region_base_ = nullptr;
  uint64_t region_length_ = 0;
  uint64_t region_key_ = 0;
  std::atomic<bool> registered_{false};

  mutable core::SharedMutex peers_mu_;
  // Shared with the Reads using them; the last owner removes the address
  // from the AV.
  std::map<uint64_t, std::shared_ptr<const Peer>> peers_ GUARDED_BY(peers_mu_);
  uint64_t next_peer_ GUARDED_BY(peers_mu_) = 1;

  // Posted ops not yet completed. Lock order: never held while calling into
  // libfabric, except fi_cancel (which the progress thread never waits on).
  mutable core::Mutex inflight_mu_;
  std::unordered_set<OpContext*> inflight_ GUARDED_BY(inflight_mu_);

  std::atomic<bool> stop_{false};
  std::thread progress_;
};

}  // namespace ptstore::rdma
