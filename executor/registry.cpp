#include "executor/registry.hpp"

#include <mutex>

#include "graph/error.hpp"

namespace hios::exec {

namespace {

struct Registry {
  std::mutex mu;
  std::vector<BackendEntry> backends;
  std::vector<TransportEntry> transports;
};

Registry& storage() {
  static Registry r;
  return r;
}

// Built-ins are registered by explicit calls, not by static initialisers: a static library
// drops object files that nothing references, and their initialisers with them.
void ensure_builtins() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_cpu_backend();
#ifdef HIOS_EXECUTOR_WITH_MPI
    register_mpi_transports();
#endif
#ifdef HIOS_EXECUTOR_WITH_CUDA
    register_cuda_components();
#endif
  });
}

template <class E>
void upsert(std::vector<E>& v, E e) {
  for (E& old : v) {
    if (old.name == e.name) {
      old = std::move(e);
      return;
    }
  }
  v.push_back(std::move(e));
}

template <class E>
std::vector<std::string> names_of(const std::vector<E>& v) {
  std::vector<std::string> out;
  for (const E& e : v) out.push_back(e.name);
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& e : v) s += (s.empty() ? "" : ", ") + e;
  return s.empty() ? "none" : s;
}

// Names that exist in some build but not this one, so the error says why rather than only
// "unknown".
const char* why_missing(const std::string& name) {
  if (name == "cuda" || name == "nccl" || name == "cuda-ipc") return " (this hios was built without CUDA: configure with -DHIOS_CUDA=ON)";
  if (name == "mpi-host" || name == "mpi-cuda-aware") return " (this hios was built without MPI)";
  return "";
}

}  // namespace

std::string default_transport(const BackendEntry& be, const std::vector<std::string>& hosts,
                              const std::vector<int>& devices) {
  HIOS_CHECK(hosts.size() == devices.size(), "internal error: %zu hosts for %zu devices", hosts.size(), devices.size());
  if (be.one_host_transport.empty() || !be.peer_access) return be.default_transport;
  for (size_t a = 0; a < hosts.size(); ++a) {
    if (hosts[a] != hosts.front()) return be.default_transport;
    for (size_t b = 0; b < hosts.size(); ++b) {
      if (devices[a] != devices[b] && !be.peer_access(devices[a], devices[b])) return be.default_transport;
    }
  }
  return be.one_host_transport;
}

void register_backend(BackendEntry e) {
  Registry& r = storage();
  std::lock_guard<std::mutex> lock(r.mu);
  upsert(r.backends, std::move(e));
}

void register_transport(TransportEntry e) {
  Registry& r = storage();
  std::lock_guard<std::mutex> lock(r.mu);
  upsert(r.transports, std::move(e));
}

std::vector<std::string> backend_names() {
  ensure_builtins();
  Registry& r = storage();
  std::lock_guard<std::mutex> lock(r.mu);
  return names_of(r.backends);
}

std::vector<std::string> transport_names() {
  ensure_builtins();
  Registry& r = storage();
  std::lock_guard<std::mutex> lock(r.mu);
  return names_of(r.transports);
}

const BackendEntry& find_backend(const std::string& name) {
  ensure_builtins();
  Registry& r = storage();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const BackendEntry& e : r.backends) {
    if (e.name == name) return e;
  }
  throw_error("unknown backend '%s'%s; available: %s", name.c_str(), why_missing(name), join(names_of(r.backends)).c_str());
}

const TransportEntry& find_transport(const std::string& name) {
  ensure_builtins();
  Registry& r = storage();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const TransportEntry& e : r.transports) {
    if (e.name == name) return e;
  }
  throw_error("unknown transport '%s'%s; available: %s", name.c_str(), why_missing(name),
              join(names_of(r.transports)).c_str());
}

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendConfig& cfg) {
  return find_backend(name).make(cfg);
}

std::unique_ptr<Transport> make_transport(const std::string& name, Comm& comm, Backend& backend) {
  return find_transport(name).make(comm, backend);
}

std::string default_layout(const BackendEntry& be, const Graph& g) {
  if (be.default_layout_for_products.empty()) return be.default_layout;
  // Whether matrix products and attention do most of g's arithmetic (a transformer), rather
  // than convolutions (a CNN, whose graphs have no matmul nodes at all).
  double products = 0, all = 0;
  for (const Node& nd : g.nodes) {
    all += nd.cost.flops;
    if (nd.op.kind == OpKind::MatMul || nd.op.kind == OpKind::Attention) products += nd.cost.flops;
  }
  return all > 0 && products > 0.5 * all ? be.default_layout_for_products : be.default_layout;
}

}  // namespace hios::exec
