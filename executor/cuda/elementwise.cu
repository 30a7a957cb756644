// Element-wise kernels: bias and fused activation, softmax, storage-type casts, and the
// linear layer of a classifier head.
#include "executor/cuda/kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "executor/cuda/check.hpp"
#include "executor/cuda/kernel_util.cuh"

namespace hios::cuda {

namespace {

// V elements per access (launch_bias_act picks 8 in 16-bit storage, 4 in fp32, where the
// tensor's size, the pointers and the bias's period allow): the V elements of one access share
// a bias row (NCHW: one plane) or take V consecutive channels (NHWC).
template <class T, int V>
__global__ void bias_act_kernel(const T* x, T* y, const T* bias, const T* z, int act, int64_t c, int64_t hw,
                                int nhwc, int64_t total) {
  const int64_t accesses = total / V;
  for (int64_t a = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; a < accesses; a += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = a * V;
    float v[V];
    ldv<V>(x + i, v);
    if (bias) {
      if (nhwc) {
        const int64_t ch = i % c;
#pragma unroll
        for (int k = 0; k < V; ++k) v[k] += ld(bias + ch + k);
      } else {
        const float b = ld(bias + (i / hw) % c);
#pragma unroll
        for (int k = 0; k < V; ++k) v[k] += b;
      }
    }
    if (z) {  // a residual convolution's skip connection, added before the activation
      float r[V];
      ldv<V>(z + i, r);
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] += r[k];
    }
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = activate(v[k], act);
    stv<V>(y + i, v);
  }
}

// A warp per pixel: the channel maximum, then the sum of exponentials, then the outputs.
template <class T>
__global__ void softmax_kernel(const T* x, T* y, int64_t n, int64_t c, int64_t hw, int nhwc) {
  const int lane = threadIdx.x % 32;
  const int64_t pix = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (pix >= n * hw) return;
  const int64_t b = pix / hw, q = pix - b * hw;
  // Element k of this pixel: channel-strided in NCHW, contiguous in NHWC.
  const int64_t base = nhwc ? pix * c : b * c * hw + q, step = nhwc ? 1 : hw;
  float m = -INFINITY;
  for (int64_t k = lane; k < c; k += 32) m = fmaxf(m, ld(x + base + k * step));
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  float sum = 0.f;
  for (int64_t k = lane; k < c; k += 32) sum += expf(ld(x + base + k * step) - m);
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  for (int64_t k = lane; k < c; k += 32) st(y + base + k * step, expf(ld(x + base + k * step) - m) / sum);
}

template <class S, class D>
__global__ void cast_kernel(const S* src, D* dst, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    st(dst + i, ld(src + i));
  }
}

// One warp per output feature; lanes stride over the input features, then reduce.
template <class T>
__global__ void linear_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                              T* __restrict__ y, int64_t n, int64_t in, int64_t out, int vec4) {
  const int lane = threadIdx.x % 32;
  const int64_t o = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (o >= out) return;
  const T* wr = w + o * in;
  for (int64_t k = 0; k < n; ++k) {
    const T* xr = x + k * in;
    float acc = 0.f;
    if (vec4) {
      for (int64_t i = lane; i < in / 4; i += 32) {
        float a[4], v[4];
        Io<T>::ld4(wr + 4 * i, a);
        Io<T>::ld4(xr + 4 * i, v);
#pragma unroll
        for (int j = 0; j < 4; ++j) acc = fmaf(a[j], v[j], acc);
      }
    } else {
      for (int64_t i = lane; i < in; i += 32) acc = fmaf(ld(wr + i), ld(xr + i), acc);
    }
    for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane == 0) st(y + k * out + o, acc + ld_or0(b, o));
  }
}

}  // namespace

void launch_bias_act(const void* x, void* y, const void* bias, int act, int64_t n, int64_t c, int64_t hw, int nhwc,
                     Elem elem, cudaStream_t stream, const void* z) {
  const int64_t total = n * c * hw;
  if (total <= 0 || (!bias && !z && act == 0 && x == y)) return;
  with_elem(elem, [&](auto tag) {
    using T = decltype(tag);
    // The widest access whose V elements stay within one bias period and whose addresses align.
    auto fits = [&](int64_t v) {
      const uintptr_t align = uintptr_t(v) * sizeof(T);
      return total % v == 0 && reinterpret_cast<uintptr_t>(x) % align == 0 &&
             reinterpret_cast<uintptr_t>(y) % align == 0 && reinterpret_cast<uintptr_t>(z) % align == 0 &&
             (!bias || (nhwc ? c : hw) % v == 0);
    };
    auto go = [&](auto kernel, int64_t v) {
      kernel<<<grid_for(total / v), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                           static_cast<const T*>(bias), static_cast<const T*>(z), act,
                                                           c, hw, nhwc, total);
    };
    if constexpr (sizeof(T) == 2) {
      if (fits(8)) return go(bias_act_kernel<T, 8>, 8);
    }
    if (fits(4)) return go(bias_act_kernel<T, 4>, 4);
    go(bias_act_kernel<T, 1>, 1);
  });
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_softmax(const void* x, void* y, int64_t n, int64_t c, int64_t hw, int nhwc, Elem elem,
                    cudaStream_t stream) {
  const int64_t pixels = n * hw;
  if (pixels <= 0 || c <= 0) return;
  const int warps = kThreads / 32;
  with_elem(elem, [&](auto tag) {
    using T = decltype(tag);
    softmax_kernel<T><<<unsigned((pixels + warps - 1) / warps), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), n, c, hw, nhwc);
  });
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_cast(const void* src, Elem src_elem, void* dst, Elem dst_elem, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  with_elem(src_elem, [&](auto s_tag) {
    using S = decltype(s_tag);
    with_elem(dst_elem, [&](auto d_tag) {
      using D = decltype(d_tag);
      cast_kernel<S, D><<<grid_for(count), kThreads, 0, stream>>>(static_cast<const S*>(src), static_cast<D*>(dst), count);
    });
  });
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_linear(const void* x, const void* w, const void* b, void* y, int64_t n, int64_t in, int64_t out, Elem elem,
                   cudaStream_t stream) {
  const int warps = 8;
  const int vec4 = in % 4 == 0 && vec4_aligned(x, elem) && vec4_aligned(w, elem);
  with_elem(elem, [&](auto tag) {
    using T = decltype(tag);
    linear_kernel<T><<<unsigned((out + warps - 1) / warps), warps * 32, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b), static_cast<T*>(y), n, in, out,
        vec4);
  });
  HIOS_CUDA_CHECK_LAUNCH();
}

}  // namespace hios::cuda
