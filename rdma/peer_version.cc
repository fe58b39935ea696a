// LocalPeerVersions (rdma/auth.h), alone in its file: a ptstored built for a
// mixed-version test compiles this file with PTSTORE_PEER_PROTOCOL_MAX set
// to an older version; the linker then never pulls this archive member.
#include "rdma/auth.h"

#ifndef PTSTORE_PEER_PROTOCOL_MAX
#define PTSTORE_PEER_PROTOCOL_MAX ::ptstore::rdma::kPeerProtocolMax
#endif

namespace ptstore::rdma {

core::PeerVersionRange LocalPeerVersions() {
  static_assert(PTSTORE_PEER_PROTOCOL_MAX >= kPeerProtocolMin && PTSTORE_PEER_PROTOCOL_MAX <= kPeerProtocolMax,
                "PTSTORE_PEER_PROTOCOL_MAX outside the versions this release speaks");
  return {kPeerProtocolMin, static_cast<uint16_t>(PTSTORE_PEER_PROTOCOL_MAX)};
}

}  // namespace ptstore::rdma
