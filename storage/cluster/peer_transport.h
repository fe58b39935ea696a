// The seam between a node's cluster logic (storage/cluster/cluster.h) and the link
// to its peers (docs/architecture.md "The transport seam"). Cluster speaks
// to every other member through a PeerLink and serves them through the
// PeerService it hands its PeerTransport; it never knows which transport
// that is:
//
//   TcpTransport       (storage/cluster/tcp_transport.h): authenticated TCP
//                      connections; a fetch's bytes follow its reply as a
//                      stream.
//   RmaTransport       (storage/cluster/rma_transport.h): the same
//                      connections for every message; a fetch's bytes are
//                      pulled by one-sided libfabric reads from the owner's
//                      registered arena.
//   LoopbackTransport  (storage/cluster/loopback_transport.h): in-process;
//                      the owner's PeerService is called directly and the
//                      bytes copied arena to arena, with faults (drop,
//                      delay, partition, death) injected on the way.
//
// The owner side of a fetch has one implementation, PinForFetch (below;
// PeerService::PinFetch creates a missing namespace, then calls it): it
// pins what is asked and says what it holds; each transport only carries
// the pinned bytes (stream, RMA, memcpy) and lets go of the ServedFetch
// when they are read. The store's own tests (tests/storage/
// store_remote_testing.h) serve their in-process fetches with it too.
//
// Liveness is the cluster's: it pings through PeerLink::Call and reads the
// errors below. Every link reports the same vocabulary:
//   Unavailable       the peer cannot be reached (refused, gone, killed);
//   DeadlineExceeded  no answer within the timeout (silent, partitioned,
//                     the message or its answer lost or too late);
//   Corruption        an answer failed its MAC (the tcp links retry once);
//   anything else     the peer's own answer (its ErrorReply's Status).
//
// Thread safety: links and transports may be used from many threads at
// once; PeerService's methods are called concurrently by every transport.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/membership.h"
#include "core/messages.h"
#include "core/peer_messages.h"
#include "ptstore/status.h"
#include "ptstore/types.h"
#include "local/framed_socket.h"
#include "storage/cache/remote.h"

namespace ptstore::storage {

class Store;
struct ClusterCounters;

// The owner's pins of one fetch: what PinFetch pinned and the reply that
// describes it (blocks and `gone` per segment; no pieces, no stream_bytes:
// the transport adds what it carries). The pins are released when this is
// destroyed unless TakeLeases took them. Move-only; one thread at a time.
class ServedFetch {
 public:
  ServedFetch(Store* store, uint64_t session) : store_(store), session_(session) {}
  ServedFetch(ServedFetch&& o) noexcept;
  ServedFetch& operator=(ServedFetch&&) = delete;
  ServedFetch(const ServedFetch&) = delete;
  ~ServedFetch();

  core::PeerFetchReply reply;
  std::vector<std::vector<Extent>> extents;  // per segment: the pinned bytes in the owner's arena

  void AddLease(uint64_t lease_id) { leases_.push_back(lease_id); }
  bool empty() const { return leases_.empty(); }
  // The bytes of every extent together.
  uint64_t bytes() const;
  // The owner's arena (where the extents are).
  const uint8_t* arena() const;
  // Hands the pins to the caller (RMA: held until the reader's PeerRelease).
  std::vector<uint64_t> TakeLeases() { return std::move(leases_); }

 private:
  Store* store_;
  uint64_t session_;
  std::vector<uint64_t> leases_;
};

// The owner side of every peer message (Cluster implements it).
class PeerService {
 public:
  virtual ~PeerService() = default;
  // Whether node `peer` (authenticated, or named by an in-process link) may
  // be served now: a member. `remote` names where it came from in logs;
  // `first` is its connection's first request (refusals are logged then).
  virtual bool Admit(uint32_t peer, const std::string& remote, bool first) = 0;
  // A session for the pins of one connection, and its end (every pin of
  // the session released).
  virtual uint64_t NewSession() = 0;
  virtual void EndSession(uint64_t session) = 0;
  // Releases pins a ServedFetch handed over (TakeLeases).
  virtual void Release(const std::vector<uint64_t>& leases, uint64_t session) = 0;
  // Every request but PeerFetch and PeerRelease: the encoded reply (of
  // type f.type + 1), or the error to answer with.
  virtual Result<std::vector<uint8_t>> Handle(const local::Frame& f, uint64_t session) = 0;
  // The owner side of a fetch, for every transport: creates the namespace
  // if this node lacks it, pins each segment's blocks this node holds along
  // the prompt (from start_block on, in `session`), and says which it does
  // not hold (`gone`). An error only for bad requests and namespaces that
  // differ; nothing held is a reply with 0 blocks.
  virtual Result<ServedFetch> PinFetch(const core::PeerFetch& req, uint64_t session) = 0;
};

// The link from this node to one other member.
class PeerLink {
 public:
  virtual ~PeerLink() = default;
  // One request (`body` encodes a message of type `type`) and the body of
  // its reply (type + 1), within timeout_ms; errors as at the top.
  virtual Result<std::vector<uint8_t>> Exchange(core::MsgType type, const std::vector<uint8_t>& body,
                                                int timeout_ms) = 0;
  // Fetches `msg`'s segments from the owner into this node's arena (each at
  // its request segment's arena_offset), within timeout_ms. On OK every
  // segment's fetched_blocks and gone are set; on an error nothing counts
  // as fetched (a partial fetch serves nothing) and no byte lands in the
  // arena after the call returns.
  virtual Status Fetch(const core::PeerFetch& msg, FetchRequest& req, uint64_t block_bytes, int timeout_ms) = 0;
  // The peer died or restarted: pooled connections are closed.
  virtual void Reset() = 0;
  // The peer answered a ping (RMA: learns its fabric address).
  virtual void OnPing(const core::PeerPingReply& rep) { (void)rep; }

  template <typename Req, typename Rep>
  Result<Rep> Call(const Req& req, int timeout_ms) {
    core::Encoder e;
    req.Encode(e);
    PTS_ASSIGN_OR_RETURN(std::vector<uint8_t> body, Exchange(Req::kType, e.buffer(), timeout_ms));
    Rep rep;
    core::Decoder d(body);
    PTS_RETURN_IF_ERROR(rep.Decode(d).WithContext(std::string("decoding the reply to ") +
                                                  core::MsgTypeName(static_cast<uint16_t>(Req::kType))));
    return rep;
  }
};

class PeerTransport {
 public:
  virtual ~PeerTransport() = default;
  // Binds what peers reach this node at (tcp: listens), serving nothing
  // yet; `service` and `counters` outlive the transport's use.
  virtual Status Open(PeerService* service, ClusterCounters* counters) = 0;
  // Starts serving peers (after Open and the members' Connect).
  virtual void Serve() = 0;
  // Stops serving: no service call runs once it returns. Links stay usable
  // (their calls fail) until destroyed, before the transport.
  virtual void Stop() = 0;
  // The link to member `m` (nothing is connected until it is used).
  virtual std::unique_ptr<PeerLink> Connect(const core::Member& m) = 0;
  // The port peers reach this node at (tcp: bound; loopback: 0).
  virtual uint16_t port() const = 0;
  // The data path in logs and status ("tcp", "rma", "loopback").
  virtual std::string data_path() const = 0;
  // The libfabric provider asked for (rma), else empty.
  virtual std::string fabric_provider() const { return {}; }
  // Fills what the transport says of this node in its ping replies (rma:
  // fabric address and region key).
  virtual void DescribeSelf(core::PeerPingReply* rep) const { (void)rep; }
};

// The requester's message for one owner's FetchRequest: the namespace, the
// prompt up to the last segment's end, the segments. `bytes` (if given) is
// what the segments span.
core::PeerFetch FetchMessage(const NamespaceDef& ns, std::span<const uint32_t> tokens, const FetchRequest& req,
                             uint64_t* bytes = nullptr);
// The owner side of a fetch, the one implementation (PeerService::PinFetch
// is this after creating a missing namespace): pins in `store`, in
// `session`, each segment's blocks it holds along the prompt, and says
// which it does not hold. An error only for bad requests.
Result<ServedFetch> PinForFetch(Store* store, const core::PeerFetch& req, uint64_t session);

// Checks an owner's reply against the request (segment count, no more
// blocks than asked): a Protocol error naming what is wrong.
Status CheckFetchReply(const core::PeerFetchReply& rep, const FetchRequest& req);
// Marks the reply's blocks fetched (after the bytes arrived).
void ApplyFetchReply(const core::PeerFetchReply& rep, FetchRequest& req);
// An in-process copy of what the owner pinned: checks the reply, copies
// each segment's extents to its arena_offset in `arena` (block_bytes per
// block), then marks the blocks fetched. `copied` (if given) gets the bytes.
Status CopyServedFetch(const ServedFetch& served, FetchRequest& req, uint64_t block_bytes, uint8_t* arena,
                       uint64_t* copied = nullptr);

}  // namespace ptstore::storage
