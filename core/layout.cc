#include "ptstore/layout.h"

#include <charconv>
#include <map>
#include <numeric>
#include <sstream>
#include <utility>

namespace ptstore {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kNone: return 0;
    case DType::kBF16: return 2;
    case DType::kFP16: return 2;
    case DType::kFP32: return 4;
    case DType::kFP8: return 1;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kNone: return "none";
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP32: return "fp32";
    case DType::kFP8: return "fp8";
  }
  return "invalid";
}

Result<DType> ParseDType(std::string_view name) {
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "fp16" || name == "float16" || name == "half") return DType::kFP16;
  if (name == "fp32" || name == "float32" || name == "float") return DType::kFP32;
  if (name == "fp8" || name == "float8_e4m3fn") return DType::kFP8;
  return InvalidArgument("unknown dtype '" + std::string(name) +
                         "' (expected bf16, fp16, fp32 or fp8)");
}

std::string_view GroupKindName(GroupKind kind) {
  switch (kind) {
    case GroupKind::kFull: return "full";
    case GroupKind::kWindow: return "window";
    case GroupKind::kLatent: return "latent";
    case GroupKind::kState: return "state";
  }
  return "invalid";
}

Result<GroupKind> ParseGroupKind(std::string_view name) {
  for (GroupKind k : {GroupKind::kFull, GroupKind::kWindow, GroupKind::kLatent, GroupKind::kState}) {
    if (name == GroupKindName(k)) return k;
  }
  return InvalidArgument("unknown layout group kind '" + std::string(name) +
                         "' (expected full, window, latent or state)");
}

// ------------------------------------------------------------- LayoutGroup

LayoutGroup LayoutGroup::Full(uint32_t layers, uint32_t kv_heads, uint32_t head_dim, DType dtype) {
  LayoutGroup g;
  g.kind = GroupKind::kFull;
  g.layers = layers;
  g.kv_heads = kv_heads;
  g.head_dim = head_dim;
  g.dtype = dtype;
  return g;
}

LayoutGroup LayoutGroup::Window(uint32_t layers, uint32_t kv_heads, uint32_t head_dim, DType dtype,
                                uint32_t window_tokens) {
  LayoutGroup g = Full(layers, kv_heads, head_dim, dtype);
  g.kind = GroupKind::kWindow;
  g.window_tokens = window_tokens;
  return g;
}

LayoutGroup LayoutGroup::Latent(uint32_t layers, uint32_t head_dim, DType dtype) {
  LayoutGroup g = Full(layers, 1, head_dim, dtype);
  g.kind = GroupKind::kLatent;
  return g;
}

LayoutGroup LayoutGroup::State(uint32_t layers, uint64_t state_bytes) {
  LayoutGroup g;
  g.kind = GroupKind::kState;
  g.layers = layers;
  g.state_bytes = state_bytes;
  return g;
}

uint64_t LayoutGroup::BytesPerBlock(uint32_t block_tokens) const {
  const uint64_t elem = DTypeSize(dtype);
  switch (kind) {
    case GroupKind::kFull:
    case GroupKind::kWindow: return uint64_t{block_tokens} * layers * 2 * kv_heads * head_dim * elem;
    case GroupKind::kLatent: return uint64_t{block_tokens} * layers * head_dim * elem;
    case GroupKind::kState: return uint64_t{layers} * state_bytes;
  }
  return 0;
}

std::string LayoutGroup::ToString() const {
  std::ostringstream os;
  os << GroupKindName(kind) << ":layers=" << layers;
  switch (kind) {
    case GroupKind::kFull:
    case GroupKind::kWindow:
      os << ":kv_heads=" << kv_heads << ":head_dim=" << head_dim << ":dtype=" << DTypeName(dtype);
      if (kind == GroupKind::kWindow) os << ":window=" << window_tokens;
      break;
    case GroupKind::kLatent: os << ":head_dim=" << head_dim << ":dtype=" << DTypeName(dtype); break;
    case GroupKind::kState: os << ":bytes=" << state_bytes; break;
    default: os << ":kind=" << static_cast<int>(kind); break;
  }
  return os.str();
}

// ------------------------------------------------------------------ Layout

namespace {

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// "layout field layers=0 ..." (prefix ""), "layout group 1 (window) field ...".
Status CheckRange(const std::string& prefix, const char* field, uint64_t value, uint64_t lo, uint64_t hi) {
  if (value < lo || value > hi) {
    return InvalidArgument("layout " + prefix + "field " + field + "=" + std::to_string(value) + " is out of range [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return Status::OK();
}

Status CheckDType(const std::string& prefix, DType dtype) {
  if (DTypeSize(dtype) == 0) {
    return InvalidArgument("layout " + prefix + "field dtype=" + std::to_string(static_cast<int>(dtype)) +
                           " is not one of bf16, fp16, fp32, fp8");
  }
  return Status::OK();
}

// "layout group 2 (state) field kv_heads=8 must be 0 (...)".
Status MustBe(const std::string& prefix, const char* field, uint64_t value, uint64_t want, const char* why) {
  if (value == want) return Status::OK();
  return InvalidArgument("layout " + prefix + "field " + field + "=" + std::to_string(value) + " must be " +
                         std::to_string(want) + " (" + why + ")");
}

// index: its place in the layout, or npos for a group on its own.
Status ValidateGroup(const LayoutGroup& g, size_t index) {
  const std::string at = index == std::string::npos ? "group " : "group " + std::to_string(index) + " ";
  const std::string named = at + "(" + std::string(GroupKindName(g.kind)) + ") ";
  if (GroupKindName(g.kind) == "invalid") {
    return InvalidArgument("layout " + at + "field kind=" + std::to_string(static_cast<int>(g.kind)) +
                           " is not one of full, window, latent, state");
  }
  PTS_RETURN_IF_ERROR(CheckRange(named, "layers", g.layers, 1, 1024));
  switch (g.kind) {
    case GroupKind::kFull:
    case GroupKind::kWindow:
      PTS_RETURN_IF_ERROR(CheckRange(named, "kv_heads", g.kv_heads, 1, 1024));
      PTS_RETURN_IF_ERROR(CheckRange(named, "head_dim", g.head_dim, 1, 16384));
      PTS_RETURN_IF_ERROR(CheckDType(named, g.dtype));
      break;
    case GroupKind::kLatent:
      PTS_RETURN_IF_ERROR(MustBe(named, "kv_heads", g.kv_heads, 1, "a latent group has one vector per token per layer"));
      PTS_RETURN_IF_ERROR(CheckRange(named, "head_dim", g.head_dim, 1, 16384));
      PTS_RETURN_IF_ERROR(CheckDType(named, g.dtype));
      break;
    case GroupKind::kState:
      PTS_RETURN_IF_ERROR(MustBe(named, "kv_heads", g.kv_heads, 0, "a state group has no heads"));
      PTS_RETURN_IF_ERROR(MustBe(named, "head_dim", g.head_dim, 0, "a state group has no heads"));
      PTS_RETURN_IF_ERROR(MustBe(named, "dtype", static_cast<uint64_t>(g.dtype), 0,
                                 "a state group is bytes: dtype none"));
      PTS_RETURN_IF_ERROR(CheckRange(named, "state_bytes", g.state_bytes, 1, uint64_t{1} << 30));
      break;
  }
  if (g.kind == GroupKind::kWindow) {
    PTS_RETURN_IF_ERROR(CheckRange(named, "window_tokens", g.window_tokens, 1, UINT32_MAX));
  } else {
    PTS_RETURN_IF_ERROR(MustBe(named, "window_tokens", g.window_tokens, 0, "only window groups have a window"));
  }
  if (g.kind != GroupKind::kState) {
    PTS_RETURN_IF_ERROR(MustBe(named, "state_bytes", g.state_bytes, 0, "only state groups have state bytes"));
  }
  return Status::OK();
}

// A single full group that FromGroups turns into the dense layout.
bool IsPlainFullGroup(const std::vector<LayoutGroup>& groups) {
  return groups.size() == 1 && groups[0].kind == GroupKind::kFull && groups[0].window_tokens == 0 &&
         groups[0].state_bytes == 0;
}

}  // namespace

Status LayoutGroup::Validate() const { return ValidateGroup(*this, std::string::npos); }

Layout Layout::FromGroups(std::vector<LayoutGroup> groups, uint32_t block_tokens) {
  Layout l;
  l.block_tokens = block_tokens;
  if (IsPlainFullGroup(groups)) {
    l.layers = groups[0].layers;
    l.kv_heads = groups[0].kv_heads;
    l.head_dim = groups[0].head_dim;
    l.dtype = groups[0].dtype;
    return l;
  }
  l.dtype = DType::kNone;
  l.groups = std::move(groups);
  return l;
}

std::vector<LayoutGroup> Layout::AsGroups() const {
  if (!groups.empty()) return groups;
  return {LayoutGroup::Full(layers, kv_heads, head_dim, dtype)};
}

// Slices in group order, each at a multiple of 64 bytes; the block padded
// to a multiple of lcm(64, block_tokens) so that bytes per token is whole.
uint64_t Layout::GroupedBytesPerBlock() const {
  if (block_tokens == 0 || groups.empty()) return 0;
  const size_t last = groups.size() - 1;
  return AlignUp(GroupOffset(last) + groups[last].BytesPerBlock(block_tokens),
                 std::lcm(kGroupAlignment, uint64_t{block_tokens}));
}

uint64_t Layout::GroupOffset(size_t g) const {
  if (groups.empty()) return 0;
  uint64_t end = 0;
  for (size_t i = 0; i < g && i < groups.size(); ++i) {
    end = AlignUp(end, kGroupAlignment) + groups[i].BytesPerBlock(block_tokens);
  }
  return AlignUp(end, kGroupAlignment);
}

uint64_t Layout::GroupBytesPerBlock(size_t g) const {
  if (groups.empty()) return BytesPerBlock();
  return g < groups.size() ? groups[g].BytesPerBlock(block_tokens) : 0;
}

Status Layout::Validate() const {
  if (!groups.empty()) {
    if (groups.size() > kMaxGroups) {
      return InvalidArgument("layout has " + std::to_string(groups.size()) + " groups, at most " +
                             std::to_string(kMaxGroups));
    }
    const char* why = "a grouped layout's fields are in its groups";
    PTS_RETURN_IF_ERROR(MustBe("", "layers", layers, 0, why));
    PTS_RETURN_IF_ERROR(MustBe("", "kv_heads", kv_heads, 0, why));
    PTS_RETURN_IF_ERROR(MustBe("", "head_dim", head_dim, 0, why));
    PTS_RETURN_IF_ERROR(MustBe("", "dtype", static_cast<uint64_t>(dtype), 0, "none in a grouped layout"));
    PTS_RETURN_IF_ERROR(CheckRange("", "block_tokens", block_tokens, 1, 65536));
    for (size_t i = 0; i < groups.size(); ++i) PTS_RETURN_IF_ERROR(ValidateGroup(groups[i], i));
    if (IsPlainFullGroup(groups)) {
      return InvalidArgument("a layout of one full group is the dense layout of that group "
                             "(Layout::FromGroups makes it)");
    }
  } else {
    PTS_RETURN_IF_ERROR(CheckRange("", "layers", layers, 1, 1024));
    PTS_RETURN_IF_ERROR(CheckRange("", "kv_heads", kv_heads, 1, 1024));
    PTS_RETURN_IF_ERROR(CheckRange("", "head_dim", head_dim, 1, 16384));
    PTS_RETURN_IF_ERROR(CheckRange("", "block_tokens", block_tokens, 1, 65536));
    PTS_RETURN_IF_ERROR(CheckDType("", dtype));
  }
  // One block must fit comfortably in an arena: cap it at 4 GiB. (With every
  // field in range no product above overflows: a group is under 2^54 bytes.)
  if (BytesPerBlock() > (uint64_t{4} << 30)) {
    return InvalidArgument("layout block of " + std::to_string(BytesPerBlock()) +
                           " bytes exceeds the 4 GiB limit per block");
  }
  return Status::OK();
}

std::string Layout::ToString() const {
  std::ostringstream os;
  if (!groups.empty()) {
    os << "block_tokens=" << block_tokens;
    for (const LayoutGroup& g : groups) os << " group=" << g.ToString();
    return os.str();
  }
  os << "layers=" << layers << " kv_heads=" << kv_heads << " head_dim=" << head_dim
     << " dtype=" << DTypeName(dtype) << " block_tokens=" << block_tokens;
  return os.str();
}

namespace {

template <typename T>
Status ParseNumber(const std::string& what, const std::string& v, T* out) {
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
  if (ec != std::errc() || p != v.data() + v.size()) {
    return InvalidArgument(what + " has non-numeric value '" + v + "'");
  }
  return Status::OK();
}

// One group= value: "KIND:key=value:key=value...", every field of its kind
// required, no other.
Result<LayoutGroup> ParseGroup(std::string_view text, size_t index) {
  const std::string at = "layout group " + std::to_string(index);
  const size_t colon = text.find(':');
  auto kind = ParseGroupKind(text.substr(0, colon));
  if (!kind.ok()) return InvalidArgument(at + ": " + kind.status().message());
  const std::string named = at + " (" + std::string(GroupKindName(*kind)) + ")";
  std::map<std::string, std::string, std::less<>> fields;
  size_t pos = colon == std::string_view::npos ? text.size() : colon + 1;
  while (pos < text.size()) {
    size_t end = text.find(':', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(pos, end - pos);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgument(named + " item '" + std::string(item) + "' is not key=value");
    }
    std::string key(item.substr(0, eq));
    if (fields.count(key)) return InvalidArgument(named + " has field '" + key + "' twice");
    fields[key] = std::string(item.substr(eq + 1));
    pos = end + 1;
  }
  LayoutGroup g;
  g.kind = *kind;
  auto take = [&](const char* key, auto* out) -> Status {
    auto it = fields.find(key);
    if (it == fields.end()) return InvalidArgument(named + " is missing field '" + key + "'");
    PTS_RETURN_IF_ERROR(ParseNumber(named + " field '" + key + "'", it->second, out));
    fields.erase(it);
    return Status::OK();
  };
  auto take_dtype = [&]() -> Status {
    auto it = fields.find("dtype");
    if (it == fields.end()) return InvalidArgument(named + " is missing field 'dtype'");
    auto dt = ParseDType(it->second);
    if (!dt.ok()) return InvalidArgument(named + ": " + dt.status().message());
    g.dtype = *dt;
    fields.erase(it);
    return Status::OK();
  };
  PTS_RETURN_IF_ERROR(take("layers", &g.layers));
  switch (g.kind) {
    case GroupKind::kFull:
    case GroupKind::kWindow:
      PTS_RETURN_IF_ERROR(take("kv_heads", &g.kv_heads));
      PTS_RETURN_IF_ERROR(take("head_dim", &g.head_dim));
      PTS_RETURN_IF_ERROR(take_dtype());
      if (g.kind == GroupKind::kWindow) PTS_RETURN_IF_ERROR(take("window", &g.window_tokens));
      break;
    case GroupKind::kLatent:
      g.kv_heads = 1;
      PTS_RETURN_IF_ERROR(take("head_dim", &g.head_dim));
      PTS_RETURN_IF_ERROR(take_dtype());
      break;
    case GroupKind::kState:
      PTS_RETURN_IF_ERROR(take("bytes", &g.state_bytes));
      break;
  }
  if (!fields.empty()) return InvalidArgument(named + " has unknown field '" + fields.begin()->first + "'");
  return g;
}

}  // namespace

Result<Layout> Layout::Parse(std::string_view text) {
  std::map<std::string, std::string, std::less<>> fields;
  std::vector<std::string> group_items;
  size_t pos = 0;
  while (pos < text.size()) {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\n' || text[pos] == '\t' || text[pos] == ',')) ++pos;
    if (pos >= text.size()) break;
    size_t end = text.find_first_of(" \n\t,", pos);
    if (end == std::string_view::npos) end = text.size();
    // Colons separate items too (where spaces cannot be written: a mount
    // option, an xattr value); after group=KIND, the items up to the next
    // group= or block_tokens= of the same word are that group's fields.
    std::string_view word = text.substr(pos, end - pos);
    size_t group = std::string::npos;  // the group= item this word is in
    for (size_t from = 0; from <= word.size();) {
      size_t colon = word.find(':', from);
      if (colon == std::string_view::npos) colon = word.size();
      std::string_view item = word.substr(from, colon - from);
      from = colon + 1;
      const size_t eq = item.find('=');
      const std::string_view key = item.substr(0, eq);
      if (group != std::string::npos && key != "group" && key != "block_tokens") {
        group_items[group] += ":" + std::string(item);
        continue;
      }
      if (eq == std::string_view::npos) {
        return InvalidArgument("layout item '" + std::string(item) + "' is not key=value");
      }
      if (key == "group") {
        group = group_items.size();
        group_items.emplace_back(item.substr(eq + 1));
      } else {
        group = std::string::npos;
        fields[std::string(key)] = std::string(item.substr(eq + 1));
      }
    }
    pos = end;
  }
  Layout l;
  auto number = [&](const char* key, uint32_t* out) -> Status {
    auto it = fields.find(key);
    if (it == fields.end()) return InvalidArgument(std::string("layout is missing field '") + key + "'");
    PTS_RETURN_IF_ERROR(ParseNumber(std::string("layout field '") + key + "'", it->second, out));
    fields.erase(it);
    return Status::OK();
  };
  if (!group_items.empty()) {
    for (const char* dense : {"layers", "kv_heads", "head_dim", "dtype"}) {
      if (fields.count(dense)) {
        return InvalidArgument(std::string("layout field '") + dense +
                               "' cannot be given with group= items (each group has its own)");
      }
    }
    if (group_items.size() > kMaxGroups) {
      return InvalidArgument("layout has " + std::to_string(group_items.size()) + " groups, at most " +
                             std::to_string(kMaxGroups));
    }
    uint32_t block_tokens = 0;
    PTS_RETURN_IF_ERROR(number("block_tokens", &block_tokens));
    if (!fields.empty()) return InvalidArgument("layout has unknown field '" + fields.begin()->first + "'");
    std::vector<LayoutGroup> groups;
    for (size_t i = 0; i < group_items.size(); ++i) {
      PTS_ASSIGN_OR_RETURN(LayoutGroup g, ParseGroup(group_items[i], i));
      groups.push_back(g);
    }
    l = FromGroups(std::move(groups), block_tokens);
    PTS_RETURN_IF_ERROR(l.Validate());
    return l;
  }
  PTS_RETURN_IF_ERROR(number("layers", &l.layers));
  PTS_RETURN_IF_ERROR(number("kv_heads", &l.kv_heads));
  PTS_RETURN_IF_ERROR(number("head_dim", &l.head_dim));
  PTS_RETURN_IF_ERROR(number("block_tokens", &l.block_tokens));
  auto dt = fields.find("dtype");
  if (dt == fields.end()) return InvalidArgument("layout is missing field 'dtype'");
  PTS_ASSIGN_OR_RETURN(l.dtype, ParseDType(dt->second));
  fields.erase(dt);
  if (!fields.empty()) return InvalidArgument("layout has unknown field '" + fields.begin()->first + "'");
  PTS_RETURN_IF_ERROR(l.Validate());
  return l;
}

Layout MistralLayout() {
  Layout l;
  l.layers = 32;
  l.kv_heads = 8;
  l.head_dim = 128;
  l.dtype = DType::kBF16;
  l.block_tokens = 16;
  return l;
}

Status ValidateNamespaceName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNamespaceNameBytes) {
    return InvalidArgument("namespace name must be 1.." + std::to_string(kMaxNamespaceNameBytes) +
                           " characters, got " + std::to_string(name.size()));
  }
  if (name[0] == '.') return InvalidArgument("namespace name '" + std::string(name) + "' must not start with '.'");
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-';
    if (!ok) {
      return InvalidArgument("namespace name '" + std::string(name) +
                             "' has a character outside [A-Za-z0-9._-]");
    }
  }
  return Status::OK();
}

}  // namespace ptstore
