#include "sched/cost_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <toml++/toml.h>

namespace ptstore::sched {

const char* LoadPathName(LoadPath p) {
  switch (p) {
    case LoadPath::kDram: return "dram";
    case LoadPath::kSsd: return "ssd";
    case LoadPath::kRma: return "rma";
    case LoadPath::kTcp: return "tcp";
  }
  return "?";
}

Result<LoadPath> ParseLoadPath(std::string_view name) {
  for (size_t i = 0; i < kLoadPaths; ++i) {
    const auto p = static_cast<LoadPath>(i);
    if (name == LoadPathName(p)) return p;
  }
  return InvalidArgument("unknown load path '" + std::string(name) + "': expected 'dram', 'ssd', 'rma' or 'tcp'");
}

Result<LoadPath> ParseRemotePath(std::string_view name) {
  if (name == "rma") return LoadPath::kRma;
  if (name == "tcp") return LoadPath::kTcp;
  return InvalidArgument("unknown remote path '" + std::string(name) + "': expected 'rma' or 'tcp'");
}

namespace {

// Solves the 3x3 system m·x = v by Gaussian elimination with partial
// pivoting; false when it is singular.
bool Solve3(double m[3][3], double v[3], double x[3]) {
  for (int col = 0; col < 3; ++col) {
    int piv = col;
    for (int r = col + 1; r < 3; ++r) {
      if (std::fabs(m[r][col]) > std::fabs(m[piv][col])) piv = r;
    }
    if (std::fabs(m[piv][col]) < 1e-300) return false;
    std::swap(m[col], m[piv]);
    std::swap(v[col], v[piv]);
    for (int r = col + 1; r < 3; ++r) {
      const double f = m[r][col] / m[col][col];
      for (int k = col; k < 3; ++k) m[r][k] -= f * m[col][k];
      v[r] -= f * v[col];
    }
  }
  for (int r = 2; r >= 0; --r) {
    double s = v[r];
    for (int k = r + 1; k < 3; ++k) s -= m[r][k] * x[k];
    x[r] = s / m[r][r];
  }
  return true;
}

// Least squares of t ≈ Σ coef_j · f_j(n) over the basis functions that
// `use` selects (n², n, 1); unused coefficients are 0.
bool FitBasis(std::span<const std::pair<uint64_t, double>> pts, const bool use[3], double out[3]) {
  // Scale n to thousands of tokens so the normal equations stay well conditioned.
  constexpr double kScale = 1000.0;
  double m[3][3] = {}, v[3] = {}, x[3] = {};
  for (const auto& [n_tokens, t] : pts) {
    const double n = static_cast<double>(n_tokens) / kScale;
    const double f[3] = {use[0] ? n * n : 0, use[1] ? n : 0, use[2] ? 1.0 : 0};
    for (int i = 0; i < 3; ++i) {
      v[i] += f[i] * t;
      for (int j = 0; j < 3; ++j) m[i][j] += f[i] * f[j];
    }
  }
  for (int i = 0; i < 3; ++i) {
    if (!use[i]) {  // pin the unused coefficient to 0
      for (int j = 0; j < 3; ++j) m[i][j] = m[j][i] = 0;
      m[i][i] = 1;
      v[i] = 0;
    }
  }
  if (!Solve3(m, v, x)) return false;
  out[0] = x[0] / (kScale * kScale);
  out[1] = x[1] / kScale;
  out[2] = x[2];
  return true;
}

template <typename T>
Result<T> Required(const toml::table& t, const std::string& where, const char* key) {
  std::optional<T> v = t[key].value<T>();
  if (!v) return InvalidArgument(where + ": `" + key + "` is missing or not a " + (std::is_same_v<T, std::string> ? "string" : "number"));
  return *v;
}

Result<PathCost> ParsePath(const toml::table& paths, const std::string& where, const char* name) {
  const toml::table* p = paths[name].as_table();
  if (!p) return InvalidArgument(where + ".paths: `" + name + "` is missing (a table with bandwidth_gbps and rtt_us)");
  const std::string w = where + ".paths." + name;
  PTS_ASSIGN_OR_RETURN(double gbps, Required<double>(*p, w, "bandwidth_gbps"));
  PTS_ASSIGN_OR_RETURN(double rtt_us, Required<double>(*p, w, "rtt_us"));
  if (!(gbps > 0) || !(rtt_us >= 0)) return InvalidArgument(w + ": bandwidth_gbps must be > 0 and rtt_us >= 0");
  return PathCost{gbps * 1e9, rtt_us * 1e-6};
}

Result<Profile> ParseProfile(const toml::table& t, const std::string& where) {
  Profile p;
  PTS_ASSIGN_OR_RETURN(p.model, Required<std::string>(t, where, "model"));
  PTS_ASSIGN_OR_RETURN(p.gpu, Required<std::string>(t, where, "gpu"));
  const std::string w = where + " (" + p.model + " on " + p.gpu + ")";
  PTS_ASSIGN_OR_RETURN(int64_t kv, Required<int64_t>(t, w, "kv_bytes_per_token"));
  if (kv <= 0) return InvalidArgument(w + ": kv_bytes_per_token must be > 0");
  p.kv_bytes_per_token = static_cast<uint64_t>(kv);
  p.source = t["source"].value_or(std::string());
  const toml::array* pts = t["prefill_ms"].as_array();
  if (!pts) return InvalidArgument(w + ": `prefill_ms` is missing (an array of [tokens, milliseconds])");
  for (const toml::node& e : *pts) {
    const toml::array* pair = e.as_array();
    std::optional<double> n = pair && pair->size() == 2 ? (*pair)[0].value<double>() : std::nullopt;
    std::optional<double> ms = pair && pair->size() == 2 ? (*pair)[1].value<double>() : std::nullopt;
    if (!n || !ms || *n < 1 || *ms <= 0) {
      return InvalidArgument(w + ": every prefill_ms entry must be [tokens >= 1, milliseconds > 0]");
    }
    p.prefill_points.emplace_back(static_cast<uint64_t>(*n), *ms / 1000.0);
  }
  Status fit = FitPrefill(p.prefill_points, &p.a, &p.b, &p.c);
  if (!fit.ok()) return InvalidArgument(w + ": " + fit.message());
  PTS_ASSIGN_OR_RETURN(double base_ms, Required<double>(t, w, "decode_base_ms"));
  PTS_ASSIGN_OR_RETURN(double per_us, Required<double>(t, w, "decode_per_kv_token_us"));
  if (!(base_ms > 0) || !(per_us >= 0)) return InvalidArgument(w + ": decode_base_ms must be > 0, decode_per_kv_token_us >= 0");
  p.decode_base_s = base_ms / 1000.0;
  p.decode_per_kv_token_s = per_us * 1e-6;
  const toml::table* paths = t["paths"].as_table();
  if (!paths) return InvalidArgument(w + ": `[profile.paths]` is missing");
  for (size_t i = 0; i < kLoadPaths; ++i) {
    PTS_ASSIGN_OR_RETURN(p.paths[i], ParsePath(*paths, w, LoadPathName(static_cast<LoadPath>(i))));
  }
  return p;
}

}  // namespace

Status FitPrefill(std::span<const std::pair<uint64_t, double>> points, double* a, double* b, double* c) {
  std::vector<uint64_t> distinct;
  for (const auto& pt : points) distinct.push_back(pt.first);
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  if (distinct.size() < 3) {
    return InvalidArgument("prefill needs points at 3 or more distinct token counts to fit a·n² + b·n + c (got " +
                           std::to_string(distinct.size()) + ")");
  }
  // Full fit first; a negative quadratic or linear term (noise in short
  // profiles) is dropped and the rest refitted.
  const bool uses[4][3] = {{true, true, true}, {false, true, true}, {true, false, true}, {false, false, true}};
  for (const auto& use : uses) {
    double x[3];
    if (!FitBasis(points, use, x)) continue;
    if (x[0] < 0 || x[1] < 0) continue;
    *a = x[0];
    *b = x[1];
    *c = std::max(0.0, x[2]);
    return Status::OK();
  }
  return InvalidArgument("prefill points cannot be fitted with non-negative a and b");
}

Result<std::vector<Profile>> ParseProfiles(std::string_view text, const std::string& origin) {
  toml::table doc;
  try {
    doc = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << origin << ":" << e.source().begin.line << ": " << e.description();
    return InvalidArgument(os.str());
  }
  const toml::array* arr = doc["profile"].as_array();
  if (!arr || arr->empty()) return InvalidArgument(origin + ": no [[profile]] tables");
  std::vector<Profile> out;
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::table* t = (*arr)[i].as_table();
    const std::string where = origin + ": profile " + std::to_string(i + 1);
    if (!t) return InvalidArgument(where + " is not a table");
    PTS_ASSIGN_OR_RETURN(Profile p, ParseProfile(*t, where));
    out.push_back(std::move(p));
  }
  return out;
}

Result<std::vector<Profile>> LoadProfiles(const std::string& path) {
  std::ifstream f(path);
  if (!f) return NotFound("cannot read the profiles file " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseProfiles(ss.str(), path);
}

std::string DefaultProfilesPath() {
  if (const char* e = std::getenv("PTSTORE_PROFILES"); e && *e) return e;
#ifdef PTSTORE_SOURCE_PROFILES
  if (std::ifstream(PTSTORE_SOURCE_PROFILES).good()) return PTSTORE_SOURCE_PROFILES;
#endif
#ifdef PTSTORE_INSTALLED_PROFILES
  return PTSTORE_INSTALLED_PROFILES;
#else
  return "sched/profiles.toml";
#endif
}

Result<CostModel> CostModel::Load(const std::string& path, const std::string& model, const std::string& gpu) {
  PTS_ASSIGN_OR_RETURN(std::vector<Profile> all, LoadProfiles(path));
  std::string have;
  for (Profile& p : all) {
    if (p.model == model && p.gpu == gpu) return CostModel(std::move(p));
    have += (have.empty() ? "" : ", ") + p.model + "/" + p.gpu;
  }
  return NotFound("no profile for model " + model + " on " + gpu + " in " + path + " (it has " + have + ")");
}

double CostModel::PrefillSeconds(uint64_t tokens, uint64_t cached_tokens) const {
  if (cached_tokens >= tokens) return 0;  // nothing to compute (the first token's logits come with the load)
  const double n = static_cast<double>(tokens), p = static_cast<double>(cached_tokens);
  return p_.a * (n * n - p * p) + p_.b * (n - p) + p_.c;
}

double CostModel::HopSeconds(uint64_t bytes, LoadPath path) const {
  if (bytes == 0) return 0;
  const PathCost& pc = p_.paths[static_cast<size_t>(path)];
  return pc.rtt_s + static_cast<double>(bytes) / pc.bandwidth_bytes_per_s;
}

double CostModel::LoadSeconds(uint64_t bytes, LoadPath path) const {
  if (bytes == 0) return 0;
  double s = HopSeconds(bytes, path);
  if (path != LoadPath::kDram) {
    s += static_cast<double>(bytes) / p_.paths[static_cast<size_t>(LoadPath::kDram)].bandwidth_bytes_per_s;
  }
  return s;
}

double CostModel::DecodeStepSeconds(uint64_t batch_kv_tokens) const {
  return p_.decode_base_s + p_.decode_per_kv_token_s * static_cast<double>(batch_kv_tokens);
}

LoadPlan CostModel::Plan(uint64_t prompt_tokens, std::span<const PrefixRun> runs, uint64_t gpu_tokens) const {
  gpu_tokens = std::min(gpu_tokens, prompt_tokens);
  LoadPlan best{gpu_tokens, 0, PrefillSeconds(prompt_tokens, gpu_tokens)};
  // Loading up to each run's end past what the GPU has: the transfer of
  // every run so far from there (one rtt per path used), plus the prefill
  // of what is left.
  double per_path_bytes[kLoadPaths] = {};
  uint64_t start = gpu_tokens;
  for (const PrefixRun& r : runs) {
    const uint64_t end = std::min(r.end_token, prompt_tokens);
    if (end <= start) continue;
    per_path_bytes[static_cast<size_t>(r.path)] += static_cast<double>((end - start) * p_.kv_bytes_per_token);
    start = end;
    double load = 0;
    for (size_t i = 0; i < kLoadPaths; ++i) {
      if (per_path_bytes[i] > 0) load += LoadSeconds(static_cast<uint64_t>(per_path_bytes[i]), static_cast<LoadPath>(i));
    }
    const LoadPlan plan{end, load, PrefillSeconds(prompt_tokens, end)};
    if (plan.total_s() < best.total_s()) best = plan;
  }
  return best;
}

uint64_t CostModel::BreakEvenTokens(uint64_t prompt_tokens, LoadPath path) const {
  // Loading p tokens saves a·p² + b·p (+ c when p == n) and costs rtt +
  // p·kv/bw; the saving grows faster than the cost, so search the first p.
  uint64_t lo = 1, hi = prompt_tokens;
  auto wins = [&](uint64_t p) {
    return LoadSeconds(p * p_.kv_bytes_per_token, path) + PrefillSeconds(prompt_tokens, p) <
           PrefillSeconds(prompt_tokens, 0);
  };
  if (prompt_tokens == 0 || !wins(hi)) return prompt_tokens + 1;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (wins(mid)) hi = mid; else lo = mid + 1;
  }
  return lo;
}

}  // namespace ptstore::sched
