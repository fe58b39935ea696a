#include "core/wire_types.h"

namespace ptstore::core {

void PutKey(Encoder& e, const ChainKey& k) {
  e.PutU64(k.hi);
  e.PutU64(k.lo);
}

Status GetKey(Decoder& d, const char* field, ChainKey* k) {
  PTS_RETURN_IF_ERROR(d.GetU64(field, &k->hi));
  return d.GetU64(field, &k->lo);
}

void PutLayout(Encoder& e, const Layout& l) {
  e.PutU32(l.layers);
  e.PutU32(l.kv_heads);
  e.PutU32(l.head_dim);
  e.PutU8(static_cast<uint8_t>(l.dtype));
  e.PutU32(l.block_tokens);
}

Status GetLayout(Decoder& d, Layout* l) {
  uint8_t dtype;
  PTS_RETURN_IF_ERROR(d.GetU32("layout.layers", &l->layers));
  PTS_RETURN_IF_ERROR(d.GetU32("layout.kv_heads", &l->kv_heads));
  PTS_RETURN_IF_ERROR(d.GetU32("layout.head_dim", &l->head_dim));
  PTS_RETURN_IF_ERROR(d.GetU8("layout.dtype", &dtype));
  l->dtype = static_cast<DType>(dtype);
  return d.GetU32("layout.block_tokens", &l->block_tokens);
}

}  // namespace ptstore::core
