// client/ is below the storage libraries: scripts/check-layers must report
// this include too (ctest storage_layers_catches). Never compiled.
#pragma once
#include "storage/cache/store.h"
