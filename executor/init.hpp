// Deterministic inputs and weights.
//
// Every value comes from a counter-based generator keyed by (seed, tensor name, element index),
// so every rank and every backend builds the same weights without communicating, and a
// parallel run can be compared element by element with a sequential run and the CPU reference.
// Header-only and free of host-only calls so CUDA code can use it on either side.
//
// Tensor names: "<node>.weight" and "<node>.bias" for conv and linear; for the i-th step of a
// sequential node "<node>.steps[i].weight" / ".bias"; the graph input is "<input>.value".
// Layouts: conv weights are [out][in / groups][kh][kw] (cuDNN's KCRS), linear weights are
// [out][in] over the flattened C*H*W input.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#ifdef __CUDACC__
#define HIOS_HD __host__ __device__
#else
#define HIOS_HD
#endif

namespace hios::init {

constexpr uint64_t kDefaultSeed = 20231121;

HIOS_HD inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Per-tensor key: FNV-1a of the name, mixed with the seed.
inline uint64_t tensor_key(uint64_t seed, std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return mix64(h ^ mix64(seed));
}

// Uniform in [-1, 1), from the top 24 bits so the float is exact.
HIOS_HD inline float uniform(uint64_t key, uint64_t index) {
  uint64_t x = mix64(key + (index + 1) * 0x9e3779b97f4a7c15ull);
  return float(int64_t(x >> 40) - (int64_t(1) << 23)) * (1.0f / float(1 << 23));
}

// Scale of a weight tensor with the given fan-in: uniform(-b, b) with b = sqrt(6 / fan_in)
// (He) keeps activations of a ReLU network at a steady magnitude through a hundred layers, so
// errors are measured on realistic values rather than on numbers that vanished or exploded.
inline float weight_bound(double fan_in) { return float(std::sqrt(6.0 / (fan_in > 0 ? fan_in : 1.0))); }
constexpr float kBiasBound = 0.1f;
constexpr float kInputBound = 1.0f;

}  // namespace hios::init
