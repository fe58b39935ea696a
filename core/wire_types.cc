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

void PutNamespaceInfo(Encoder& e, const NamespaceInfo& n) {
  e.PutString(n.name);
  PutLayout(e, n.layout);
  e.PutBool(n.salted);
  e.PutU32(n.uid);
  e.PutU32(n.gid);
  e.PutU32(n.mode);
  e.PutU64(n.bytes);
  e.PutU64(n.prefixes);
}
Status GetNamespaceInfo(Decoder& d, NamespaceInfo* n) {
  PTS_RETURN_IF_ERROR(d.GetString("namespace.name", &n->name, 4096));
  PTS_RETURN_IF_ERROR(GetLayout(d, &n->layout));
  PTS_RETURN_IF_ERROR(d.GetBool("namespace.salted", &n->salted));
  PTS_RETURN_IF_ERROR(d.GetU32("namespace.uid", &n->uid));
  PTS_RETURN_IF_ERROR(d.GetU32("namespace.gid", &n->gid));
  PTS_RETURN_IF_ERROR(d.GetU32("namespace.mode", &n->mode));
  PTS_RETURN_IF_ERROR(d.GetU64("namespace.bytes", &n->bytes));
  return d.GetU64("namespace.prefixes", &n->prefixes);
}

// Bounds the element counts of lists so a hostile count cannot make us
// allocate more than the body could possibly describe.
Status GetCount(Decoder& d, const char* field, size_t min_elem_bytes, uint32_t* n) {
  PTS_RETURN_IF_ERROR(d.GetU32(field, n));
  if (min_elem_bytes && *n > d.remaining() / min_elem_bytes) {
    return ProtocolError(std::string("field '") + field + "' count " + std::to_string(*n) +
                         " does not fit in the " + std::to_string(d.remaining()) + " remaining bytes");
  }
  return Status::OK();
}


}  // namespace ptstore::core
