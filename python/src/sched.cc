// The cost model of the scheduler library (sched/cost_model.h,
// sched/load_advisor.h) for Python: CostModel, LoadPlan, and
// Client.advise(), the "load or recompute?" question a client or the vLLM
// connector asks before a load. A CostModel is an immutable value (shared
// by its Python object); advise() copies it into a LoadAdvisor and asks
// ptstored where the prefix is with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "python/src/bindings.h"
#include "sched/cost_model.h"
#include "sched/load_advisor.h"

namespace ptstore::python {

namespace {

using sched::CostModel;
using sched::LoadPath;
using sched::LoadPlan;

// "dram", "ssd", "rma" or "tcp"; InvalidArgument names them otherwise.
LoadPath PathFrom(const std::string& name) { return Unwrap(sched::ParseLoadPath(name)); }

std::string Seconds(double s) {
  std::ostringstream os;
  os.precision(6);
  os << s;
  return os.str();
}

py::dict ProfileDict(const sched::Profile& p) {
  py::dict d;
  d["model"] = p.model;
  d["gpu"] = p.gpu;
  d["kv_bytes_per_token"] = p.kv_bytes_per_token;
  d["a"] = p.a;
  d["b"] = p.b;
  d["c"] = p.c;
  d["source"] = p.source;
  d["decode_base_s"] = p.decode_base_s;
  d["decode_per_kv_token_s"] = p.decode_per_kv_token_s;
  py::list points;
  for (const auto& [n, s] : p.prefill_points) points.append(py::make_tuple(n, s));
  d["prefill_points"] = points;
  py::dict paths;
  for (size_t i = 0; i < sched::kLoadPaths; ++i) {
    py::dict one;
    one["bandwidth_bytes_per_s"] = p.paths[i].bandwidth_bytes_per_s;
    one["rtt_s"] = p.paths[i].rtt_s;
    paths[sched::LoadPathName(static_cast<LoadPath>(i))] = one;
  }
  d["paths"] = paths;
  return d;
}

std::vector<sched::PrefixRun> RunsFrom(const std::vector<std::tuple<uint64_t, std::string>>& runs) {
  std::vector<sched::PrefixRun> out;
  out.reserve(runs.size());
  uint64_t prev = 0;
  for (const auto& [end, path] : runs) {
    if (end < prev) {
      throw StatusError(InvalidArgument("runs must be in order of growing end_token: " + std::to_string(end) +
                                        " follows " + std::to_string(prev)));
    }
    prev = end;
    out.push_back({end, PathFrom(path)});
  }
  return out;
}

void BindLoadPlan(py::module_& m) {
  using namespace pybind11::literals;

  py::class_<LoadPlan>(m, "LoadPlan", R"doc(
The cheapest way to prefill a prompt whose prefix is cached: load tokens
[0, load_tokens) (those past ``gpu_tokens``, when the plan was made with
some already in GPU memory) and recompute the rest. ``load_tokens == 0``
means recompute everything. Times in seconds, from the cost model's profile.
)doc")
      .def(py::init([](uint64_t load_tokens, double load_s, double compute_s) {
             return LoadPlan{load_tokens, load_s, compute_s};
           }),
           "load_tokens"_a = 0, "load_s"_a = 0.0, "compute_s"_a = 0.0)
      .def_readonly("load_tokens", &LoadPlan::load_tokens, "Tokens to load from the start of the prompt (0: recompute).")
      .def_readonly("load_s", &LoadPlan::load_s, "Seconds of the transfers (one rtt per path used).")
      .def_readonly("compute_s", &LoadPlan::compute_s, "Seconds of the prefill of the tokens not loaded.")
      .def_property_readonly("total_s", &LoadPlan::total_s, "load_s + compute_s.")
      .def_property_readonly(
          "recompute", [](const LoadPlan& p) { return p.load_tokens == 0; }, "True when the plan loads nothing.")
      .def("__eq__",
           [](const LoadPlan& a, const LoadPlan& b) {
             return a.load_tokens == b.load_tokens && a.load_s == b.load_s && a.compute_s == b.compute_s;
           },
           py::is_operator())
      .def("__eq__", [](const LoadPlan&, py::handle) { return false; })
      .def("__repr__", [](const LoadPlan& p) {
        return "LoadPlan(load_tokens=" + std::to_string(p.load_tokens) + ", load_s=" + Seconds(p.load_s) +
               ", compute_s=" + Seconds(p.compute_s) + ", total_s=" + Seconds(p.total_s()) + ")";
      });
}

void BindCostModel(py::module_& m) {
  using namespace pybind11::literals;

  py::class_<CostModel, std::shared_ptr<CostModel>>(m, "CostModel", R"doc(
The scheduler's cost model (sched/cost_model.h, docs/profiles.md) for one
model on one GPU:

    prefill(n, cached p) = a·(n² − p²) + b·(n − p) + c
    load(bytes, path)    = rtt + bytes / bandwidth (+ the dram hop for ssd/rma/tcp)
    decode step          = decode_base + decode_per_kv_token · KV tokens in the batch

Made by CostModel.load() from a profiles file (TOML). Paths are 'dram'
(this node's arena to the GPU), 'ssd', 'rma' and 'tcp'. An immutable value,
safe to share between threads.
)doc")
      .def_static(
          "load",
          [](std::optional<std::string> path, const std::string& model, const std::string& gpu) {
            const std::string p = path ? *path : sched::DefaultProfilesPath();
            return std::make_shared<CostModel>(Unwrap(NoGil([&] { return CostModel::Load(p, model, gpu); })));
          },
          "path"_a = py::none(), "model"_a = "mistral-7b", "gpu"_a = "h100-80g",
          "The profile of `model` on `gpu` in the profiles file `path` (None: the shipped one, or "
          "$PTSTORE_PROFILES). NotFound names the profiles the file has; InvalidArgument names a wrong key.")
      .def_static("default_profiles_path", &sched::DefaultProfilesPath,
                  "The profiles file load() reads by default ($PTSTORE_PROFILES, else the shipped one).")
      .def_property_readonly(
          "profile", [](const CostModel& c) { return ProfileDict(c.profile()); },
          "The profile as a dict: model, gpu, kv_bytes_per_token, a, b, c (fitted, seconds), source, "
          "decode_base_s, decode_per_kv_token_s, prefill_points [(tokens, seconds)], paths {name: "
          "{bandwidth_bytes_per_s, rtt_s}}.")
      .def_property_readonly(
          "model", [](const CostModel& c) { return c.profile().model; }, "The profile's model name.")
      .def_property_readonly(
          "gpu", [](const CostModel& c) { return c.profile().gpu; }, "The profile's GPU name.")
      .def_property_readonly(
          "kv_bytes_per_token", [](const CostModel& c) { return c.profile().kv_bytes_per_token; },
          "KV bytes per token of the model.")
      .def("prefill_seconds", &CostModel::PrefillSeconds, "tokens"_a, "cached"_a = 0,
           "Seconds to prefill a prompt of `tokens` tokens whose first `cached` are already in GPU memory "
           "(0 when cached >= tokens).")
      .def(
          "load_seconds", [](const CostModel& c, uint64_t bytes, const std::string& path) {
            return c.LoadSeconds(bytes, PathFrom(path));
          },
          "bytes"_a, "path"_a, "Seconds to bring `bytes` into GPU memory over `path` (both hops for ssd/rma/tcp).")
      .def(
          "hop_seconds", [](const CostModel& c, uint64_t bytes, const std::string& path) {
            return c.HopSeconds(bytes, PathFrom(path));
          },
          "bytes"_a, "path"_a, "Seconds of one hop over `path` only: rtt + bytes / bandwidth.")
      .def("decode_step_seconds", &CostModel::DecodeStepSeconds, "batch_kv_tokens"_a,
           "Seconds of one decode step with `batch_kv_tokens` KV tokens in the running batch.")
      .def(
          "plan",
          [](const CostModel& c, uint64_t prompt_tokens, const std::vector<std::tuple<uint64_t, std::string>>& runs,
             uint64_t gpu_tokens) {
            std::vector<sched::PrefixRun> r = RunsFrom(runs);
            return c.Plan(prompt_tokens, r, gpu_tokens);
          },
          "prompt_tokens"_a, "runs"_a = std::vector<std::tuple<uint64_t, std::string>>{}, "gpu_tokens"_a = 0,
          "The cheapest plan for a prompt of `prompt_tokens` tokens whose prefix is cached as `runs`: "
          "[(end_token, path)], in order of growing end_token, each run covering the tokens from the previous "
          "end to its own. Every run boundary is tried (loading nothing included). The first `gpu_tokens` are "
          "in GPU memory already: neither loaded nor charged.")
      .def(
          "plan_for",
          [](const CostModel& c, const PrefixLocation& loc, uint32_t node, uint64_t prompt_tokens,
             const std::string& remote_path) {
            return sched::PlanFor(c, loc, node, prompt_tokens, PathFrom(remote_path));
          },
          "location"_a, "node"_a, "prompt_tokens"_a, "remote_path"_a = "rma",
          "The plan for an instance beside `node`, given a PrefixLocation: what `node` holds loads over dram, "
          "the rest of the match over `remote_path`.")
      .def(
          "break_even_tokens",
          [](const CostModel& c, uint64_t prompt_tokens, const std::string& path) {
            return c.BreakEvenTokens(prompt_tokens, PathFrom(path));
          },
          "prompt_tokens"_a, "path"_a,
          "The shortest prefix worth loading over `path` rather than recomputing, for a prompt of "
          "`prompt_tokens` tokens (prompt_tokens + 1 when loading never pays).")
      .def("__repr__", [](const CostModel& c) {
        const sched::Profile& p = c.profile();
        return "CostModel(model='" + p.model + "', gpu='" + p.gpu + "', kv_bytes_per_token=" +
               std::to_string(p.kv_bytes_per_token) + ")";
      });
}

void BindAdvise(py::module_& m) {
  using namespace pybind11::literals;

  // A method of the low-level Client (client.cc), added here so that the
  // client's bindings do not depend on the scheduler library.
  py::object client_cls = m.attr("Client");
  client_cls.attr("advise") = py::cpp_function(
      [](const py::object& self, const std::string& ns, const py::array_t<uint32_t, py::array::c_style |
                                                                                       py::array::forcecast>& tokens,
         const CostModel& model, const std::string& remote_path, uint64_t gpu_tokens) {
        if (tokens.ndim() != 1) throw StatusError(InvalidArgument("tokens must be a 1-D sequence of token ids"));
        const LoadPath remote = PathFrom(remote_path);
        if (remote != LoadPath::kRma && remote != LoadPath::kTcp) {
          throw StatusError(InvalidArgument("remote_path must be 'rma' or 'tcp', got '" + remote_path + "'"));
        }
        std::shared_ptr<Client> cl = ClientOf(self);
        std::span<const uint32_t> t(tokens.data(), static_cast<size_t>(tokens.size()));
        return Unwrap(NoGil([&] {
          sched::LoadAdvisor advisor(cl.get(), model, remote);
          return advisor.Advise(ns, t, gpu_tokens);
        }));
      },
      py::name("advise"), py::is_method(client_cls), "ns"_a, "tokens"_a, "cost_model"_a, "remote_path"_a = "rma",
      "gpu_tokens"_a = 0,
      "Asks the node where the prompt's prefix is (locate_prefix) and plans with `cost_model`: what the node "
      "holds loads over dram, the rest of the match over `remote_path`; the first `gpu_tokens` are in GPU memory "
      "already (neither loaded nor charged). A miss (or no such namespace) plans a recompute.");
}

}  // namespace

void BindSched(py::module_& m) {
  BindLoadPlan(m);
  BindCostModel(m);
  BindAdvise(m);
}

}  // namespace ptstore::python
