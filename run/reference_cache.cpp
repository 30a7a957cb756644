#include "run/reference_cache.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "graph/json_reader.hpp"

namespace hios::exec {

namespace {

constexpr const char* kFormat = "hios-reference-output";

// The digest's hex digits ("fnv1a64:0123..." -> "0123..."), safe in a file name.
std::string digest_stem(const Graph& g) {
  const std::string d = graph_digest(g);
  const size_t colon = d.find(':');
  return colon == std::string::npos ? d : d.substr(colon + 1);
}

json header_for(const Graph& g, uint64_t seed, size_t count) {
  return json{{"format", kFormat}, {"version", 1},         {"graph", g.name},
              {"graph_digest", graph_digest(g)}, {"seed", seed}, {"output", g.nodes[size_t(g.output())].name},
              {"count", count}};
}

}  // namespace

std::string reference_cache_file(const std::string& dir, const Graph& g, uint64_t seed) {
  return dir + "/" + digest_stem(g) + "-seed" + std::to_string(seed) + ".ref";
}

std::optional<std::vector<float>> load_reference(const std::string& dir, const Graph& g, uint64_t seed) {
  // Keyed by digest and seed: parameters from a file are neither, so such a graph is not cached.
  if (!g.weights.empty()) return std::nullopt;
  std::ifstream in(reference_cache_file(dir, g, seed), std::ios::binary);
  if (!in) return std::nullopt;
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  const size_t count = size_t(g.nodes[size_t(g.output())].shape.numel());
  json got = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (got.is_discarded() || got != header_for(g, seed, count)) return std::nullopt;
  static_assert(sizeof(float) == 4, "the cache stores float32");
  std::vector<float> out(count);
  in.read(reinterpret_cast<char*>(out.data()), std::streamsize(count * sizeof(float)));
  if (size_t(in.gcount()) != count * sizeof(float)) return std::nullopt;
  if (in.peek() != std::char_traits<char>::eof()) return std::nullopt;  // longer than its header says
  return out;
}

void store_reference(const std::string& dir, const Graph& g, uint64_t seed, const std::vector<float>& output) {
  HIOS_CHECK(int64_t(output.size()) == g.nodes[size_t(g.output())].shape.numel(),
             "reference cache: %zu values for an output of %lld", output.size(),
             (long long)g.nodes[size_t(g.output())].shape.numel());
  if (!g.weights.empty()) return;  // see load_reference
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) {
    throw_error("--reference-cache %s: cannot create the folder: %s", dir.c_str(), std::strerror(errno));
  }
  std::string bytes = header_for(g, seed, output.size()).dump() + "\n";
  bytes.append(reinterpret_cast<const char*>(output.data()), output.size() * sizeof(float));
  write_file_atomic(reference_cache_file(dir, g, seed), bytes);
}

std::vector<float> first_image_reference(const Graph& g, const SessionOptions& ref, const std::vector<float>& input,
                                         const std::string& cache_dir, uint64_t seed, bool* cached) {
  const Shape in = g.nodes[size_t(g.input())].shape;
  HIOS_CHECK(in.n >= 1 && int64_t(input.size()) == in.numel(),
             "internal error: an input of %zu values for a graph input of %lld", input.size(), (long long)in.numel());
  const Graph one = graph_at_shape(g, 1, in.h, in.w);
  if (cached) *cached = false;
  if (!cache_dir.empty()) {
    if (std::optional<std::vector<float>> want = load_reference(cache_dir, one, seed)) {
      if (cached) *cached = true;
      return *want;
    }
  }
  const std::vector<float> first(input.begin(), input.begin() + in.numel() / in.n);
  std::unique_ptr<Comm> self = make_self_comm();
  std::vector<float> out = run_reference(one, ref, *self, first)->backend().read_tensor(one.output());
  if (!cache_dir.empty()) store_reference(cache_dir, one, seed, out);
  return out;
}

}  // namespace hios::exec
