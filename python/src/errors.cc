// Status codes to Python exceptions. The exception classes are plain Python
// (python/ptstore/_errors.py: one class per Code, under ptstore.Error, with
// the matching builtin as a second base where there is one); this file
// raises them and lists the C++ registry so that a test can check that
// every code has its class.
#include <cerrno>
#include <string>

#include "python/src/bindings.h"

namespace ptstore::python {

namespace {

// Raises `status` as ptstore._errors.error_for(code, message). Imported on
// each error (a dict lookup once loaded): errors are rare, and holding the
// function in a static would outlive the interpreter.
void SetPythonError(const Status& status) {
  try {
    py::object make = py::module_::import("ptstore._errors").attr("error_for");
    py::object exc = make(static_cast<int>(status.code()), status.message());
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  } catch (py::error_already_set& e) {
    // ptstore._errors is missing (the extension imported on its own):
    // still raise something that says what happened.
    PyErr_SetString(PyExc_RuntimeError, status.ToString().c_str());
  }
}

}  // namespace

void BindErrors(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      SetPythonError(e.status());
    }
  });

  m.def(
      "code_names",
      [] {
        // The registry is dense from 0: stop at the first unknown value.
        py::dict out;
        for (int v = 0; v < 1024; ++v) {
          std::string_view name = CodeName(static_cast<Code>(v));
          if (name == "unknown") break;
          out[py::int_(v)] = py::str(std::string(name));
        }
        return out;
      },
      "The C++ status registry (include/ptstore/status.h): {code value: lower_snake name}.");

  m.def(
      "code_table",
      [] {
        py::list out;
#define PTSTORE_CODE_ROW(e, value, name, err, http, py_class)                                     \
  {                                                                                              \
    py::dict row;                                                                                \
    row["value"] = value;                                                                        \
    row["name"] = name;                                                                          \
    row["errno"] = err;                                                                          \
    row["errno_name"] = #err;                                                                    \
    row["http"] = http;                                                                          \
    row["python"] = py_class;                                                                    \
    out.append(row);                                                                             \
  }
        PTSTORE_STATUS_CODES(PTSTORE_CODE_ROW)
#undef PTSTORE_CODE_ROW
        return out;
      },
      "The status-code registry (include/ptstore/status_codes.h), row by row: value, name, errno (and its "
      "symbol), HTTP status and Python exception class.");

  m.def(
      "_raise_status",
      [](int code, const std::string& message) { throw StatusError(Status(static_cast<Code>(code), message)); },
      py::arg("code"), py::arg("message"), "Raises a Status of `code` as C++ would (for tests).");
}

}  // namespace ptstore::python
