// A file of the ssd layer that includes the server and the node-to-node
// messages: scripts/check-layers must report both (ctest
// storage_layers_catches). Never compiled.
#pragma once
#include "storage/server/node.h"
#include "core/peer_messages.h"
