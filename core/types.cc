#include "ptstore/types.h"

namespace ptstore {

const char* CacheClassName(CacheClass c) { return c == CacheClass::kReplica ? "replica" : "owned"; }

}  // namespace ptstore
