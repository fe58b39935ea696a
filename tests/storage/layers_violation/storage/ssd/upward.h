// A file of the ssd layer that includes the server: scripts/check-layers
// must report it (ctest storage_layers_catches). Never compiled.
#pragma once
#include "storage/server/node.h"
