#include "ptstore/layout.h"

#include <charconv>
#include <map>
#include <sstream>

namespace ptstore {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return 2;
    case DType::kFP16: return 2;
    case DType::kFP32: return 4;
    case DType::kFP8: return 1;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
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

namespace {
Status CheckRange(const char* field, uint64_t value, uint64_t lo, uint64_t hi) {
  if (value < lo || value > hi) {
    return InvalidArgument("layout field " + std::string(field) + "=" + std::to_string(value) +
                           " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return Status::OK();
}
}  // namespace

Status Layout::Validate() const {
  PTS_RETURN_IF_ERROR(CheckRange("layers", layers, 1, 1024));
  PTS_RETURN_IF_ERROR(CheckRange("kv_heads", kv_heads, 1, 1024));
  PTS_RETURN_IF_ERROR(CheckRange("head_dim", head_dim, 1, 16384));
  PTS_RETURN_IF_ERROR(CheckRange("block_tokens", block_tokens, 1, 65536));
  if (DTypeSize(dtype) == 0) {
    return InvalidArgument("layout field dtype=" + std::to_string(static_cast<int>(dtype)) +
                           " is not one of bf16, fp16, fp32, fp8");
  }
  // One block must fit comfortably in an arena: cap it at 4 GiB.
  if (BytesPerBlock() > (uint64_t{4} << 30)) {
    return InvalidArgument("layout block of " + std::to_string(BytesPerBlock()) +
                           " bytes exceeds the 4 GiB limit per block");
  }
  return Status::OK();
}

std::string Layout::ToString() const {
  std::ostringstream os;
  os << "layers=" << layers << " kv_heads=" << kv_heads << " head_dim=" << head_dim
     << " dtype=" << DTypeName(dtype) << " block_tokens=" << block_tokens;
  return os.str();
}

Result<Layout> Layout::Parse(std::string_view text) {
  std::map<std::string, std::string, std::less<>> fields;
  size_t pos = 0;
  while (pos < text.size()) {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\n' || text[pos] == '\t' || text[pos] == ',')) ++pos;
    if (pos >= text.size()) break;
    size_t end = text.find_first_of(" \n\t,", pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(pos, end - pos);
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgument("layout item '" + std::string(item) + "' is not key=value");
    }
    fields[std::string(item.substr(0, eq))] = std::string(item.substr(eq + 1));
    pos = end;
  }
  Layout l;
  auto number = [&](const char* key, uint32_t* out) -> Status {
    auto it = fields.find(key);
    if (it == fields.end()) return InvalidArgument(std::string("layout is missing field '") + key + "'");
    const std::string& v = it->second;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
    if (ec != std::errc() || p != v.data() + v.size()) {
      return InvalidArgument(std::string("layout field '") + key + "' has non-numeric value '" + v + "'");
    }
    fields.erase(it);
    return Status::OK();
  };
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
  if (name.empty() || name.size() > 128) {
    return InvalidArgument("namespace name must be 1..128 characters, got " + std::to_string(name.size()));
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
