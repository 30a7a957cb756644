// What every kernel family of the CUDA backend shares (included by each .cu file only): the
// fp32 <-> storage-type loads and stores, vector accesses, the per-type dispatch, grid sizing,
// the fused activations and the tile shape that depthwise convolutions and tiled pools share.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "executor/cuda/check.hpp"

namespace hios::cuda {

namespace {

constexpr int kThreads = 256;

// Loads and stores of one storage type, converting to and from the fp32 the kernels compute
// in; ld4/st4 move 4 neighbouring elements in one access (16 bytes, or 8 in 16-bit types).
// Vector stores go through __stwb (an ordinary write-back store to global memory, which is
// where every kernel's output is): with a plain assignment nvcc split the 16-byte store of
// pool3_tile_kernel into four 4-byte stores, and __stwb always emits the one vector store.
template <class T>
struct Io;
template <>
struct Io<float> {
  __device__ static float ld(const float* p) { return *p; }
  __device__ static void st(float* p, float v) { *p = v; }
  __device__ static void ld4(const float* p, float (&v)[4]) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
  }
  __device__ static void st4(float* p, const float (&v)[4]) {
    __stwb(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
  }
  __device__ static void ld2(const float* p, float (&v)[2]) {
    const float2 q = *reinterpret_cast<const float2*>(p);
    v[0] = q.x;
    v[1] = q.y;
  }
  __device__ static void st2(float* p, const float (&v)[2]) { *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]); }
};
// The two 16-bit types differ only in their conversion intrinsics: these overloads name them,
// and one template (Io16) does the rest for both.
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float2 to_f2(__half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 to_f2(__nv_bfloat162 v) { return __bfloat1622float2(v); }
__device__ __forceinline__ void from_f(float v, __half* out) { *out = __float2half_rn(v); }
__device__ __forceinline__ void from_f(float v, __nv_bfloat16* out) { *out = __float2bfloat16_rn(v); }
__device__ __forceinline__ __half2 pair_of(float a, float b, __half2*) { return __floats2half2_rn(a, b); }
__device__ __forceinline__ __nv_bfloat162 pair_of(float a, float b, __nv_bfloat162*) {
  return __floats2bfloat162_rn(a, b);
}
// A pair of 16-bit values as the 32-bit word that holds it, element 0 in the low half, and
// back. Vector accesses go through whole words (uint2, uint4): a struct of pairs made nvcc split
// a 16-byte access into two 8-byte loads of four u16 registers, and a store into four 4-byte
// stores (PTX of pool3_tile_kernel), which left the bf16 tile kernel issue-bound (Nsight Compute:
// 3.4 instructions per cycle, ALU the busiest pipe, DRAM at 32%).
__device__ __forceinline__ float2 word_to_f2(uint32_t w, __nv_bfloat162*) {
  // bf16 is the high half of an fp32: widening is a shift, exactly what __bfloat1622float2 gives.
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}
__device__ __forceinline__ float2 word_to_f2(uint32_t w, __half2*) {
  __half2 h;
  __builtin_memcpy(&h, &w, sizeof(w));
  return __half22float2(h);
}
template <class T2>
__device__ __forceinline__ uint32_t word_of(float a, float b) {
  const T2 pair = pair_of(a, b, static_cast<T2*>(nullptr));
  uint32_t w;
  __builtin_memcpy(&w, &pair, sizeof(w));
  return w;
}
template <class T, class T2>
struct Io16 {
  __device__ static float ld(const T* p) { return to_f(*p); }
  __device__ static void st(T* p, float v) { from_f(v, p); }
  template <int N>
  __device__ static void unpack(const uint32_t (&w)[N], float (&v)[2 * N]) {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float2 f = word_to_f2(w[k], static_cast<T2*>(nullptr));
      v[2 * k] = f.x;
      v[2 * k + 1] = f.y;
    }
  }
  __device__ static void ld4(const T* p, float (&v)[4]) {
    const uint2 q = *reinterpret_cast<const uint2*>(p);
    unpack<2>({q.x, q.y}, v);
  }
  __device__ static void st4(T* p, const float (&v)[4]) {
    __stwb(reinterpret_cast<uint2*>(p), make_uint2(word_of<T2>(v[0], v[1]), word_of<T2>(v[2], v[3])));
  }
  // 8 elements, 16 bytes: the width at which a 16-bit stream reaches the bandwidth fp32's
  // float4 does (term assembly in bf16 ran at 1.9x its copy time with 8-byte accesses).
  __device__ static void ld8(const T* p, float (&v)[8]) {
    const uint4 q = *reinterpret_cast<const uint4*>(p);
    unpack<4>({q.x, q.y, q.z, q.w}, v);
  }
  __device__ static void st8(T* p, const float (&v)[8]) {
    __stwb(reinterpret_cast<uint4*>(p),
           make_uint4(word_of<T2>(v[0], v[1]), word_of<T2>(v[2], v[3]), word_of<T2>(v[4], v[5]), word_of<T2>(v[6], v[7])));
  }
  __device__ static void ld2(const T* p, float (&v)[2]) {
    const float2 a = to_f2(*reinterpret_cast<const T2*>(p));
    v[0] = a.x;
    v[1] = a.y;
  }
  __device__ static void st2(T* p, const float (&v)[2]) {
    *reinterpret_cast<T2*>(p) = pair_of(v[0], v[1], static_cast<T2*>(nullptr));
  }
};
template <>
struct Io<__half> : Io16<__half, __half2> {};
template <>
struct Io<__nv_bfloat16> : Io16<__nv_bfloat16, __nv_bfloat162> {};
template <class T>
__device__ __forceinline__ float ld(const T* p) {
  return Io<T>::ld(p);
}
template <class T>
__device__ __forceinline__ void st(T* p, float v) {
  Io<T>::st(p, v);
}
// V neighbouring elements (V = 1, 2 or 4; 8 in 16-bit types) in one access; p aligned to V
// elements.
template <int V, class T>
__device__ __forceinline__ void ldv(const T* p, float (&v)[V]) {
  if constexpr (V == 8) {
    Io<T>::ld8(p, v);
  } else if constexpr (V == 4) {
    Io<T>::ld4(p, v);
  } else if constexpr (V == 2) {
    Io<T>::ld2(p, v);
  } else {
    v[0] = Io<T>::ld(p);
  }
}
template <int V, class T>
__device__ __forceinline__ void stv(T* p, const float (&v)[V]) {
  if constexpr (V == 8) {
    Io<T>::st8(p, v);
  } else if constexpr (V == 4) {
    Io<T>::st4(p, v);
  } else if constexpr (V == 2) {
    Io<T>::st2(p, v);
  } else {
    Io<T>::st(p, v[0]);
  }
}
// An optional operand (bias): 0 when absent.
template <class T>
__device__ __forceinline__ float ld_or0(const T* p, int64_t i) {
  return p ? Io<T>::ld(p + i) : 0.f;
}

// Calls f(T{}) for the storage type e: launchers instantiate their kernel per type with it.
template <class F>
void with_elem(Elem e, F&& f) {
  switch (e) {
    case Elem::F32: f(float{}); return;
    case Elem::F16: f(__half{}); return;
    case Elem::BF16: f(__nv_bfloat16{}); return;
  }
}

// Enough blocks to fill an H100/H200 several times over; the loops stride over the rest.
int grid_for(int64_t work, int per_thread = 1) {
  int64_t blocks = (work + int64_t(kThreads) * per_thread - 1) / (int64_t(kThreads) * per_thread);
  return int(std::max<int64_t>(1, std::min<int64_t>(blocks, 132 * 16)));
}

// ReLU written as a comparison, not fmaxf: fmaxf(NaN, 0) is 0, and ONNX Runtime keeps the NaN.
__device__ __forceinline__ float relu_keep_nan(float v) { return v < 0.f ? 0.f : v; }

// The larger of two, where a NaN on either side wins (as in ONNX Runtime's max pool); fmaxf
// would drop it.
__device__ __forceinline__ float max_keep_nan(float m, float v) { return m >= v || isnan(m) ? m : v; }

__device__ __forceinline__ float activate(float v, int act) {
  switch (act) {
    case 1: return relu_keep_nan(v);
    case 2: return 1.f / (1.f + expf(-v));
    case 3: return tanhf(v);
    case 4: return v < 0.f ? 0.f : v > 6.f ? 6.f : v;  // Relu6 (a NaN stays NaN)
    case 10: return v * fminf(fmaxf(v / 6.f + 0.5f, 0.f), 1.f);  // HardSwish (a NaN stays NaN: NaN * 0)
    default: return v;
  }
}

// One block of kBlockThreads computes a kTileW x kTileH patch of one channel of one item, each
// thread kTileH / kRowsPerPass outputs down a column; the input patch (halo included, ReLU
// applied when asked) is staged in shared memory once and read k*k times. Several outputs per
// thread keep loads in flight: with one, a 5x5 depthwise layer on a 256x256x168 map ran at a
// tenth of the memory bandwidth, waiting on latency wave after wave.
constexpr int kTileW = 32, kTileH = 32, kRowsPerPass = 8, kBlockThreads = kTileW * kRowsPerPass;

}  // namespace

}  // namespace hios::cuda
