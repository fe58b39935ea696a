// The pieces of the _ptstore extension (python/src/): each Bind* adds its
// classes and functions to the module. The Python package ptstore
// (python/ptstore/) wraps them; docs/python.md is the user's guide.
//
// GIL: every binding that talks to ptstored, touches a mount or copies KV
// bytes converts its arguments first, releases the GIL for the call
// (NoGil), and converts the result after taking it back. Nothing under
// NoGil touches a Python object.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "ptstore/client.h"
#include "ptstore/layout.h"
#include "ptstore/status.h"

namespace ptstore::python {

namespace py = pybind11;

// A non-OK Status on its way to Python. The translator registered by
// BindErrors raises it as the ptstore exception class of its code
// (ptstore._errors), carrying its message.
class StatusError : public std::exception {
 public:
  explicit StatusError(Status status) : status_(std::move(status)) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return status_.message().c_str(); }

 private:
  Status status_;
};

inline void ThrowIfError(const Status& s) {
  if (!s.ok()) throw StatusError(s);
}

template <typename T>
T Unwrap(Result<T>&& r) {
  if (!r.ok()) throw StatusError(r.status());
  return std::move(r).value();
}

// Runs f() without the GIL. f must not touch Python objects.
template <typename F>
auto NoGil(F&& f) {
  py::gil_scoped_release release;
  return f();
}

void BindErrors(py::module_& m);
// The value types (types.cc); BindTypes also calls the three below, each
// class bound before the signatures that name it.
void BindTypes(py::module_& m);
// Layout, LayoutGroup, mistral_layout (layout.cc).
void BindLayout(py::module_& m);
// Stats, the node's counters (stats.cc).
void BindStats(py::module_& m);
// path_info() and PathInfo, a mount's PTSTORE_IOC_INFO (path_info.cc).
void BindPathInfo(py::module_& m);
void BindClient(py::module_& m);
// The cost model (sched.cc): CostModel, LoadPlan, Client.advise. After
// BindClient (it adds a method to Client).
void BindSched(py::module_& m);
// The GPU copy path (gpu.cc), in builds with CUDA (PTSTORE_HAVE_CUDA).
void BindGpu(py::module_& m);

// For gpu.cc, from client.cc: f(the PinnedPrefix of a _ptstore.Pin) under the
// pin's lock with the GIL released; the libptstore Client of a _ptstore.Client.
Status WithPin(const py::object& pin, const std::function<Status(const PinnedPrefix&)>& f);
std::shared_ptr<Client> ClientOf(const py::object& client);

// For types.cc, from layout.cc: the repr of a Layout ("Layout(layers=32, ...)"
// or "Layout.from_groups([...], block_tokens=16)").
std::string LayoutRepr(const Layout& l);

}  // namespace ptstore::python
