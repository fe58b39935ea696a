// client/ links no libfabric, ibverbs or libcrypto: scripts/check-layers
// must report this include of rdma/ (ctest storage_layers_catches). Never
// compiled.
#pragma once
#include "rdma/peer_channel.h"
