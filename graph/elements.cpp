#include "graph/elements.hpp"

#include <cmath>
#include <limits>

namespace hios {

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t exp = (x >> 23) & 0xff;
  uint32_t mant = x & 0x7fffff;
  if (exp == 0xff) return uint16_t(sign | 0x7c00 | (mant ? 0x200 : 0));  // inf, NaN
  const int e = int(exp) - 127 + 15;
  if (e >= 0x1f) return uint16_t(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const int shift = 14 - e;
    uint32_t m = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (m & 1))) ++m;
    return uint16_t(sign | m);
  }
  uint32_t m = mant >> 13;
  const uint32_t rem = mant & 0x1fff;
  uint32_t out = uint32_t(e) << 10 | m;
  if (rem > 0x1000 || (rem == 0x1000 && (m & 1))) ++out;  // may carry into the exponent: still right
  return uint16_t(sign | out);
}

float bfloat16_to_float(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return uint16_t((x >> 16) | 0x40);
  const uint32_t rounding = 0x7fff + ((x >> 16) & 1);
  return uint16_t((x + rounding) >> 16);
}

template <class T>
static T get(const void* data, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(data) + size_t(i) * sizeof(T), sizeof(T));
  return v;
}
template <class T>
static void put(void* data, int64_t i, T v) {
  std::memcpy(static_cast<uint8_t*>(data) + size_t(i) * sizeof(T), &v, sizeof(T));
}

double load_double(const void* d, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return get<float>(d, i);
    case DType::F16: return half_to_float(get<uint16_t>(d, i));
    case DType::BF16: return bfloat16_to_float(get<uint16_t>(d, i));
    case DType::F64: return get<double>(d, i);
    case DType::U64: return double(get<uint64_t>(d, i));
    default: return double(load_int(d, t, i));
  }
}

// A float to an integer as C++ would where that is defined; NaN and out-of-range values give
// the type's limits' nearest, not undefined behaviour.
static int64_t float_to_int(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return int64_t(v);
}

int64_t load_int(const void* d, DType t, int64_t i) {
  switch (t) {
    case DType::I64: return get<int64_t>(d, i);
    case DType::I32: return get<int32_t>(d, i);
    case DType::I16: return get<int16_t>(d, i);
    case DType::I8: return get<int8_t>(d, i);
    case DType::U8: return get<uint8_t>(d, i);
    case DType::U16: return get<uint16_t>(d, i);
    case DType::U32: return get<uint32_t>(d, i);
    case DType::U64: return int64_t(get<uint64_t>(d, i));
    case DType::Bool: return get<uint8_t>(d, i) != 0;
    default: return float_to_int(load_double(d, t, i));
  }
}

void store_double(void* d, DType t, int64_t i, double v) {
  switch (t) {
    case DType::F32: put<float>(d, i, float(v)); return;
    case DType::F16: put<uint16_t>(d, i, float_to_half(float(v))); return;
    case DType::BF16: put<uint16_t>(d, i, float_to_bfloat16(float(v))); return;
    case DType::F64: put<double>(d, i, v); return;
    case DType::Bool: put<uint8_t>(d, i, v != 0 ? 1 : 0); return;
    case DType::U64: put<uint64_t>(d, i, v >= 1.8446744073709552e19 ? ~uint64_t(0) : v <= 0 || std::isnan(v) ? 0 : uint64_t(v)); return;
    default: store_int(d, t, i, float_to_int(v)); return;
  }
}

void store_int(void* d, DType t, int64_t i, int64_t v) {
  switch (t) {
    case DType::I64: put<int64_t>(d, i, v); return;
    case DType::I32: put<int32_t>(d, i, int32_t(uint32_t(uint64_t(v)))); return;
    case DType::I16: put<int16_t>(d, i, int16_t(uint16_t(uint64_t(v)))); return;
    case DType::I8: put<int8_t>(d, i, int8_t(uint8_t(uint64_t(v)))); return;
    case DType::U8: put<uint8_t>(d, i, uint8_t(uint64_t(v))); return;
    case DType::U16: put<uint16_t>(d, i, uint16_t(uint64_t(v))); return;
    case DType::U32: put<uint32_t>(d, i, uint32_t(uint64_t(v))); return;
    case DType::U64: put<uint64_t>(d, i, uint64_t(v)); return;
    case DType::Bool: put<uint8_t>(d, i, v != 0 ? 1 : 0); return;
    default: store_double(d, t, i, double(v)); return;
  }
}

void convert_elements(const void* src, DType from, void* dst, DType to, int64_t count) {
  if (from == to) {
    std::memcpy(dst, src, size_t(count) * dtype_size(from));
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    if (is_float(from) || is_float(to)) {
      if (to == DType::Bool) {
        store_int(dst, to, i, load_double(src, from, i) != 0);
      } else if (from == DType::U64) {
        store_double(dst, to, i, double(uint64_t(load_int(src, from, i))));
      } else if (is_float(from)) {
        store_double(dst, to, i, load_double(src, from, i));
      } else {
        store_double(dst, to, i, double(load_int(src, from, i)));
      }
    } else {
      store_int(dst, to, i, load_int(src, from, i));
    }
  }
}

std::vector<float> to_floats(const void* data, DType t, int64_t count) {
  std::vector<float> out(static_cast<size_t>(count));
  if (t == DType::F32) {
    std::memcpy(out.data(), data, size_t(count) * 4);
    return out;
  }
  for (int64_t i = 0; i < count; ++i) out[size_t(i)] = float(load_double(data, t, i));
  return out;
}

}  // namespace hios
