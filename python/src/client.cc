// The Client and Pin classes of _ptstore: libptstore's Client with the GIL
// released around every request and copy. KV buffers arrive as (address,
// bytes) pairs that python/ptstore/_arrays.py took from a numpy array or a
// torch tensor after checking its dtype, shape and contiguity against the
// namespace's layout; the Python object stays referenced by the caller's
// frame for the whole call.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/mutex.h"
#include "ptstore/client.h"
#include "python/src/bindings.h"

namespace ptstore::python {

namespace {

using Tokens = py::array_t<uint32_t, py::array::c_style | py::array::forcecast>;

std::span<const uint32_t> Span(const Tokens& t) {
  if (t.ndim() != 1) throw StatusError(InvalidArgument("tokens must be a 1-D sequence of token ids"));
  return {t.data(), static_cast<size_t>(t.size())};
}

void* Addr(uint64_t address) { return reinterpret_cast<void*>(static_cast<uintptr_t>(address)); }

ChainKey KeyFrom(const std::string& hex) {
  if (hex.empty()) return ChainKey{};
  return Unwrap(ChainKey::FromHex(hex));
}

// One pinned prefix, shared by its Python object. The mutex makes copies and
// the release of one pin safe from several Python threads (PinnedPrefix
// itself is single-threaded).
class Pin {
 public:
  explicit Pin(PinnedPrefix p) : pin_(std::move(p)) {}

  // Without the lock: what a PinnedPrefix fixes when it is made (tokens,
  // bytes, extents) never changes, Release included, and the analysis
  // cannot tell those members from the lease that mu_ guards.
  uint64_t tokens() const NO_THREAD_SAFETY_ANALYSIS { return pin_.tokens(); }
  uint64_t bytes() const NO_THREAD_SAFETY_ANALYSIS { return pin_.bytes(); }
  const std::vector<Extent>& extents() const NO_THREAD_SAFETY_ANALYSIS { return pin_.extents(); }
  bool pinned() EXCLUDES(mu_) {
    core::MutexLock lk(mu_);
    return pin_.pinned();
  }
  Status CopyTo(void* dst, uint64_t bytes) EXCLUDES(mu_) {
    core::MutexLock lk(mu_);
    return pin_.CopyTo(dst, bytes);
  }
  Status Release() EXCLUDES(mu_) {
    core::MutexLock lk(mu_);
    return pin_.Release();
  }
  // f(the PinnedPrefix), under the pin's lock (the GPU bindings, gpu.cc).
  Status Use(const std::function<Status(const PinnedPrefix&)>& f) EXCLUDES(mu_) {
    core::MutexLock lk(mu_);
    return f(pin_);
  }

 private:
  core::Mutex mu_;
  PinnedPrefix pin_ GUARDED_BY(mu_);
};

// The Python object's handle on a Client. Calls copy the shared_ptr (under
// the GIL) before releasing the GIL, so close() from another thread never
// frees a Client that a call is still using.
class PyClient {
 public:
  explicit PyClient(const ClientOptions& options) {
    client_ = Unwrap(NoGil([&] { return Client::Connect(options); }));
    socket_ = options.socket_path;
  }

  std::shared_ptr<Client> Get() const {
    if (!client_) throw StatusError(Unavailable("the client is closed"));
    return client_;
  }
  void Close() { client_.reset(); }
  bool closed() const { return !client_; }
  const std::string& socket() const { return socket_; }

 private:
  std::shared_ptr<Client> client_;
  std::string socket_;
};

}  // namespace

Status WithPin(const py::object& pin, const std::function<Status(const PinnedPrefix&)>& f) {
  auto p = pin.cast<std::shared_ptr<Pin>>();  // under the GIL; keeps the pin alive below
  return NoGil([&] { return p->Use(f); });
}

std::shared_ptr<Client> ClientOf(const py::object& client) { return client.cast<const PyClient&>().Get(); }

namespace {
// A quota argument: None (leave it), an int of bytes (0: no limit) or a
// size text ("4GiB", "none"; ptstore/quota.h). InvalidArgument otherwise.
std::optional<uint64_t> QuotaArg(const char* tier, const py::object& v) {
  if (v.is_none()) return std::nullopt;
  if (py::isinstance<py::bool_>(v)) {
    throw StatusError(InvalidArgument(std::string(tier) + " quota must be a size (an int of bytes or a text such as '4GiB'), not a bool"));
  }
  if (py::isinstance<py::int_>(v)) {
    const auto n = v.cast<py::int_>();
    if (n < py::int_(0)) throw StatusError(InvalidArgument(std::string(tier) + " quota " + py::str(v).cast<std::string>() + " is negative"));
    if (n > py::int_(kMaxQuotaBytes)) {
      throw StatusError(InvalidArgument(std::string(tier) + " quota " + py::str(v).cast<std::string>() +
                                        " is too large (at most " + FormatQuotaBytes(kMaxQuotaBytes) + ")"));
    }
    return v.cast<uint64_t>();
  }
  if (py::isinstance<py::str>(v)) {
    Result<uint64_t> b = ParseQuotaBytes(v.cast<std::string>());
    if (!b.ok()) throw StatusError(b.status().WithContext(std::string(tier) + " quota"));
    return *b;
  }
  throw StatusError(InvalidArgument(std::string(tier) + " quota must be an int of bytes or a text such as '4GiB', not " +
                                    py::str(py::type::handle_of(v)).cast<std::string>()));
}

using ClientClass = py::class_<PyClient>;

// Pin: a pinned prefix, its copy and its release.
void BindPin(py::module_& m) {
  using namespace pybind11::literals;

  py::class_<Pin, std::shared_ptr<Pin>>(m, "Pin", R"doc(
The low-level pin of a prefix in the server's arena (ptstore.Pin wraps it).
Its extents cannot be evicted until release() (or the lease runs out).
)doc")
      .def_property_readonly("tokens", &Pin::tokens, "Tokens pinned (0 on a miss).")
      .def_property_readonly("bytes", &Pin::bytes, "Bytes pinned.")
      .def_property_readonly("extents", &Pin::extents, "The extents, in order, with their arena offsets.")
      .def_property_readonly("pinned", &Pin::pinned, "False once released (or on a miss).")
      .def(
          "copy_to_address",
          [](Pin& p, uint64_t address, uint64_t bytes) {
            ThrowIfError(NoGil([&] { return p.CopyTo(Addr(address), bytes); }));
          },
          "address"_a, "bytes"_a, "Copies the first `bytes` bytes of the prefix to `address` (GIL released).")
      .def(
          "release", [](Pin& p) { ThrowIfError(NoGil([&] { return p.Release(); })); },
          "Unpins now; a second call does nothing.");
}

// Namespaces: create_namespace, get_namespace, list_namespaces, drop_namespace.
void DefNamespaceMethods(ClientClass& cls) {
  using namespace pybind11::literals;
  cls
      .def(
          "create_namespace",
          [](const PyClient& c, const std::string& name, const Layout& layout, const std::string& salt, uint32_t mode,
             bool exist_ok) {
            auto cl = c.Get();
            return Unwrap(NoGil([&] { return cl->CreateNamespace(name, layout, salt, mode, exist_ok); }));
          },
          "name"_a, "layout"_a, "salt"_a = "", "mode"_a = 0755, "exist_ok"_a = true)
      .def(
          "get_namespace",
          [](const PyClient& c, const std::string& name) {
            auto cl = c.Get();
            return Unwrap(NoGil([&] { return cl->GetNamespace(name); }));
          },
          "name"_a)
      .def("list_namespaces",
           [](const PyClient& c) {
             auto cl = c.Get();
             return Unwrap(NoGil([&] { return cl->ListNamespaces(); }));
           })
      .def(
          "drop_namespace",
          [](const PyClient& c, const std::string& name) {
            auto cl = c.Get();
            return Unwrap(NoGil([&] { return cl->DropNamespace(name); }));
          },
          "name"_a);
}

// A prompt's prefix: save, lookup, locate_prefix, load, load_path, pin,
// pin_increment, remove, remove_key.
void DefPrefixMethods(ClientClass& cls) {
  using namespace pybind11::literals;
  cls
      .def(
          "save",
          [](const PyClient& c, const std::string& ns, const Tokens& tokens, uint64_t address, uint64_t bytes) {
            auto cl = c.Get();
            auto t = Span(tokens);
            return Unwrap(NoGil([&] { return cl->Save(ns, t, Addr(address), bytes); }));
          },
          "ns"_a, "tokens"_a, "address"_a, "bytes"_a)
      .def(
          "lookup",
          [](const PyClient& c, const std::string& ns, const Tokens& tokens) {
            auto cl = c.Get();
            auto t = Span(tokens);
            return Unwrap(NoGil([&] { return cl->Lookup(ns, t); }));
          },
          "ns"_a, "tokens"_a)
      .def(
          "locate_prefix",
          [](const PyClient& c, const std::string& ns, const Tokens& tokens) {
            auto cl = c.Get();
            auto t = Span(tokens);
            return Unwrap(NoGil([&] { return cl->LocatePrefix(ns, t); }));
          },
          "ns"_a, "tokens"_a)
      .def(
          "load",
          [](const PyClient& c, const std::string& ns, const Tokens& tokens, uint64_t address, uint64_t capacity) {
            auto cl = c.Get();
            auto t = Span(tokens);
            return Unwrap(NoGil([&] { return cl->Load(ns, t, Addr(address), capacity); }));
          },
          "ns"_a, "tokens"_a, "address"_a, "capacity"_a)
      .def(
          "load_path",
          [](const PyClient& c, const std::string& path, uint64_t address, uint64_t capacity) {
            auto cl = c.Get();
            return Unwrap(NoGil([&] { return cl->LoadPath(path, Addr(address), capacity); }));
          },
          "path"_a, "address"_a, "capacity"_a)
      .def(
          "pin",
          [](const PyClient& c, const std::string& ns, const Tokens& tokens) {
            auto cl = c.Get();
            auto t = Span(tokens);
            PinnedPrefix p = Unwrap(NoGil([&] { return cl->Pin(ns, t); }));
            return std::make_shared<Pin>(std::move(p));
          },
          "ns"_a, "tokens"_a)
      .def(
          "pin_increment",
          [](const PyClient& c, const std::string& ns, const std::string& key, bool whole_prefix) {
            auto cl = c.Get();
            ChainKey k = KeyFrom(key);
            PinnedPrefix p = Unwrap(NoGil([&] { return cl->PinIncrement(ns, k, whole_prefix); }));
            return std::make_shared<Pin>(std::move(p));
          },
          "ns"_a, "key"_a, "whole_prefix"_a = false)
      .def(
          "remove",
          [](const PyClient& c, const std::string& ns, const Tokens& tokens) {
            auto cl = c.Get();
            auto t = Span(tokens);
            return Unwrap(NoGil([&] { return cl->Remove(ns, t); }));
          },
          "ns"_a, "tokens"_a)
      .def(
          "remove_key",
          [](const PyClient& c, const std::string& ns, const std::string& key) {
            auto cl = c.Get();
            ChainKey k = KeyFrom(key);
            return Unwrap(NoGil([&] { return cl->RemoveByKey(ns, k); }));
          },
          "ns"_a, "key"_a);
}

// The radix tree, the counters and the quotas: stats, list_tree, set_times,
// set_quota, quotas, get_increment.
void DefTreeMethods(ClientClass& cls) {
  using namespace pybind11::literals;
  cls
      .def("stats",
           [](const PyClient& c) {
             auto cl = c.Get();
             return Unwrap(NoGil([&] { return cl->Stats(); }));
           })
      .def(
          "list_tree",
          [](const PyClient& c, const std::string& ns, const std::string& parent, bool recursive) {
            auto cl = c.Get();
            ChainKey k = KeyFrom(parent);
            return Unwrap(NoGil([&] { return cl->ListTree(ns, k, recursive); }));
          },
          "ns"_a, "parent"_a = "", "recursive"_a = false)
      .def(
          "set_times",
          [](const PyClient& c, const std::string& ns, const std::string& key, uint64_t atime_ns, uint64_t mtime_ns) {
            auto cl = c.Get();
            ChainKey k = KeyFrom(key);
            return Unwrap(NoGil([&] { return cl->SetTimes(ns, k, atime_ns, mtime_ns); }));
          },
          "ns"_a, "key"_a, "atime_ns"_a = 0, "mtime_ns"_a = 0)
      .def(
          "set_quota",
          [](const PyClient& c, const std::string& ns, const py::object& dram, const py::object& ssd) {
            QuotaChange change;
            change.dram = QuotaArg("dram", dram);
            change.ssd = QuotaArg("ssd", ssd);
            auto cl = c.Get();
            return Unwrap(NoGil([&] { return cl->SetQuota(ns, change); }));
          },
          "ns"_a, "dram"_a = py::none(), "ssd"_a = py::none())
      .def(
          "quotas",
          [](const PyClient& c, const std::string& ns) {
            auto cl = c.Get();
            return Unwrap(NoGil([&] { return cl->Quotas(ns); }));
          },
          "ns"_a = "")
      .def(
          "get_increment",
          [](const PyClient& c, const std::string& ns, const std::string& key) {
            auto cl = c.Get();
            ChainKey k = KeyFrom(key);
            return Unwrap(NoGil([&] { return cl->GetIncrement(ns, k); }));
          },
          "ns"_a, "key"_a);
}

}  // namespace

void BindClient(py::module_& m) {
  using namespace pybind11::literals;

  BindPin(m);
  // The connection: its options, close(), and copies out of the mapped arena.
  ClientClass cls(m, "Client", R"doc(
The low-level client of a local ptstored (ptstore.Client wraps it). Thread
safe: calls from several Python threads run in parallel, the GIL released.
)doc");
  cls
      .def(py::init([](std::optional<std::string> socket, const std::string& client_name, bool want_mapping,
                       int rpc_timeout_ms, int max_connections, uint64_t staging_bytes, int copy_threads) {
             ClientOptions o;
             if (socket) o.socket_path = *socket;
             o.client_name = client_name;
             o.want_mapping = want_mapping;
             o.rpc_timeout_ms = rpc_timeout_ms;
             o.max_connections = max_connections;
             o.staging_bytes = staging_bytes;
             o.copy_threads = copy_threads;
             return std::make_unique<PyClient>(o);
           }),
           "socket"_a = py::none(), "client_name"_a = "python", "want_mapping"_a = true, "rpc_timeout_ms"_a = 30000,
           "max_connections"_a = 4, "staging_bytes"_a = 16ull << 20, "copy_threads"_a = 0)
      .def("close", &PyClient::Close, "Drops the connections (pins taken keep theirs until released).")
      .def_property_readonly(
          "arena_id", [](const PyClient& c) { return c.Get()->arena_id(); },
          "Which arena this client maps (the same in every client of one ptstored; 0 without the mapping).")
      .def(
          "copy_from_arena",
          [](const PyClient& c, const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& pieces,
             uint64_t address, uint64_t bytes) {
            if (pieces.ndim() != 2 || pieces.shape(1) != 3) {
              throw StatusError(InvalidArgument("pieces must be an (n, 3) array of (arena offset, bytes, offset in "
                                                "the destination)"));
            }
            static_assert(sizeof(ArenaPiece) == 3 * sizeof(uint64_t));
            std::span<const ArenaPiece> span(reinterpret_cast<const ArenaPiece*>(pieces.data()),
                                             static_cast<size_t>(pieces.shape(0)));
            auto client = c.Get();
            ThrowIfError(NoGil([&] { return client->CopyFromArena(span, Addr(address), bytes); }));
          },
          "pieces"_a, "address"_a, "bytes"_a,
          "Copies (arena offset, bytes, destination offset) pieces of the mapped arena to `address` (GIL released).")
      .def_property_readonly("closed", &PyClient::closed)
      .def_property_readonly("socket", &PyClient::socket)
      .def_property_readonly("mapped", [](const PyClient& c) { return c.Get()->mapped(); })
      .def_property_readonly("node_id", [](const PyClient& c) { return c.Get()->node_id(); });
  DefNamespaceMethods(cls);
  DefPrefixMethods(cls);
  DefTreeMethods(cls);
}

}  // namespace ptstore::python
