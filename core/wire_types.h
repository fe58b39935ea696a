// The encoding of the PTStore value types that more than one format carries:
// chain keys and layouts, written the same way in the local protocol
// (core/messages.cc, docs/wire-format.md) and in the SSD tier's record
// headers (storage/ssd_format/record.cc, docs/ssd-tier.md). The field names handed to
// the Decoder end up in its error messages ("layout.layers").
//
// Thread safety: pure functions.
#pragma once

#include "core/wire.h"
#include "ptstore/keys.h"
#include "ptstore/layout.h"
#include "ptstore/status.h"
#include "ptstore/types.h"

namespace ptstore::core {

// u64 hi, u64 lo.
void PutKey(Encoder& e, const ChainKey& k);
// Reads what PutKey wrote; a short read names `field`.
Status GetKey(Decoder& d, const char* field, ChainKey* k);

// u32 layers, u32 kv_heads, u32 head_dim, u8 dtype, u32 block_tokens (17
// bytes: a dense layout); a grouped layout (layers 0, dtype 0) goes on with
// u32 count, then per group u8 kind, u32 layers, u32 kv_heads, u32
// head_dim, u8 dtype, u32 window_tokens, u64 state_bytes (26 bytes).
void PutLayout(Encoder& e, const Layout& l);
inline constexpr size_t kLayoutGroupBytes = 26;
// Reads what PutLayout wrote: the group list when layers and dtype are 0
// (at least one group, a count bounded by the bytes left), one full group
// made the dense layout (Layout::FromGroups). It does not validate: layouts
// are validated where they are used (the server, the record header decoder).
Status GetLayout(Decoder& d, Layout* l);

// name, layout, salted, uid, gid, mode, bytes, prefixes.
void PutTimes(Encoder& e, const Times& t);
Status GetTimes(Decoder& d, Times* t);
void PutNamespaceInfo(Encoder& e, const NamespaceInfo& n);
Status GetNamespaceInfo(Decoder& d, NamespaceInfo* n);

// Reads a u32 element count and bounds it, so a hostile count cannot make
// the decoder allocate more than the body could possibly describe: each
// element takes at least min_elem_bytes.
Status GetCount(Decoder& d, const char* field, size_t min_elem_bytes, uint32_t* n);

}  // namespace ptstore::core
