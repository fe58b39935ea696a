// The libfabric-RMA transport (storage/cluster/peer_transport.h): the TCP
// transport's connections carry every message, and a fetch's reply names
// where the pinned bytes are in the owner's registered arena; the reader
// pulls them with one-sided reads (rdma/fabric.h) and then releases the
// owner's pins (PeerRelease, or its connection closing, or a minute).
//
// Each node opens one Fabric, registers its arena in it, and tells its
// fabric address in its ping replies; a peer whose address does not work
// (or that has none: a tcp node) is fetched from over the TCP stream.
//
// Thread safety: as TcpTransport. An RmaLink's mu_ guards the peer's fabric
// address; it is never held while calling the Fabric's Read.
#pragma once

#include <memory>
#include <string>

#include "core/mutex.h"
#include "rdma/fabric.h"
#include "storage/cluster/tcp_transport.h"

namespace ptstore::storage {

class RmaTransport : public TcpTransport {
 public:
  // Opens the Fabric (options.fabric_provider, bound to self's host) and
  // registers `store`'s arena in it (key node id + 1).
  static Result<std::unique_ptr<RmaTransport>> Create(const ClusterOptions& options, core::Member self,
                                                      rdma::ClusterSecret secret, Store* store);
  ~RmaTransport() override;

  std::unique_ptr<PeerLink> Connect(const core::Member& m) override;
  std::string data_path() const override { return "rma"; }
  std::string fabric_provider() const override { return options_.fabric_provider; }
  void DescribeSelf(core::PeerPingReply* rep) const override;

 protected:
  Status ServeRmaFetch(local::FramedSocket& sock, const local::Frame& f, const core::PeerFetch& req,
                       ConnState& conn) override;

 private:
  RmaTransport(const ClusterOptions& options, core::Member self, rdma::ClusterSecret secret, uint8_t* arena,
               std::unique_ptr<rdma::Fabric> fabric);
  std::unique_ptr<rdma::Fabric> fabric_;
};

// The link to one peer: RMA reads once its fabric address works, the TCP
// stream before that.
class RmaLink : public TcpLink {
 public:
  RmaLink(std::unique_ptr<rdma::PeerChannel> channel, const ClusterOptions& options, ClusterCounters* counters,
          uint8_t* arena, rdma::Fabric* fabric);
  ~RmaLink() override;  // the peer's address leaves the Fabric
  void OnPing(const core::PeerPingReply& rep) override EXCLUDES(mu_);

 protected:
  Status FetchOn(rdma::PeerChannel::Conn& c, core::PeerFetch msg, FetchRequest& req, uint64_t block_bytes,
                 int timeout_ms) override EXCLUDES(mu_);

 private:
  rdma::Fabric* const fabric_;
  core::Mutex mu_;
  bool ready_ GUARDED_BY(mu_) = false;
  uint64_t handle_ GUARDED_BY(mu_) = 0;
  uint64_t region_key_ GUARDED_BY(mu_) = 0;
  std::string address_ GUARDED_BY(mu_);
};

}  // namespace ptstore::storage
