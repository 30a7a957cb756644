// NumPy's .npy format for tensors that enter and leave hios (`hios run --input`,
// `--save-output`): the format every Python tool reads with numpy.load and writes with
// numpy.save (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html).
// Read: versions 1.0 to 3.0, C order, little-endian floats (16, 32, 64 bits), integers (8 to 64
// bits, signed and unsigned) and bools. Written: version 1.0, C order, any of those.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/ops.hpp"

namespace hios {

struct NpyArray {
  std::vector<int64_t> shape;  // () for a scalar
  std::vector<float> data;     // C order, float types only (converted to float32)
  DType dtype = DType::F32;    // the file's element type
  std::vector<uint8_t> raw;    // C order, the elements as the file holds them
  int64_t numel() const;
};

// Parses the bytes of a .npy file; errors are one line naming `source` and what is wrong.
NpyArray parse_npy(const std::string& bytes, const std::string& source);
// read_input_file (graph/json_reader.hpp) and parse_npy.
NpyArray read_npy(const std::string& file);
// The bytes of a .npy file holding `data` with `shape` (their sizes must agree).
std::string npy_bytes(const std::vector<int64_t>& shape, const std::vector<float>& data);
// The same for elements of any type (raw holds numel * dtype_size(t) bytes).
std::string npy_bytes(const std::vector<int64_t>& shape, DType t, const std::vector<uint8_t>& raw);
// "(1, 3, 299, 299)": a shape as NumPy prints it.
std::string npy_shape_str(const std::vector<int64_t>& shape);

}  // namespace hios
