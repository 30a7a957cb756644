// The general tensor ops' kernels (executor/cuda/tensor_kernels.hpp): every one walks its
// output's index space with a grid-stride loop, turns the linear index into coordinates, and
// addresses each operand through its strides. The planner collapses dims that are contiguous in
// every operand first, so an element-wise op on two tensors of one shape is a rank-1 walk with
// no division. Indices are 32-bit where every offset fits, which halves the cost of the
// coordinate arithmetic.
#include "executor/cuda/tensor_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "executor/cuda/check.hpp"
#include "executor/cuda/kernel_util.cuh"

namespace hios::cuda {

namespace {

// graph/ops.hpp's Activation, BinaryFn, ReduceFn and SoftmaxFn, by value (the host planner
// static_asserts that the values agree; nvcc compiles this file as C++17 without graph/).
enum Act : int {
  kNone, kRelu, kSigmoid, kTanh, kRelu6, kLeakyRelu, kElu, kSelu, kCelu, kHardSigmoid, kHardSwish, kSoftplus,
  kSoftsign, kGelu, kGeluTanh, kErf, kMish, kClip, kExp, kLog, kSqrt, kReciprocal, kAbs, kNeg, kFloor, kCeil, kRound,
  kSign, kSin, kCos, kTan, kAsin, kAcos, kAtan, kSinh, kCosh, kAsinh, kAcosh, kAtanh, kNot, kIsNan, kIsInf,
  kThresholdedRelu, kShrink
};
enum Bin : int { kAdd, kSub, kMul, kDiv, kPow, kMin, kMax, kMod, kFMod, kPRelu = 17 };
enum Red : int { kSum, kMean, kRMax, kRMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };
enum Soft : int { kSoftmax, kLogSoftmax, kHardmax };

__device__ __forceinline__ float softplus_f(float x) { return x > 20.f ? x : log1pf(expf(x)); }

__device__ __forceinline__ float apply_activation(int code, float x, float al, float be) {
  switch (code) {
    case kNone: return x;
    case kRelu: return x > 0.f || isnan(x) ? x : 0.f;
    case kSigmoid: return 1.f / (1.f + expf(-x));
    case kTanh: return tanhf(x);
    case kRelu6: return isnan(x) ? x : fminf(fmaxf(x, 0.f), 6.f);
    case kLeakyRelu: return x >= 0.f ? x : al * x;
    case kElu: return x >= 0.f ? x : al * (expf(x) - 1.f);
    case kSelu: return x > 0.f ? be * x : be * (al * expf(x) - al);
    case kCelu: return fmaxf(0.f, x) + fminf(0.f, al * (expf(x / al) - 1.f));
    case kHardSigmoid: return isnan(x) ? x : fmaxf(0.f, fminf(1.f, al * x + be));
    case kHardSwish: return isnan(x) ? x : x * fmaxf(0.f, fminf(1.f, x / 6.f + 0.5f));
    case kSoftplus: return softplus_f(x);
    case kSoftsign: return x / (1.f + fabsf(x));
    case kGelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case kGeluTanh: return 0.5f * x * (1.f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case kErf: return erff(x);
    case kMish: return x * tanhf(softplus_f(x));
    case kClip: return isnan(x) ? x : fminf(fmaxf(x, al), be);
    case kExp: return expf(x);
    case kLog: return logf(x);
    case kSqrt: return sqrtf(x);
    case kReciprocal: return 1.f / x;
    case kAbs: return fabsf(x);
    case kNeg: return -x;
    case kFloor: return floorf(x);
    case kCeil: return ceilf(x);
    case kRound: return rintf(x);  // half to even
    case kSign: return x > 0.f ? 1.f : x < 0.f ? -1.f : x;
    case kSin: return sinf(x);
    case kCos: return cosf(x);
    case kTan: return tanf(x);
    case kAsin: return asinf(x);
    case kAcos: return acosf(x);
    case kAtan: return atanf(x);
    case kSinh: return sinhf(x);
    case kCosh: return coshf(x);
    case kAsinh: return asinhf(x);
    case kAcosh: return acoshf(x);
    case kAtanh: return atanhf(x);
    case kThresholdedRelu: return x > al ? x : 0.f;
    case kShrink: return x < -al ? x + be : x > al ? x - be : 0.f;
    default: return x;
  }
}

__device__ __forceinline__ float apply_binary(int code, float a, float b) {
  switch (code) {
    case kAdd: return a + b;
    case kSub: return a - b;
    case kMul: return a * b;
    case kDiv: return a / b;
    case kPow: return powf(a, b);
    case kMin: return isnan(a) || isnan(b) ? NAN : fminf(a, b);
    case kMax: return isnan(a) || isnan(b) ? NAN : fmaxf(a, b);
    case kMod: {
      const float r = fmodf(a, b);
      return (r != 0.f && ((r < 0.f) != (b < 0.f))) ? r + b : r;
    }
    case kFMod: return fmodf(a, b);
    case kPRelu: return a < 0.f ? a * b : a;
    default: return a;
  }
}

// Coordinates of linear index i over dims (row-major), folded into offsets as they come. R is
// the rank when the launch knows it (1 to 4), 0 for any rank up to kMaxTensorDims. Every loop
// runs to a bound known at compile time, with the dims past the rank skipped by a guard, so the
// coordinates stay in registers: indexed by a runtime d, nvcc put them in local memory, and an
// element-wise op on an image ran at a twentieth of the memory bandwidth.
template <class I, int R = 0>
struct Coords {
  static constexpr int N = R > 0 ? R : kMaxTensorDims;
  I c[N];
  __device__ Coords(I i, int rank, const int64_t* dims) {
    if constexpr (R == 1) {  // i < dims[0]: no division
      c[0] = i;
    } else {
#pragma unroll
      for (int d = N - 1; d >= 0; --d) {
        if (R > 0 || d < rank) {
          const I n = I(dims[d]);
          c[d] = i % n;
          i /= n;
        } else {
          c[d] = 0;
        }
      }
    }
  }
  __device__ I offset(int rank, const int64_t* stride) const {
    I o = 0;
#pragma unroll
    for (int d = 0; d < N; ++d) {
      if (R > 0 || d < rank) o += c[d] * I(stride[d]);
    }
    return o;
  }
};

// Calls f(std::integral_constant<int, R>) with R the rank where a specialised walk exists (1
// to 4), else 0.
template <class F>
void with_rank(int rank, F&& f) {
  switch (rank) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    default: f(std::integral_constant<int, 0>{}); break;
  }
}

__host__ __device__ inline int64_t count_of(int rank, const int64_t* dims) {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= dims[d];
  return n;
}

template <class T, class I, int R>
__global__ void map_kernel(const __grid_constant__ MapParams p) {
  constexpr int N = Coords<I, R>::N;
  const I count = I(count_of(p.rank, p.dims));
  const T* a = static_cast<const T*>(p.in[0].ptr);
  const T* b = static_cast<const T*>(p.in[1].ptr);
  T* y = static_cast<T*>(p.y);
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < count; i += I(gridDim.x) * I(blockDim.x)) {
    const Coords<I, R> at(i, p.rank, p.dims);
    I ao = 0;
#pragma unroll
    for (int d = 0; d < N; ++d) {
      if (R > 0 || d < p.rank) {
        I cd = at.c[d];
        if (d == p.gather_dim) {
          const int64_t t = p.gather_table[at.c[d]];
          cd = I(t < 0 ? t + p.gather_wrap : t);
        }
        ao += cd * I(p.in[0].stride[d]);
      }
    }
    float v = p.fn == MapFn::FromInt64 ? float(static_cast<const int64_t*>(p.in[0].ptr)[ao]) : ld(a + ao);
    if (p.fn == MapFn::Activation) {
      v = apply_activation(p.code, v, p.alpha, p.beta);
    } else if (p.fn == MapFn::Binary) {
      v = apply_binary(p.code, v, ld(b + at.offset(p.rank, p.in[1].stride)));
    }
    if (p.round == 1) v = __half2float(__float2half_rn(v));
    if (p.round == 2) v = __bfloat162float(__float2bfloat16_rn(v));
    st(y + at.offset(p.rank, p.y_stride), v);
  }
}

// A plain copy (MapFn::Copy, no rounding, no gather) whose innermost dim runs consecutively on
// both sides, in words of several elements: the map kernel's per-element coordinates and 4-byte
// accesses moved a transformer's head transposes ([T, H, 64] to [H, T, 64]) at 400 GB/s on an
// H200. The dims and strides are in words here (copy_in_words); bits are copied as they are.
template <class Word, class I, int R>
__global__ void copy_words_kernel(const __grid_constant__ MapParams p) {
  const I count = I(count_of(p.rank, p.dims));
  const Word* a = static_cast<const Word*>(p.in[0].ptr);
  Word* y = static_cast<Word*>(p.y);
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < count; i += I(gridDim.x) * I(blockDim.x)) {
    const Coords<I, R> at(i, p.rank, p.dims);
    y[at.offset(p.rank, p.y_stride)] = a[at.offset(p.rank, p.in[0].stride)];
  }
}

// A warp per output element: the lanes stride over the reduced elements, then combine.
template <class T, class I>
__global__ void reduce_kernel(ReduceParams p) {
  const int lane = threadIdx.x % 32;
  const I outputs = I(count_of(p.rank, p.dims)), inner = I(count_of(p.red_rank, p.red_dims));
  const int warps = blockDim.x / 32;
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  for (I o = blockIdx.x * I(warps) + threadIdx.x / 32; o < outputs; o += I(gridDim.x) * I(warps)) {
    const Coords<I> at(o, p.rank, p.dims);
    const I base = at.offset(p.rank, p.x_stride);
    // LogSumExp subtracts the maximum first, as the CPU reference does.
    float most = -INFINITY;
    if (p.fn == kLogSumExp) {
      for (I k = lane; k < inner; k += 32) most = fmaxf(most, ld(x + base + Coords<I>(k, p.red_rank, p.red_dims).offset(p.red_rank, p.red_stride)));
      for (int off = 16; off > 0; off /= 2) most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, off));
      if (isinf(most) || isnan(most)) most = 0.f;
    }
    float acc = p.fn == kProd ? 1.f : p.fn == kRMax ? -INFINITY : p.fn == kRMin ? INFINITY : 0.f;
    bool nan = false;
    for (I k = lane; k < inner; k += 32) {
      const float v = ld(x + base + Coords<I>(k, p.red_rank, p.red_dims).offset(p.red_rank, p.red_stride));
      nan = nan || isnan(v);
      switch (p.fn) {
        case kRMax: acc = fmaxf(acc, v); break;
        case kRMin: acc = fminf(acc, v); break;
        case kProd: acc *= v; break;
        case kL1: acc += fabsf(v); break;
        case kL2: case kSumSquare: acc += v * v; break;
        case kLogSumExp: acc += expf(v - most); break;
        default: acc += v; break;
      }
    }
    for (int off = 16; off > 0; off /= 2) {
      const float other = __shfl_xor_sync(0xffffffffu, acc, off);
      acc = p.fn == kRMax ? fmaxf(acc, other) : p.fn == kRMin ? fminf(acc, other) : p.fn == kProd ? acc * other : acc + other;
    }
    nan = __any_sync(0xffffffffu, nan);
    if (lane != 0) continue;
    if (p.fn == kMean) acc /= float(inner);
    if (p.fn == kL2) acc = sqrtf(acc);
    if (p.fn == kLogSum) acc = logf(acc);
    if (p.fn == kLogSumExp) acc = logf(acc) + most;
    if (nan && (p.fn == kRMax || p.fn == kRMin)) acc = NAN;
    st(y + at.offset(p.rank, p.y_stride), acc);
  }
}

// A norm's tensors, typed: both norm kernels below read the same ones.
template <class T>
struct NormTensors {
  const T *x, *scale, *bias, *res;
  T* y;
  __device__ explicit NormTensors(const NormParams& p)
      : x(static_cast<const T*>(p.x)), scale(static_cast<const T*>(p.scale)), bias(static_cast<const T*>(p.bias)),
        res(static_cast<const T*>(p.r)), y(static_cast<T*>(p.y)) {}
};

// A warp per row: the mean (layer norm), the mean square about it, then the outputs, in fp32.
template <class T, class I>
__global__ void norm_kernel(NormParams p) {
  const int lane = threadIdx.x % 32;
  const I rows = I(count_of(p.rank, p.dims)), len = I(count_of(p.red_rank, p.red_dims));
  const int warps = blockDim.x / 32;
  const NormTensors<T> t(p);
  const T *x = t.x, *scale = t.scale, *bias = t.bias, *res = t.res;
  T* y = t.y;
  for (I r = blockIdx.x * I(warps) + threadIdx.x / 32; r < rows; r += I(gridDim.x) * I(warps)) {
    const Coords<I> at(r, p.rank, p.dims);
    const I xb = at.offset(p.rank, p.x_stride), yb = at.offset(p.rank, p.y_stride);
    const I rb = res ? at.offset(p.rank, p.r_stride) : I(0);
    // x, or the residual sum rounded to the storage type as the add node it stands for stores it.
    auto x_of = [&](const Coords<I>& kc) {
      const float v = ld(x + xb + kc.offset(p.red_rank, p.red_x_stride));
      if (!res) return v;
      T sum;
      st(&sum, v + ld(res + rb + kc.offset(p.red_rank, p.red_r_stride)));
      return ld(&sum);
    };
    auto x_at = [&](I k) { return x_of(Coords<I>(k, p.red_rank, p.red_dims)); };
    float mean = 0.f;
    if (p.fn == 0) {
      for (I k = lane; k < len; k += 32) mean += x_at(k);
      for (int off = 16; off > 0; off /= 2) mean += __shfl_xor_sync(0xffffffffu, mean, off);
      mean /= float(len);
    }
    float spread = 0.f;
    for (I k = lane; k < len; k += 32) {
      const float d = x_at(k) - mean;
      spread += d * d;
    }
    for (int off = 16; off > 0; off /= 2) spread += __shfl_xor_sync(0xffffffffu, spread, off);
    const float inv = 1.f / sqrtf(spread / float(len) + p.epsilon);
    for (I k = lane; k < len; k += 32) {
      const Coords<I> kc(k, p.red_rank, p.red_dims);
      const float s = ld(scale + (p.scale_count == 1 ? 0 : k));
      const float b = bias ? ld(bias + (p.bias_count == 1 ? 0 : k)) : 0.f;
      st(y + yb + kc.offset(p.red_rank, p.red_y_stride), (x_of(kc) - mean) * inv * s + b);
    }
  }
}

// The common case of the kernel above, a contiguous row of at most 32 * kPerLane elements
// (a transformer's hidden size): each lane holds its elements in registers, so the row is read
// once instead of three times and no index is decomposed per element. The sums run over the
// same elements in the same order as norm_kernel's, so both give the same bits.
template <class T, class I, int kPerLane>
__global__ void norm_rows_kernel(NormParams p) {
  const int lane = threadIdx.x % 32;
  const I rows = I(count_of(p.rank, p.dims)), len = I(p.red_dims[0]);
  const int warps = blockDim.x / 32;
  const NormTensors<T> t(p);
  const T *x = t.x, *scale = t.scale, *bias = t.bias, *res = t.res;
  T* y = t.y;
  for (I r = blockIdx.x * I(warps) + threadIdx.x / 32; r < rows; r += I(gridDim.x) * I(warps)) {
    const Coords<I> at(r, p.rank, p.dims);
    const T* xr = x + at.offset(p.rank, p.x_stride);
    T* yr = y + at.offset(p.rank, p.y_stride);
    const T* rr = res ? res + at.offset(p.rank, p.r_stride) : nullptr;
    float v[kPerLane];
    float mean = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const I k = I(lane) + I(i) * 32;
      v[i] = 0.f;
      if (k < len) {
        v[i] = ld(xr + k);
        if (rr) {  // the residual sum rounded to the storage type, as the add node stores it
          T sum;
          st(&sum, v[i] + ld(rr + k));
          v[i] = ld(&sum);
        }
        mean += v[i];
      }
    }
    if (p.fn == 0) {
      for (int off = 16; off > 0; off /= 2) mean += __shfl_xor_sync(0xffffffffu, mean, off);
      mean /= float(len);
    } else {
      mean = 0.f;
    }
    float spread = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (I(lane) + I(i) * 32 < len) {
        const float d = v[i] - mean;
        spread += d * d;
      }
    }
    for (int off = 16; off > 0; off /= 2) spread += __shfl_xor_sync(0xffffffffu, spread, off);
    const float inv = 1.f / sqrtf(spread / float(len) + p.epsilon);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const I k = I(lane) + I(i) * 32;
      if (k < len) {
        const float s = ld(scale + (p.scale_count == 1 ? 0 : k));
        const float b = bias ? ld(bias + (p.bias_count == 1 ? 0 : k)) : 0.f;
        st(yr + k, (v[i] - mean) * inv * s + b);
      }
    }
  }
}

// A warp per line along the axis: the maximum, the sum of exponentials, then the outputs.
template <class T, class I>
__global__ void softmax_axis_kernel(SoftmaxAxisParams p) {
  const int lane = threadIdx.x % 32;
  const I lines = I(count_of(p.rank, p.dims)), len = I(p.len);
  const int warps = blockDim.x / 32;
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  for (I o = blockIdx.x * I(warps) + threadIdx.x / 32; o < lines; o += I(gridDim.x) * I(warps)) {
    const Coords<I> at(o, p.rank, p.dims);
    const T* xl = x + at.offset(p.rank, p.x_stride);
    T* yl = y + at.offset(p.rank, p.y_stride);
    const I xs = I(p.x_axis_stride), ys = I(p.y_axis_stride);
    float m = -INFINITY;
    I arg = 0;
    for (I k = lane; k < len; k += 32) {
      const float v = ld(xl + k * xs);
      if (v > m) {
        m = v;
        arg = k;
      }
    }
    // The first of equal maxima wins, as on the CPU: the lower index on ties.
    for (int off = 16; off > 0; off /= 2) {
      const float om = __shfl_xor_sync(0xffffffffu, m, off);
      const I oa = __shfl_xor_sync(0xffffffffu, arg, off);
      if (om > m || (om == m && oa < arg)) {
        m = om;
        arg = oa;
      }
    }
    if (p.fn == kHardmax) {
      for (I k = lane; k < len; k += 32) st(yl + k * ys, k == arg ? 1.f : 0.f);
      continue;
    }
    float sum = 0.f;
    for (I k = lane; k < len; k += 32) sum += expf(ld(xl + k * xs) - m);
    for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const float log_sum = logf(sum);
    for (I k = lane; k < len; k += 32) {
      const float z = ld(xl + k * xs) - m;
      st(yl + k * ys, p.fn == kSoftmax ? expf(z) / sum : z - log_sum);
    }
  }
}

template <class T, class I, int R>
__global__ void resize_kernel(const __grid_constant__ ResizeParams p) {
  constexpr int N = Coords<I, R>::N;
  const I count = I(count_of(p.rank, p.dims));
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < count; i += I(gridDim.x) * I(blockDim.x)) {
    const Coords<I, R> at(i, p.rank, p.dims);
    I fixed = 0;  // the offset along the axes that are not resized
#pragma unroll
    for (int d = 0; d < N; ++d) {
      if ((R > 0 || d < p.rank) && p.taps[d] == 0) fixed += at.c[d] * I(p.x_stride[d]);
    }
    // The product of the resized axes' taps, as a mixed-radix counter k (one digit per axis).
    int k[N] = {};
    float acc = 0.f;
    for (;;) {
      I off = fixed;
      float w = 1.f;
#pragma unroll
      for (int d = 0; d < N; ++d) {
        if ((R > 0 || d < p.rank) && p.taps[d] != 0) {
          const I t = at.c[d] * I(p.taps[d]) + I(k[d]);
          off += I(p.tap_index[d][t]) * I(p.x_stride[d]);
          w *= p.tap_weight[d][t];
        }
      }
      acc += w * ld(x + off);
      bool carry = true;
#pragma unroll
      for (int d = N - 1; d >= 0; --d) {
        if (carry && (R > 0 || d < p.rank) && p.taps[d] != 0) {
          if (++k[d] == p.taps[d]) k[d] = 0;
          else carry = false;
        }
      }
      if (carry) break;
    }
    st(y + at.offset(p.rank, p.y_stride), acc);
  }
}

// The same sums where the innermost dim is not resized and is contiguous in x and y (the
// channels of a channels-last image): a thread takes kResizeRun neighbouring elements of it, so
// the coordinates and the taps' offsets and weights are worked out once for all of them. Each
// element's taps are summed in the same order as resize_kernel's, so both give the same bits.
constexpr int kResizeRun = 4;
template <class T, class I, int R>
__global__ void resize_run_kernel(const __grid_constant__ ResizeParams p) {
  constexpr int RO = R > 0 ? R - 1 : 0;  // the rank of the outer walk, when known
  constexpr int N = Coords<I, RO>::N;
  const int outer_rank = p.rank - 1;
  const I inner = I(p.dims[outer_rank]);
  const I runs = (inner + kResizeRun - 1) / kResizeRun;
  const I count = I(count_of(outer_rank, p.dims)) * runs;
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < count; i += I(gridDim.x) * I(blockDim.x)) {
    const I c0 = (i % runs) * kResizeRun;
    const int nc = int(inner - c0 < kResizeRun ? inner - c0 : kResizeRun);
    const Coords<I, RO> at(i / runs, outer_rank, p.dims);
    I fixed = c0;
#pragma unroll
    for (int d = 0; d < N; ++d) {
      if ((RO > 0 || d < outer_rank) && p.taps[d] == 0) fixed += at.c[d] * I(p.x_stride[d]);
    }
    int k[N] = {};
    float acc[kResizeRun] = {0.f, 0.f, 0.f, 0.f};
    for (;;) {
      I off = fixed;
      float w = 1.f;
#pragma unroll
      for (int d = 0; d < N; ++d) {
        if ((RO > 0 || d < outer_rank) && p.taps[d] != 0) {
          const I t = at.c[d] * I(p.taps[d]) + I(k[d]);
          off += I(p.tap_index[d][t]) * I(p.x_stride[d]);
          w *= p.tap_weight[d][t];
        }
      }
#pragma unroll
      for (int j = 0; j < kResizeRun; ++j) {
        if (j < nc) acc[j] += w * ld(x + off + j);
      }
      bool carry = true;
#pragma unroll
      for (int d = N - 1; d >= 0; --d) {
        if (carry && (RO > 0 || d < outer_rank) && p.taps[d] != 0) {
          if (++k[d] == p.taps[d]) k[d] = 0;
          else carry = false;
        }
      }
      if (carry) break;
    }
    T* yo = y + at.offset(outer_rank, p.y_stride) + c0;
#pragma unroll
    for (int j = 0; j < kResizeRun; ++j) {
      if (j < nc) st(yo + j, acc[j]);
    }
  }
}

// An image resized along dims 1 and 2 of 4 (N, H, W, C in memory order): one thread per output
// element, consecutive threads on consecutive elements, whatever C is (DeepLab's 21 classes
// upsampled 8x left the four-element runs above a quarter of the bandwidth). Taps summed, and
// weights multiplied, in resize_kernel's order: H's taps outer, W's inner, w = 1 * wy * wx.
template <class T>
__global__ void resize_image_kernel(const __grid_constant__ ResizeParams p) {
  const uint32_t C = uint32_t(p.dims[3]), W = uint32_t(p.dims[2]), H = uint32_t(p.dims[1]);
  const uint32_t count = uint32_t(p.dims[0]) * H * W * C;
  const int th = p.taps[1], tw = p.taps[2];
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    const uint32_t c = i % C, pixel = i / C;
    const uint32_t ox = pixel % W, rest = pixel / W;
    const uint32_t oy = rest % H, n = rest / H;
    const int32_t fixed = int32_t(n) * int32_t(p.x_stride[0]) + int32_t(c) * int32_t(p.x_stride[3]);
    float acc = 0.f;
    for (int ky = 0; ky < th; ++ky) {
      const int32_t ty = int32_t(oy) * th + ky;
      const int32_t row = fixed + p.tap_index[1][ty] * int32_t(p.x_stride[1]);
      const float wy = p.tap_weight[1][ty];
      for (int kx = 0; kx < tw; ++kx) {
        const int32_t tx = int32_t(ox) * tw + kx;
        float w = 1.f;
        w *= wy;
        w *= p.tap_weight[2][tx];
        acc += w * ld(x + row + p.tap_index[2][tx] * int32_t(p.x_stride[2]));
      }
    }
    st(y + n * uint32_t(p.y_stride[0]) + oy * uint32_t(p.y_stride[1]) + ox * uint32_t(p.y_stride[2]) +
           c * uint32_t(p.y_stride[3]),
       acc);
  }
}

// The same image resize where y's pixels are packed (C consecutive elements each): a block
// writes one stretch of kResizeRowPixels pixels of one output row, a run of consecutive
// elements. The row's H taps sit in registers and each pixel's W taps in shared memory, read
// once per block; each thread steps through the run by blockDim elements, carrying its pixel
// and channel along instead of dividing. The image kernel spent most of its time on the three
// divisions and four table loads per element (21-class maps upsampled 8x reached a fifth of the
// bandwidth their writes need). Same sums in the same order as resize_kernel.
constexpr int kResizeRowPixels = 128;
constexpr int kResizeRowMaxTaps = 4;
template <class T>
__global__ void resize_image_rows_kernel(const __grid_constant__ ResizeParams p) {
  __shared__ int32_t x_at[kResizeRowMaxTaps][kResizeRowPixels];
  __shared__ float x_weight[kResizeRowMaxTaps][kResizeRowPixels];
  const uint32_t C = uint32_t(p.dims[3]), W = uint32_t(p.dims[2]), H = uint32_t(p.dims[1]);
  const uint32_t stretches = (W + kResizeRowPixels - 1) / kResizeRowPixels;
  const int th = p.taps[1], tw = p.taps[2];
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  for (uint32_t b = blockIdx.x; b < uint32_t(p.dims[0]) * H * stretches; b += gridDim.x) {
    const uint32_t stretch = b % stretches, row = b / stretches;
    const uint32_t oy = row % H, n = row / H;
    const uint32_t ox0 = stretch * kResizeRowPixels;
    const uint32_t pixels = min(uint32_t(kResizeRowPixels), W - ox0);
    __syncthreads();  // the previous stretch's readers are done with the tables
    for (uint32_t i = threadIdx.x; i < pixels * uint32_t(tw); i += blockDim.x) {
      const uint32_t kx = i / pixels, px = i % pixels;
      const int32_t tx = int32_t(ox0 + px) * tw + int32_t(kx);
      x_at[kx][px] = p.tap_index[2][tx] * int32_t(p.x_stride[2]);
      x_weight[kx][px] = p.tap_weight[2][tx];
    }
    __syncthreads();
    int32_t row_at[kResizeRowMaxTaps];
    float row_weight[kResizeRowMaxTaps];
#pragma unroll
    for (int ky = 0; ky < kResizeRowMaxTaps; ++ky) {
      const int32_t ty = int32_t(oy) * th + ky;
      row_at[ky] = ky < th ? int32_t(n) * int32_t(p.x_stride[0]) + p.tap_index[1][ty] * int32_t(p.x_stride[1]) : 0;
      row_weight[ky] = ky < th ? p.tap_weight[1][ty] : 0.f;
    }
    T* out = y + n * uint32_t(p.y_stride[0]) + oy * uint32_t(p.y_stride[1]) + ox0 * C;
    const uint32_t step_px = blockDim.x / C, step_c = blockDim.x % C;
    uint32_t px = threadIdx.x / C, c = threadIdx.x % C;
    const int32_t cs = int32_t(p.x_stride[3]);
    for (uint32_t e = threadIdx.x; e < pixels * C; e += blockDim.x) {
      float acc = 0.f;
      for (int ky = 0; ky < th; ++ky) {
        const int32_t at = row_at[ky] + int32_t(c) * cs;
        const float wy = row_weight[ky];
        for (int kx = 0; kx < tw; ++kx) {
          float w = 1.f;
          w *= wy;
          w *= x_weight[kx][px];
          acc += w * ld(x + at + x_at[kx][px]);
        }
      }
      st(out + e, acc);
      px += step_px;
      c += step_c;
      if (c >= C) {
        c -= C;
        ++px;
      }
    }
  }
}

template <class T, class I>
__global__ void reshape_kernel(ReshapeParams p) {
  const I count = I(count_of(p.y_rank, p.y_dims));
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < count; i += I(gridDim.x) * I(blockDim.x)) {
    const I src = Coords<I>(i, p.x_rank, p.x_dims).offset(p.x_rank, p.x_stride);
    y[Coords<I>(i, p.y_rank, p.y_dims).offset(p.y_rank, p.y_stride)] = x[src];
  }
}

// Whether every offset the walk makes fits 32 bits: the element count and each operand's
// furthest element (sum over dims of (dim - 1) * |stride|).
bool fits32(int rank, const int64_t* dims, const int64_t* const* strides, int n) {
  constexpr int64_t kLimit = int64_t(1) << 31;
  if (count_of(rank, dims) >= kLimit) return false;
  for (int s = 0; s < n; ++s) {
    int64_t reach = 0;
    for (int d = 0; d < rank; ++d) reach += (dims[d] - 1) * (strides[s][d] < 0 ? -strides[s][d] : strides[s][d]);
    if (reach >= kLimit) return false;
  }
  return true;
}

}  // namespace

bool map_activation_supported(int code) { return code >= kNone && code <= kShrink && code != kNot && code != kIsNan && code != kIsInf; }
bool map_binary_supported(int code) { return (code >= kAdd && code <= kFMod) || code == kPRelu; }
bool reduce_supported(int code) { return code >= kSum && code <= kSumSquare; }

namespace {

// launch_map's plain copies in words of 16, 8 or 4 bytes where the innermost dim is consecutive
// on both sides and every other stride, the run and both pointers allow the word: false (and
// nothing launched) where none does.
template <class Word>
bool copy_as(const MapParams& p, cudaStream_t stream) {
  const int64_t eb = int64_t(elem_bytes(p.elem)), wb = int64_t(sizeof(Word));
  const int last = p.rank - 1;
  if (wb <= eb || (p.dims[last] * eb) % wb != 0) return false;
  if (reinterpret_cast<uintptr_t>(p.y) % uintptr_t(wb) != 0 || reinterpret_cast<uintptr_t>(p.in[0].ptr) % uintptr_t(wb) != 0) {
    return false;
  }
  for (int d = 0; d < last; ++d) {
    if ((p.y_stride[d] * eb) % wb != 0 || (p.in[0].stride[d] * eb) % wb != 0) return false;
  }
  MapParams w = p;
  const int64_t per = wb / eb;
  w.dims[last] = p.dims[last] / per;
  for (int d = 0; d < last; ++d) {
    w.y_stride[d] = p.y_stride[d] / per;
    w.in[0].stride[d] = p.in[0].stride[d] / per;
  }
  const int64_t* s[2] = {w.in[0].stride, w.y_stride};
  const int64_t count = count_of(w.rank, w.dims);
  const bool small = fits32(w.rank, w.dims, s, 2);
  with_rank(w.rank, [&](auto r) {
    if (small) copy_words_kernel<Word, int32_t, decltype(r)::value><<<grid_for(count), kThreads, 0, stream>>>(w);
    else copy_words_kernel<Word, int64_t, decltype(r)::value><<<grid_for(count), kThreads, 0, stream>>>(w);
  });
  HIOS_CUDA_CHECK(cudaGetLastError());
  return true;
}

bool copy_in_words(const MapParams& p, cudaStream_t stream) {
  if (p.fn != MapFn::Copy || p.round != 0 || p.gather_dim >= 0 || p.rank < 1) return false;
  const int last = p.rank - 1;
  if (p.y_stride[last] != 1 || p.in[0].stride[last] != 1) return false;
  return copy_as<uint4>(p, stream) || copy_as<uint2>(p, stream) || copy_as<uint32_t>(p, stream);
}

}  // namespace

void launch_map(const MapParams& p, cudaStream_t stream) {
  const int64_t* s[3] = {p.in[0].stride, p.y_stride, p.in[1].stride};
  const int64_t count = count_of(p.rank, p.dims);
  if (count == 0) return;
  if (copy_in_words(p, stream)) return;
  // A gather reads operand a at table values, which its walk over the output's dims does not
  // bound: 64-bit offsets then.
  const bool small = p.gather_dim < 0 && fits32(p.rank, p.dims, s, p.operands + 1);
  with_elem(p.elem, [&](auto t) {
    using T = decltype(t);
    with_rank(p.rank, [&](auto r) {
      if (small) map_kernel<T, int32_t, decltype(r)::value><<<grid_for(count), kThreads, 0, stream>>>(p);
      else map_kernel<T, int64_t, decltype(r)::value><<<grid_for(count), kThreads, 0, stream>>>(p);
    });
  });
  HIOS_CUDA_CHECK(cudaGetLastError());
}

void launch_reduce(const ReduceParams& p, cudaStream_t stream) {
  const int64_t outputs = count_of(p.rank, p.dims);
  if (outputs == 0) return;
  const int64_t* s[2] = {p.x_stride, p.y_stride};
  int64_t reach = 0;
  for (int d = 0; d < p.red_rank; ++d) reach += (p.red_dims[d] - 1) * p.red_stride[d];
  const bool small = fits32(p.rank, p.dims, s, 2) && reach < (int64_t(1) << 30) &&
                     count_of(p.red_rank, p.red_dims) < (int64_t(1) << 31);
  const int blocks = int(std::min<int64_t>((outputs + 7) / 8, 132 * 16));
  with_elem(p.elem, [&](auto t) {
    using T = decltype(t);
    if (small) reduce_kernel<T, int32_t><<<blocks, kThreads, 0, stream>>>(p);
    else reduce_kernel<T, int64_t><<<blocks, kThreads, 0, stream>>>(p);
  });
  HIOS_CUDA_CHECK(cudaGetLastError());
}

void launch_norm(const NormParams& p, cudaStream_t stream) {
  const int64_t rows = count_of(p.rank, p.dims);
  if (rows == 0) return;
  const int64_t* s[3] = {p.x_stride, p.y_stride, p.r_stride};
  int64_t reach = 0;
  for (int d = 0; d < p.red_rank; ++d) {
    reach += (p.red_dims[d] - 1) * std::max({p.red_x_stride[d], p.red_y_stride[d], p.red_r_stride[d]});
  }
  const bool small = fits32(p.rank, p.dims, s, 3) && reach < (int64_t(1) << 30) &&
                     count_of(p.red_rank, p.red_dims) < (int64_t(1) << 31);
  const int blocks = int(std::min<int64_t>((rows + 7) / 8, 132 * 16));
  const int64_t len = count_of(p.red_rank, p.red_dims);
  const bool contiguous_row = p.red_rank == 1 && p.red_x_stride[0] == 1 && p.red_y_stride[0] == 1 &&
                              (!p.r || p.red_r_stride[0] == 1);
  with_elem(p.elem, [&](auto t) {
    using T = decltype(t);
    if (small && contiguous_row && len <= 32 * 8) norm_rows_kernel<T, int32_t, 8><<<blocks, kThreads, 0, stream>>>(p);
    else if (small && contiguous_row && len <= 32 * 32) norm_rows_kernel<T, int32_t, 32><<<blocks, kThreads, 0, stream>>>(p);
    else if (small) norm_kernel<T, int32_t><<<blocks, kThreads, 0, stream>>>(p);
    else norm_kernel<T, int64_t><<<blocks, kThreads, 0, stream>>>(p);
  });
  HIOS_CUDA_CHECK(cudaGetLastError());
}

void launch_softmax_axis(const SoftmaxAxisParams& p, cudaStream_t stream) {
  const int64_t lines = count_of(p.rank, p.dims);
  if (lines == 0 || p.len == 0) return;
  const int64_t* s[2] = {p.x_stride, p.y_stride};
  const bool small = fits32(p.rank, p.dims, s, 2) && p.len * (p.x_axis_stride + p.y_axis_stride) < (int64_t(1) << 30);
  const int blocks = int(std::min<int64_t>((lines + 7) / 8, 132 * 16));
  with_elem(p.elem, [&](auto t) {
    using T = decltype(t);
    if (small) softmax_axis_kernel<T, int32_t><<<blocks, kThreads, 0, stream>>>(p);
    else softmax_axis_kernel<T, int64_t><<<blocks, kThreads, 0, stream>>>(p);
  });
  HIOS_CUDA_CHECK(cudaGetLastError());
}

bool resize_image_rows_fit(const ResizeParams& p) {
  return resize_image_fits(p) && p.taps[1] <= kResizeRowMaxTaps && p.taps[2] <= kResizeRowMaxTaps &&
         p.y_stride[3] == 1 && p.y_stride[2] == p.dims[3];
}

bool resize_image_fits(const ResizeParams& p) {
  const int64_t* sx[1] = {p.x_stride};
  const int64_t* sy[1] = {p.y_stride};
  return p.rank == 4 && p.taps[0] == 0 && p.taps[3] == 0 && p.taps[1] > 0 && p.taps[2] > 0 && p.x_dims[0] == p.dims[0] &&
         p.x_dims[3] == p.dims[3] && fits32(p.rank, p.x_dims, sx, 1) && fits32(p.rank, p.dims, sy, 1) &&
         p.x_stride[0] >= 0 && p.x_stride[1] >= 0 && p.x_stride[2] >= 0 && p.x_stride[3] >= 0 && p.y_stride[0] >= 0 &&
         p.y_stride[1] >= 0 && p.y_stride[2] >= 0 && p.y_stride[3] >= 0;
}

void launch_resize(const ResizeParams& p, cudaStream_t stream) {
  const int64_t count = count_of(p.rank, p.dims);
  if (count == 0) return;
  if (p.image_kernel == 2 && resize_image_rows_fit(p)) {
    const int64_t stretches = (p.dims[2] + kResizeRowPixels - 1) / kResizeRowPixels;
    const int blocks = int(std::min<int64_t>(p.dims[0] * p.dims[1] * stretches, int64_t(1) << 30));
    with_elem(p.elem, [&](auto t) {
      using T = decltype(t);
      resize_image_rows_kernel<T><<<blocks, kThreads, 0, stream>>>(p);
    });
    HIOS_CUDA_CHECK(cudaGetLastError());
    return;
  }
  if (p.image_kernel && resize_image_fits(p)) {
    with_elem(p.elem, [&](auto t) {
      using T = decltype(t);
      resize_image_kernel<T><<<grid_for(count), kThreads, 0, stream>>>(p);
    });
    HIOS_CUDA_CHECK(cudaGetLastError());
    return;
  }
  // x is walked over its own dims (the taps stay inside them), y over the output's.
  const int64_t* sx[1] = {p.x_stride};
  const int64_t* sy[1] = {p.y_stride};
  const bool small = fits32(p.rank, p.x_dims, sx, 1) && fits32(p.rank, p.dims, sy, 1);
  // Runs along the innermost dim where it is kept whole and contiguous (the planner orders the
  // dims by the output's strides, so a channels-last image ends in its channels).
  const int last = p.rank - 1;
  const bool runs = p.rank >= 2 && p.taps[last] == 0 && p.x_stride[last] == 1 && p.y_stride[last] == 1 &&
                    p.x_dims[last] == p.dims[last] && p.dims[last] >= 2;
  const int64_t run_count = runs ? count / p.dims[last] * ((p.dims[last] + kResizeRun - 1) / kResizeRun) : 0;
  with_elem(p.elem, [&](auto t) {
    using T = decltype(t);
    with_rank(p.rank, [&](auto r) {
      constexpr int R = decltype(r)::value;
      if (runs && small) resize_run_kernel<T, int32_t, R><<<grid_for(run_count), kThreads, 0, stream>>>(p);
      else if (runs) resize_run_kernel<T, int64_t, R><<<grid_for(run_count), kThreads, 0, stream>>>(p);
      else if (small) resize_kernel<T, int32_t, R><<<grid_for(count), kThreads, 0, stream>>>(p);
      else resize_kernel<T, int64_t, R><<<grid_for(count), kThreads, 0, stream>>>(p);
    });
  });
  HIOS_CUDA_CHECK(cudaGetLastError());
}

void launch_reshape(const ReshapeParams& p, cudaStream_t stream) {
  const int64_t count = count_of(p.y_rank, p.y_dims);
  if (count == 0) return;
  const int64_t* sx[1] = {p.x_stride};
  const int64_t* sy[1] = {p.y_stride};
  const bool small = fits32(p.x_rank, p.x_dims, sx, 1) && fits32(p.y_rank, p.y_dims, sy, 1);
  with_elem(p.elem, [&](auto t) {
    using T = decltype(t);
    if (small) reshape_kernel<T, int32_t><<<grid_for(count), kThreads, 0, stream>>>(p);
    else reshape_kernel<T, int64_t><<<grid_for(count), kThreads, 0, stream>>>(p);
  });
  HIOS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hios::cuda
