// Reading and writing single elements of a tensor held as raw little-endian bytes of any
// DType: what constants, the .npy and safetensors readers and the CPU reference kernels share.
// Floats travel as double and integers as int64_t (uint64 values above 2^63 wrap, as NumPy's
// casts do), so no integer arithmetic goes through a double.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "graph/ops.hpp"

namespace hios {

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);  // round to nearest even; overflow to infinity
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);  // round to nearest even; NaN stays NaN

// Element i of `data` (dtype t) as a double / as an integer (floats truncated toward zero,
// NaN to 0, as C++ casts them where they are defined).
double load_double(const void* data, DType t, int64_t i);
int64_t load_int(const void* data, DType t, int64_t i);
// Stores v as element i of dtype t: floats rounded to the type; integers wrap to the type's
// width; bool is v != 0.
void store_double(void* data, DType t, int64_t i, double v);
void store_int(void* data, DType t, int64_t i, int64_t v);

// `count` elements of `src` (dtype from) converted to `to`, as ONNX's Cast: between integer
// types by value (wrapping), float to integer by truncation, to bool by != 0.
void convert_elements(const void* src, DType from, void* dst, DType to, int64_t count);

// The float32 values of a tensor of any dtype (what the float kernels read).
std::vector<float> to_floats(const void* data, DType t, int64_t count);

}  // namespace hios
