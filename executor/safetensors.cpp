#include "executor/safetensors.hpp"

#include <sys/stat.h>

#include <cstring>
#include <mutex>

#include "graph/elements.hpp"
#include "graph/error.hpp"
#include "graph/json_reader.hpp"

namespace hios::exec {

namespace {

std::map<std::string, TensorEntry> parse_safetensors(const std::string& b, const std::string& file) {
  HIOS_CHECK(b.size() >= 8, "%s: not a safetensors file (%zu bytes)", file.c_str(), b.size());
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | uint8_t(b[size_t(k)]);
  HIOS_CHECK(n >= 2 && n <= b.size() - 8, "%s: not a safetensors file (a header of %llu bytes in a file of %zu)",
             file.c_str(), (unsigned long long)n, b.size());
  const json header = parse_json_text(b.substr(8, size_t(n)), file + " (header)");
  HIOS_CHECK(header.is_object(), "%s: the safetensors header is not a JSON object", file.c_str());
  const size_t data_at = 8 + size_t(n), data_len = b.size() - data_at;
  std::map<std::string, TensorEntry> out;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string path = file + ": tensor '" + name + "'";
    HIOS_CHECK(t.is_object() && t.contains("dtype") && t.contains("shape") && t.contains("data_offsets"),
               "%s: expected an object with dtype, shape and data_offsets", path.c_str());
    const std::string dtype = json_string(t.at("dtype"), path + ".dtype");
    const int elem = dtype == "F32" ? 4 : dtype == "F64" ? 8 : (dtype == "F16" || dtype == "BF16") ? 2 : 0;
    HIOS_CHECK(elem != 0, "%s: dtype %s (hios reads F32, F64, F16 and BF16)", path.c_str(), dtype.c_str());
    TensorEntry e;
    int64_t count = 1;
    for (size_t i = 0; i < json_array(t.at("shape"), path + ".shape").size(); ++i) {
      e.shape.push_back(json_int_in(t.at("shape")[i], path + ".shape", 0, int64_t(1) << 40));
      count *= e.shape.back();
      HIOS_CHECK(count <= (int64_t(1) << 40), "%s: too many elements", path.c_str());
    }
    const json& off = json_array(t.at("data_offsets"), path + ".data_offsets");
    HIOS_CHECK(off.size() == 2, "%s: data_offsets must be [begin, end]", path.c_str());
    const int64_t begin = json_int_in(off[0], path + ".data_offsets", 0, int64_t(data_len));
    const int64_t end = json_int_in(off[1], path + ".data_offsets", begin, int64_t(data_len));
    HIOS_CHECK(end - begin == count * elem, "%s: shape needs %lld bytes of %s, data_offsets give %lld", path.c_str(),
               (long long)(count * elem), dtype.c_str(), (long long)(end - begin));
    const char* p = b.data() + data_at + begin;
    e.values.resize(size_t(count));
    for (int64_t i = 0; i < count; ++i) {
      float& v = e.values[size_t(i)];
      if (elem == 4) {
        std::memcpy(&v, p + 4 * i, 4);
      } else if (elem == 8) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        v = float(d);
      } else {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        if (dtype == "F16") {
          v = half_to_float(h);
        } else {
          const uint32_t bits = uint32_t(h) << 16;
          std::memcpy(&v, &bits, 4);
        }
      }
    }
    out.emplace(name, std::move(e));
  }
  return out;
}

}  // namespace

std::shared_ptr<const std::map<std::string, TensorEntry>> load_safetensors(const std::string& file) {
  // Cached by path, size and modification time: a weights file is read once per process (every
  // node of every program asks), and read again when it changed.
  struct stat st {};
  HIOS_CHECK(::stat(file.c_str(), &st) == 0, "%s: cannot open: %s", file.c_str(), std::strerror(errno));
  const std::string key = file + "|" + std::to_string(st.st_size) + "|" + std::to_string(st.st_mtim.tv_sec) + "." +
                          std::to_string(st.st_mtim.tv_nsec);
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const std::map<std::string, TensorEntry>>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto loaded = std::make_shared<const std::map<std::string, TensorEntry>>(
      parse_safetensors(read_input_file(file, "safetensors file"), file));
  cache.clear();  // one weights file at a time is the common case: do not hold old ones
  cache.emplace(key, loaded);
  return loaded;
}

std::string safetensors_bytes(const std::map<std::string, TensorEntry>& tensors) {
  json header = json::object();
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const size_t bytes = t.values.size() * sizeof(float);
    header[name] = json{{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  header["__metadata__"] = json{{"format", "pt"}, {"writer", "hios"}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int k = 0; k < 8; ++k) out[size_t(k)] = char((n >> (8 * k)) & 0xff);
  out += text;
  for (const auto& [name, t] : tensors) {
    out.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float));
  }
  return out;
}

}  // namespace hios::exec
