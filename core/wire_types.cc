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
  if (!l.grouped()) return;
  // A grouped layout: its dense layers and dtype are 0, which no valid
  // dense layout has, so the decoder (and an older ptstored, which then
  // refuses the layout instead of misreading it) can tell.
  e.PutU32(static_cast<uint32_t>(l.groups.size()));
  for (const LayoutGroup& g : l.groups) {
    e.PutU8(static_cast<uint8_t>(g.kind));
    e.PutU32(g.layers);
    e.PutU32(g.kv_heads);
    e.PutU32(g.head_dim);
    e.PutU8(static_cast<uint8_t>(g.dtype));
    e.PutU32(g.window_tokens);
    e.PutU64(g.state_bytes);
  }
}

Status GetLayout(Decoder& d, Layout* l) {
  uint8_t dtype;
  PTS_RETURN_IF_ERROR(d.GetU32("layout.layers", &l->layers));
  PTS_RETURN_IF_ERROR(d.GetU32("layout.kv_heads", &l->kv_heads));
  PTS_RETURN_IF_ERROR(d.GetU32("layout.head_dim", &l->head_dim));
  PTS_RETURN_IF_ERROR(d.GetU8("layout.dtype", &dtype));
  l->dtype = static_cast<DType>(dtype);
  PTS_RETURN_IF_ERROR(d.GetU32("layout.block_tokens", &l->block_tokens));
  l->groups.clear();
  if (l->layers != 0 || dtype != 0) return Status::OK();
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "layout.groups", kLayoutGroupBytes, &n));
  // Zero groups would decode as the (invalid) dense layout and encode
  // without a count: not canonical.
  if (n == 0) return ProtocolError("field 'layout.groups' count 0: a grouped layout has at least one group");
  std::vector<LayoutGroup> groups(n);
  for (LayoutGroup& g : groups) {
    uint8_t kind, gdtype;
    PTS_RETURN_IF_ERROR(d.GetU8("layout.group.kind", &kind));
    PTS_RETURN_IF_ERROR(d.GetU32("layout.group.layers", &g.layers));
    PTS_RETURN_IF_ERROR(d.GetU32("layout.group.kv_heads", &g.kv_heads));
    PTS_RETURN_IF_ERROR(d.GetU32("layout.group.head_dim", &g.head_dim));
    PTS_RETURN_IF_ERROR(d.GetU8("layout.group.dtype", &gdtype));
    PTS_RETURN_IF_ERROR(d.GetU32("layout.group.window_tokens", &g.window_tokens));
    PTS_RETURN_IF_ERROR(d.GetU64("layout.group.state_bytes", &g.state_bytes));
    g.kind = static_cast<GroupKind>(kind);
    g.dtype = static_cast<DType>(gdtype);
  }
  // One full group is the dense layout (FromGroups makes it that); what
  // else was in the dense slots stays, for the server to refuse.
  if (l->kv_heads == 0 && l->head_dim == 0) {
    *l = Layout::FromGroups(std::move(groups), l->block_tokens);
  } else {
    l->groups = std::move(groups);
  }
  return Status::OK();
}

void PutTimes(Encoder& e, const Times& t) {
  e.PutU64(t.mtime_ns);
  e.PutU64(t.atime_ns);
  e.PutU64(t.ctime_ns);
}
Status GetTimes(Decoder& d, Times* t) {
  PTS_RETURN_IF_ERROR(d.GetU64("times.mtime", &t->mtime_ns));
  PTS_RETURN_IF_ERROR(d.GetU64("times.atime", &t->atime_ns));
  return d.GetU64("times.ctime", &t->ctime_ns);
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
  PutTimes(e, n.times);
}
Status GetNamespaceInfo(Decoder& d, NamespaceInfo* n) {
  PTS_RETURN_IF_ERROR(d.GetString("namespace.name", &n->name, 4096));
  PTS_RETURN_IF_ERROR(GetLayout(d, &n->layout));
  PTS_RETURN_IF_ERROR(d.GetBool("namespace.salted", &n->salted));
  PTS_RETURN_IF_ERROR(d.GetU32("namespace.uid", &n->uid));
  PTS_RETURN_IF_ERROR(d.GetU32("namespace.gid", &n->gid));
  PTS_RETURN_IF_ERROR(d.GetU32("namespace.mode", &n->mode));
  PTS_RETURN_IF_ERROR(d.GetU64("namespace.bytes", &n->bytes));
  PTS_RETURN_IF_ERROR(d.GetU64("namespace.prefixes", &n->prefixes));
  return GetTimes(d, &n->times);
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
