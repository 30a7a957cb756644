#include "graph/npy.hpp"

#include <cctype>
#include <cstring>

#include "graph/elements.hpp"
#include "graph/error.hpp"
#include "graph/json_reader.hpp"

namespace hios {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// A small reader for exactly that: quoted keys, and values that are a quoted string, True or
// False, or a tuple of integers.
class HeaderReader {
 public:
  HeaderReader(const std::string& text, const std::string& source) : t_(text), src_(source) {}

  void parse(std::string& descr, bool& fortran, std::vector<int64_t>& shape) {
    bool has_descr = false, has_order = false, has_shape = false;
    expect('{');
    for (;;) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = quoted();
      expect(':');
      skip_space();
      if (key == "descr") {
        descr = quoted();
        has_descr = true;
      } else if (key == "fortran_order") {
        fortran = boolean();
        has_order = true;
      } else if (key == "shape") {
        shape = tuple();
        has_shape = true;
      } else {
        fail("unknown header key '" + key + "'");
      }
      skip_space();
      if (peek() == ',') ++i_;
    }
    HIOS_CHECK(has_descr && has_order && has_shape, "%s: the .npy header lacks %s", src_.c_str(),
               !has_descr ? "'descr'" : !has_order ? "'fortran_order'" : "'shape'");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw_error("%s: bad .npy header at byte %zu: %s", src_.c_str(), i_, what.c_str());
  }
  char peek() const { return i_ < t_.size() ? t_[i_] : '\0'; }
  void skip_space() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t')) ++i_;
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string quoted() {
    skip_space();
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    const size_t end = t_.find(q, i_ + 1);
    if (end == std::string::npos) fail("unterminated string");
    std::string s = t_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    return s;
  }
  bool boolean() {
    if (t_.compare(i_, 4, "True") == 0) {
      i_ += 4;
      return true;
    }
    if (t_.compare(i_, 5, "False") == 0) {
      i_ += 5;
      return false;
    }
    fail("expected True or False");
  }
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> out;
    for (;;) {
      skip_space();
      if (peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("expected a dimension");
      int64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (v > (int64_t(1) << 40)) fail("a dimension too large");
        v = v * 10 + (t_[i_++] - '0');
      }
      out.push_back(v);
      skip_space();
      if (peek() == ',') ++i_;
    }
    ++i_;
    return out;
  }

  const std::string& t_;
  const std::string& src_;
  size_t i_ = 0;
};

uint32_t little_endian(const std::string& b, size_t at, int bytes) {
  uint32_t v = 0;
  for (int k = bytes - 1; k >= 0; --k) v = (v << 8) | uint8_t(b[at + size_t(k)]);
  return v;
}

}  // namespace

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string npy_shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

NpyArray parse_npy(const std::string& b, const std::string& source) {
  HIOS_CHECK(b.size() >= kMagicLen + 2 && b.compare(0, kMagicLen, kMagic, kMagicLen) == 0,
             "%s: not a NumPy .npy file (no \\x93NUMPY magic)", source.c_str());
  const int major = uint8_t(b[kMagicLen]);
  HIOS_CHECK(major >= 1 && major <= 3, "%s: .npy format version %d.%d (hios reads 1.0 to 3.0)", source.c_str(), major,
             int(uint8_t(b[kMagicLen + 1])));
  const int len_bytes = major == 1 ? 2 : 4;
  const size_t start = kMagicLen + 2 + size_t(len_bytes);
  HIOS_CHECK(b.size() >= start, "%s: the .npy header is cut short", source.c_str());
  const size_t header_len = little_endian(b, kMagicLen + 2, len_bytes);
  HIOS_CHECK(header_len <= b.size() - start, "%s: the .npy header says %zu bytes, the file has %zu after it",
             source.c_str(), header_len, b.size() - start);
  const std::string header = b.substr(start, header_len);
  std::string descr;
  bool fortran = false;
  NpyArray a;
  HeaderReader(header, source).parse(descr, fortran, a.shape);
  HIOS_CHECK(!fortran, "%s: a Fortran-order array; save it in C order (numpy.ascontiguousarray)", source.c_str());
  // '<' little-endian, '|' not applicable (one byte), '=' native (little-endian on every host hios builds for).
  static const struct {
    const char* code;
    DType t;
  } kCodes[] = {{"f4", DType::F32}, {"f8", DType::F64}, {"f2", DType::F16}, {"i8", DType::I64}, {"i4", DType::I32},
                {"i2", DType::I16}, {"i1", DType::I8},  {"u1", DType::U8},  {"u2", DType::U16}, {"u4", DType::U32},
                {"u8", DType::U64}, {"b1", DType::Bool}};
  int elem = 0;
  const std::string code = (!descr.empty() && (descr[0] == '<' || descr[0] == '|' || descr[0] == '=')) ? descr.substr(1) : descr;
  for (const auto& k : kCodes) {
    if (code == k.code) {
      a.dtype = k.t;
      elem = int(dtype_size(k.t));
    }
  }
  HIOS_CHECK(elem != 0, "%s: dtype '%s'; hios reads little-endian floats ('<f2', '<f4', '<f8'), integers ('<i8', "
             "'|u1', ...) and bools ('|b1')", source.c_str(), printable(descr).c_str());
  int64_t n = 1;
  for (int64_t d : a.shape) {
    HIOS_CHECK(d == 0 || n <= (int64_t(1) << 40) / d, "%s: shape %s is too large", source.c_str(),
               npy_shape_str(a.shape).c_str());
    n *= d;
  }
  const size_t data_at = start + header_len;
  const size_t have = b.size() - data_at;
  HIOS_CHECK(have == size_t(n) * size_t(elem), "%s: shape %s of %s needs %lld bytes of data, the file has %zu",
             source.c_str(), npy_shape_str(a.shape).c_str(), descr.c_str(), (long long)(n * elem), have);
  const char* p = b.data() + data_at;
  a.raw.assign(reinterpret_cast<const uint8_t*>(p), reinterpret_cast<const uint8_t*>(p) + size_t(n) * size_t(elem));
  if (is_float(a.dtype)) a.data = to_floats(a.raw.data(), a.dtype, n);
  return a;
}

NpyArray read_npy(const std::string& file) { return parse_npy(read_input_file(file, ".npy file"), file); }

std::string npy_bytes(const std::vector<int64_t>& shape, const std::vector<float>& data) {
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  return npy_bytes(shape, DType::F32, std::vector<uint8_t>(p, p + data.size() * sizeof(float)));
}

std::string npy_bytes(const std::vector<int64_t>& shape, DType t, const std::vector<uint8_t>& raw) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  HIOS_CHECK(n * int64_t(dtype_size(t)) == int64_t(raw.size()), "internal error: a .npy of shape %s given %zu bytes",
             npy_shape_str(shape).c_str(), raw.size());
  static const char* kDescr[] = {"<f4", "<f2", "<V2", "<f8", "<i8", "<i4", "<i2", "|i1", "|u1", "<u2", "<u4", "<u8", "|b1"};
  HIOS_CHECK(t != DType::BF16, "a .npy file cannot hold bfloat16 (NumPy has no such type): cast it to float32");
  std::string header = std::string("{'descr': '") + kDescr[size_t(t)] + "', 'fortran_order': False, 'shape': " +
                       npy_shape_str(shape) + ", }";
  // Magic, version, length and header padded with spaces to a multiple of 64 bytes, ending '\n'.
  const size_t unpadded = kMagicLen + 2 + 2 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out(kMagic, kMagicLen);
  out += char(1);
  out += char(0);
  out += char(header.size() & 0xff);
  out += char((header.size() >> 8) & 0xff);
  out += header;
  out.append(reinterpret_cast<const char*>(raw.data()), raw.size());
  return out;
}

}  // namespace hios
