// The _ptstore extension: libptstore for Python. The package ptstore
// (python/ptstore/__init__.py) is its public face; see docs/python.md.
#include "python/src/bindings.h"

PYBIND11_MODULE(_ptstore, m) {
  m.doc() = "libptstore bindings (the low level of the ptstore package; use ptstore, not this module).";
  ptstore::python::BindErrors(m);
  ptstore::python::BindTypes(m);
  ptstore::python::BindClient(m);
  ptstore::python::BindSched(m);
#ifdef PTSTORE_HAVE_CUDA
  ptstore::python::BindGpu(m);  // ptstore.gpu; absent from builds without CUDA
#endif
}
