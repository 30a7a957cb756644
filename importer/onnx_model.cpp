#include "importer/onnx_model.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "graph/elements.hpp"
#include "graph/error.hpp"

namespace hios::importer {

namespace fs = std::filesystem;

int64_t ConstTensor::numel() const {  // saturating: a corrupt shape must not overflow
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d <= 0) return 0;  // read_tensor refuses negative dims; a zero dim holds nothing
    if (n > INT64_MAX / d) return INT64_MAX;
    n *= d;
  }
  return n;
}

ConstTensor ConstTensor::ints(std::vector<int64_t> dims, std::vector<int64_t> values) {
  ConstTensor t;
  t.dims = std::move(dims);
  t.integer = true;
  t.i = std::move(values);
  return t;
}

ConstTensor ConstTensor::floats(std::vector<int64_t> dims, std::vector<float> values) {
  ConstTensor t;
  t.dims = std::move(dims);
  t.f = std::move(values);
  return t;
}

bool dtype_of_onnx(int t, DType* out) {
  switch (t) {
    case onnx::TensorProto::FLOAT: *out = DType::F32; return true;
    case onnx::TensorProto::FLOAT16: *out = DType::F16; return true;
    case onnx::TensorProto::BFLOAT16: *out = DType::BF16; return true;
    case onnx::TensorProto::DOUBLE: *out = DType::F64; return true;
    case onnx::TensorProto::INT64: *out = DType::I64; return true;
    case onnx::TensorProto::INT32: *out = DType::I32; return true;
    case onnx::TensorProto::INT16: *out = DType::I16; return true;
    case onnx::TensorProto::INT8: *out = DType::I8; return true;
    case onnx::TensorProto::UINT8: *out = DType::U8; return true;
    case onnx::TensorProto::UINT16: *out = DType::U16; return true;
    case onnx::TensorProto::UINT32: *out = DType::U32; return true;
    case onnx::TensorProto::UINT64: *out = DType::U64; return true;
    case onnx::TensorProto::BOOL: *out = DType::Bool; return true;
    default: return false;
  }
}

DType const_dtype(const ConstTensor& c) {
  DType t;
  if (c.onnx_type && dtype_of_onnx(c.onnx_type, &t) && is_float(t) != c.integer) return t;
  return c.integer ? DType::I64 : DType::F32;
}

OnnxModel read_onnx_model(const std::string& file) {
  std::error_code ec;
  const fs::file_status st = fs::status(file, ec);
  HIOS_CHECK(!ec && fs::exists(st), "%s: no such file", file.c_str());
  HIOS_CHECK(fs::is_regular_file(st), "%s: not a regular file", file.c_str());
  const uintmax_t size = fs::file_size(file, ec);
  HIOS_CHECK(!ec && size <= uintmax_t(std::numeric_limits<int>::max()),
             "%s: larger than 2 GiB, which protobuf cannot read; save the model with its weights as external data",
             file.c_str());
  std::ifstream in(file, std::ios::binary);
  HIOS_CHECK(in.good(), "%s: cannot open", file.c_str());
  OnnxModel m;
  m.file = file;
  m.folder = fs::absolute(file).parent_path().string();
  HIOS_CHECK(m.proto.ParseFromIstream(&in), "%s: not an ONNX model (the protobuf does not parse)", file.c_str());
  HIOS_CHECK(m.proto.has_graph() && m.proto.graph().node_size() > 0, "%s: the model has no graph nodes", file.c_str());
  for (const auto& o : m.proto.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") m.opset = int(o.version());
  }
  HIOS_CHECK(m.opset > 0, "%s: no opset for the default ONNX domain", file.c_str());
  return m;
}

namespace {

size_t element_size(int type) {
  switch (type) {
    case onnx::TensorProto::FLOAT: case onnx::TensorProto::INT32: case onnx::TensorProto::UINT32: return 4;
    case onnx::TensorProto::DOUBLE: case onnx::TensorProto::INT64: case onnx::TensorProto::UINT64: return 8;
    case onnx::TensorProto::FLOAT16: case onnx::TensorProto::BFLOAT16: case onnx::TensorProto::INT16:
    case onnx::TensorProto::UINT16: return 2;
    case onnx::TensorProto::INT8: case onnx::TensorProto::UINT8: case onnx::TensorProto::BOOL: return 1;
    default: return 0;
  }
}

// The tensor's bytes: raw_data, or the external file's range.
std::string raw_bytes(const OnnxModel& m, const onnx::TensorProto& t, const std::string& what) {
  if (t.data_location() != onnx::TensorProto::EXTERNAL) return t.raw_data();
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    try {
      if (kv.key() == "location") location = kv.value();
      else if (kv.key() == "offset") offset = std::stoll(kv.value());
      else if (kv.key() == "length") length = std::stoll(kv.value());
    } catch (const std::exception&) {
      throw_error("%s: tensor '%s': external data %s '%s' is not a number", m.file.c_str(), what.c_str(),
                  kv.key().c_str(), kv.value().c_str());
    }
  }
  const fs::path rel(location);
  bool escapes = location.empty() || rel.is_absolute();
  for (const auto& part : rel) escapes = escapes || part == "..";
  HIOS_CHECK(!escapes, "%s: tensor '%s': external data location '%s' must be a path inside the model's folder",
             m.file.c_str(), what.c_str(), location.c_str());
  const std::string path = (fs::path(m.folder) / rel).string();
  std::ifstream in(path, std::ios::binary);
  HIOS_CHECK(in.good(), "%s: tensor '%s': cannot open its external data file %s", m.file.c_str(), what.c_str(), path.c_str());
  std::error_code ec;
  const int64_t file_size = int64_t(fs::file_size(path, ec));
  HIOS_CHECK(!ec && offset >= 0 && offset <= file_size, "%s: tensor '%s': offset %lld is outside %s", m.file.c_str(),
             what.c_str(), (long long)offset, path.c_str());
  if (length < 0) length = file_size - offset;
  HIOS_CHECK(length <= file_size - offset, "%s: tensor '%s': %lld bytes at offset %lld run past the end of %s",
             m.file.c_str(), what.c_str(), (long long)length, (long long)offset, path.c_str());
  std::string bytes(size_t(length), '\0');
  in.seekg(offset);
  in.read(bytes.data(), length);
  HIOS_CHECK(in.good(), "%s: tensor '%s': cannot read %s", m.file.c_str(), what.c_str(), path.c_str());
  return bytes;
}

}  // namespace

ConstTensor read_tensor(const OnnxModel& m, const onnx::TensorProto& t, const std::string& what) {
  ConstTensor c;
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    HIOS_CHECK(d >= 0 && d <= (int64_t(1) << 31), "%s: tensor '%s': dimension %lld out of range", m.file.c_str(),
               what.c_str(), (long long)d);
    c.dims.push_back(d);
    n *= d;
    HIOS_CHECK(n <= (int64_t(1) << 34), "%s: tensor '%s' has over 2^34 elements", m.file.c_str(), what.c_str());
  }
  const int type = t.data_type();
  const size_t es = element_size(type);
  HIOS_CHECK(es != 0, "%s: tensor '%s': data type %d is not supported (float, double, float16, bfloat16 and integers are)",
             m.file.c_str(), what.c_str(), type);
  c.onnx_type = type;
  c.integer = !(type == onnx::TensorProto::FLOAT || type == onnx::TensorProto::DOUBLE ||
                type == onnx::TensorProto::FLOAT16 || type == onnx::TensorProto::BFLOAT16);
  const bool raw = t.data_location() == onnx::TensorProto::EXTERNAL || t.has_raw_data();
  // The data present must match the shape before anything is allocated for it: a corrupt
  // dimension must not ask for gigabytes.
  if (!raw) {
    const size_t have = type == onnx::TensorProto::FLOAT    ? size_t(t.float_data_size())
                        : type == onnx::TensorProto::DOUBLE ? size_t(t.double_data_size())
                        : type == onnx::TensorProto::INT64  ? size_t(t.int64_data_size())
                        : (type == onnx::TensorProto::UINT64 || type == onnx::TensorProto::UINT32) ? size_t(t.uint64_data_size())
                                                            : size_t(t.int32_data_size());
    HIOS_CHECK(have == size_t(n), "%s: tensor '%s' holds %zu values where its shape needs %lld", m.file.c_str(),
               what.c_str(), have, (long long)n);
  }
  std::string bytes;
  if (raw) {
    bytes = raw_bytes(m, t, what);
    HIOS_CHECK(bytes.size() == size_t(n) * es, "%s: tensor '%s' holds %zu bytes where its shape needs %zu",
               m.file.c_str(), what.c_str(), bytes.size(), size_t(n) * es);
  }
  if (c.integer) c.i.resize(size_t(n));
  else c.f.resize(size_t(n));
  if (raw) {
    const char* p = bytes.data();
    for (int64_t k = 0; k < n; ++k, p += es) {
      switch (type) {
        case onnx::TensorProto::FLOAT: std::memcpy(&c.f[size_t(k)], p, 4); break;
        case onnx::TensorProto::DOUBLE: { double d; std::memcpy(&d, p, 8); c.f[size_t(k)] = float(d); break; }
        case onnx::TensorProto::FLOAT16: { uint16_t h; std::memcpy(&h, p, 2); c.f[size_t(k)] = half_to_float(h); break; }
        case onnx::TensorProto::BFLOAT16: { uint16_t h; std::memcpy(&h, p, 2); c.f[size_t(k)] = bfloat16_to_float(h); break; }
        case onnx::TensorProto::INT64: std::memcpy(&c.i[size_t(k)], p, 8); break;
        case onnx::TensorProto::INT32: { int32_t v; std::memcpy(&v, p, 4); c.i[size_t(k)] = v; break; }
        case onnx::TensorProto::INT16: { int16_t v; std::memcpy(&v, p, 2); c.i[size_t(k)] = v; break; }
        case onnx::TensorProto::INT8: c.i[size_t(k)] = int8_t(*p); break;
        case onnx::TensorProto::UINT16: { uint16_t v; std::memcpy(&v, p, 2); c.i[size_t(k)] = v; break; }
        case onnx::TensorProto::UINT32: { uint32_t v; std::memcpy(&v, p, 4); c.i[size_t(k)] = v; break; }
        case onnx::TensorProto::UINT64: std::memcpy(&c.i[size_t(k)], p, 8); break;
        default: c.i[size_t(k)] = uint8_t(*p); break;  // UINT8, BOOL
      }
    }
    return c;
  }
  // Typed fields: float_data (float), double_data, int64_data, int32_data (int32 and narrower,
  // float16 and bfloat16 as their bits).
  size_t have = 0;
  switch (type) {
    case onnx::TensorProto::FLOAT:
      have = size_t(t.float_data_size());
      for (size_t k = 0; k < have && k < c.f.size(); ++k) c.f[k] = t.float_data(int(k));
      break;
    case onnx::TensorProto::DOUBLE:
      have = size_t(t.double_data_size());
      for (size_t k = 0; k < have && k < c.f.size(); ++k) c.f[k] = float(t.double_data(int(k)));
      break;
    case onnx::TensorProto::INT64:
      have = size_t(t.int64_data_size());
      for (size_t k = 0; k < have && k < c.i.size(); ++k) c.i[k] = t.int64_data(int(k));
      break;
    case onnx::TensorProto::UINT64: case onnx::TensorProto::UINT32:
      have = size_t(t.uint64_data_size());
      for (size_t k = 0; k < have && k < c.i.size(); ++k) c.i[k] = int64_t(t.uint64_data(int(k)));
      break;
    case onnx::TensorProto::FLOAT16: case onnx::TensorProto::BFLOAT16:
      have = size_t(t.int32_data_size());
      for (size_t k = 0; k < have && k < c.f.size(); ++k) {
        const auto bits = uint16_t(t.int32_data(int(k)));
        c.f[k] = type == onnx::TensorProto::FLOAT16 ? half_to_float(bits) : bfloat16_to_float(bits);
      }
      break;
    default:
      have = size_t(t.int32_data_size());
      for (size_t k = 0; k < have && k < c.i.size(); ++k) c.i[k] = t.int32_data(int(k));
      break;
  }
  HIOS_CHECK(have == size_t(n), "%s: tensor '%s' holds %zu values where its shape needs %lld", m.file.c_str(),
             what.c_str(), have, (long long)n);
  return c;
}

}  // namespace hios::importer
