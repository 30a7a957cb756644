// NumPy's .npy format (graph/npy.hpp): what hios writes reads back, what NumPy writes is read,
// and every malformed file is refused in one line naming it.
#include <cstring>
#include <string>
#include <vector>

#include "graph/error.hpp"
#include "graph/npy.hpp"
#include "tests/catch.hpp"

using namespace hios;

namespace {

// A file as numpy.save writes it: magic, version, little-endian header length, header.
std::string npy_file(int major, const std::string& header, const std::string& data) {
  std::string out("\x93NUMPY", 6);
  out += char(major);
  out += char(0);
  const size_t n = header.size();
  out += char(n & 0xff);
  out += char((n >> 8) & 0xff);
  if (major > 1) {
    out += char(0);
    out += char(0);
  }
  return out + header + data;
}

std::string bytes_of(const std::vector<double>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
}

std::string refusal(const std::string& bytes) {
  try {
    parse_npy(bytes, "x.npy");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("npy: what hios writes reads back, header padded to 64 bytes") {
  const std::vector<float> v{1.5f, -2.0f, 0.0f, 3.25f, 7.0f, -0.5f};
  const std::string b = npy_bytes({2, 3}, v);
  const size_t header_len = uint8_t(b[8]) | (size_t(uint8_t(b[9])) << 8);
  CHECK((10 + header_len) % 64 == 0);
  CHECK(b[10 + header_len - 1] == '\n');
  const NpyArray a = parse_npy(b, "round.npy");
  CHECK(a.shape == std::vector<int64_t>{2, 3});
  CHECK(a.data == v);
  CHECK(parse_npy(npy_bytes({4}, {1, 2, 3, 4}), "v").shape == std::vector<int64_t>{4});
  CHECK(npy_shape_str({4}) == "(4,)");
  CHECK(npy_shape_str({1, 3, 2, 2}) == "(1, 3, 2, 2)");
}

TEST_CASE("npy: NumPy's own headers, float64 converted, format 2.0") {
  const std::string h = "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 1, 2), }          \n";
  const NpyArray a = parse_npy(npy_file(1, h, bytes_of({0.25, -1.0, 2.0, 1e-3})), "f8.npy");
  CHECK(a.shape == std::vector<int64_t>{1, 2, 1, 2});
  CHECK(a.data == std::vector<float>{0.25f, -1.0f, 2.0f, float(1e-3)});
  const std::string h2 = "{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": (2,)}\n";
  CHECK(parse_npy(npy_file(2, h2, bytes_of({1.0, 2.0})), "v2.npy").data == std::vector<float>{1.0f, 2.0f});
}

TEST_CASE("npy: malformed files are refused naming the file and the fault") {
  const std::string ok = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }\n";
  const std::string two = bytes_of({1.0, 2.0});
  CHECK(refusal("PK\x03\x04 not npy").find("x.npy: not a NumPy .npy file") != std::string::npos);
  CHECK(refusal(npy_file(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n", std::string(8, '\0')))
            .find("dtype '>f4'") != std::string::npos);
  CHECK(refusal(npy_file(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }\n", two)).find("dtype '<c8'") !=
        std::string::npos);
  CHECK(refusal(npy_file(1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2,), }\n", two)).find("Fortran-order") !=
        std::string::npos);
  CHECK(refusal(npy_file(1, ok, two.substr(0, 12))).find("needs 16 bytes of data, the file has 12") !=
        std::string::npos);
  CHECK(refusal(npy_file(1, ok, two + "x")).find("the file has 17") != std::string::npos);
  CHECK(refusal(npy_file(1, "{'descr': '<f8', 'shape': (2,), }\n", two)).find("lacks 'fortran_order'") !=
        std::string::npos);
  CHECK(refusal(npy_file(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, x), }\n", two))
            .find("bad .npy header") != std::string::npos);
  CHECK(refusal(npy_file(4, ok, two)).find("version 4.0") != std::string::npos);
  CHECK(refusal(npy_file(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999,), }\n", two))
            .find("bad .npy header") != std::string::npos);
  std::string cut = npy_file(1, ok, two);
  cut[8] = char(0xff);  // a header longer than the file
  CHECK(refusal(cut).find("the .npy header says") != std::string::npos);
}
