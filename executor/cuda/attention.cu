// The attention op (graph/ops.hpp, AttentionAttrs) as one kernel, flash-attention style: a block
// takes 64 query rows of one batch entry and walks the keys 64 at a time, its four warps each
// holding 16 query rows, so the scores never go through memory. Per key tile a warp computes
// its 16 x 64 scores with tensor cores (WMMA: TF32 for fp32 storage, the storage type for fp16
// and bf16, fp32 accumulation), scales and masks them, folds them into its rows' running
// maximum and sum (the online softmax), and adds P V into its accumulator rescaled by how much
// the maximum moved. The chain it replaces (tensor_ops.cpp, plan_attention) wrote and read the
// scores four times: 76 us per layer of ViT-B/16 at 384 x 384 (577 tokens, 12 heads) on an H200.
//
// Numerics follow the CPU reference (attention_kernel.cpp) where it matters: a row masked to
// -infinity throughout gives NaN (0 / 0), a NaN score makes its row NaN, and a key tile masked
// away entirely before any finite score adds nothing. P is rounded to the product's input type
// before P V, as every flash kernel does.
#include "executor/cuda/tensor_kernels.hpp"

#include <mma.h>

#include <cstdint>

#include "executor/cuda/check.hpp"
#include "executor/cuda/kernel_util.cuh"

namespace hios::cuda {

namespace {

using namespace nvcuda;

constexpr int kRows = 64;         // query rows per block
constexpr int kKeys = 64;         // keys per tile
constexpr int kWarps = kRows / 16;

// The WMMA shapes and element type of the products for storage type T: TF32 (k = 8) reads
// float tiles and rounds them as its fragments load; fp16 and bf16 (k = 16) their own type.
template <class T>
struct Mma;
template <>
struct Mma<float> {
  using In = float;
  using FragIn = wmma::precision::tf32;
  static constexpr int K = 8;
  __device__ static In from_float(float v) { return v; }
  template <class Frag>
  __device__ static void round(Frag& f) {
#pragma unroll
    for (int i = 0; i < f.num_elements; ++i) f.x[i] = wmma::__float_to_tf32(f.x[i]);
  }
};
template <>
struct Mma<__half> {
  using In = __half;
  using FragIn = __half;
  static constexpr int K = 16;
  __device__ static In from_float(float v) { return __float2half_rn(v); }
  template <class Frag>
  __device__ static void round(Frag&) {}
};
template <>
struct Mma<__nv_bfloat16> {
  using In = __nv_bfloat16;
  using FragIn = __nv_bfloat16;
  static constexpr int K = 16;
  __device__ static In from_float(float v) { return __float2bfloat16_rn(v); }
  template <class Frag>
  __device__ static void round(Frag&) {}
};

// Shared memory of one block, in bytes: Q, K and V tiles in the input type, and per warp its
// scores and accumulator (fp32), P (input type) and the product P V (fp32).
template <class T, int D>
constexpr size_t attention_smem_bytes() {
  return size_t(kRows + 2 * kKeys) * D * sizeof(T) +
         size_t(kWarps) * (16 * kKeys * 4 + 16 * kKeys * sizeof(T) + 2 * 16 * D * 4);
}

// Element (row, col) of a [rows, D] operand of batch entry b, or 0 past its rows.
template <class T>
__device__ float operand_at(const T* base, int64_t row_stride, int64_t rows, int64_t row, int col) {
  return row < rows ? ld(base + row * row_stride + col) : 0.f;
}

template <class T, int D>
__global__ void __launch_bounds__(kWarps * 32) flash_attention_kernel(const __grid_constant__ FlashAttentionParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // tensor-core tiles of these types need sm_80 (launch_flash_attention refuses)
#else
  using M = Mma<T>;
  using In = typename M::In;
  extern __shared__ __align__(128) unsigned char smem[];
  In* q_tile = reinterpret_cast<In*>(smem);
  In* k_tile = q_tile + kRows * D;
  In* v_tile = k_tile + kKeys * D;
  unsigned char* per_warp = reinterpret_cast<unsigned char*>(v_tile + kKeys * D);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t warp_bytes = 16 * kKeys * 4 + 16 * kKeys * sizeof(In) + 2 * 16 * D * 4;
  float* s_w = reinterpret_cast<float*>(per_warp + warp * warp_bytes);  // scores [16][kKeys]
  In* p_w = reinterpret_cast<In*>(s_w + 16 * kKeys);                   // P [16][kKeys]
  float* o_w = reinterpret_cast<float*>(p_w + 16 * kKeys);              // accumulator [16][D]
  float* t_w = o_w + 16 * D;                                            // P V of one tile [16][D]

  const int64_t b = blockIdx.y;
  const int64_t i0 = int64_t(blockIdx.x) * kRows;
  const T* q = static_cast<const T*>(p.q) + b * p.q_batch;
  const T* k = static_cast<const T*>(p.k) + b * p.k_batch;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch;
  T* y = static_cast<T*>(p.y) + b * p.y_batch;
  // The mask's offset for this batch entry: its leading coordinates, innermost first.
  const T* mask = nullptr;
  if (p.mask) {
    int64_t at = 0, rest = b;
    for (int d = p.lead_rank - 1; d >= 0; --d) {
      at += (rest % p.lead_dims[d]) * p.mask_lead_stride[d];
      rest /= p.lead_dims[d];
    }
    mask = static_cast<const T*>(p.mask) + at;
  }

  for (int e = threadIdx.x; e < kRows * D; e += blockDim.x) {
    q_tile[e] = M::from_float(operand_at(q, p.q_row, p.sq, i0 + e / D, e % D));
  }
  for (int e = lane; e < 16 * D; e += 32) o_w[e] = 0.f;
  // Lane pair (2r, 2r + 1) keeps row r's running maximum and sum; each takes half its columns.
  const int r = lane / 2, half = lane % 2;
  const int64_t i = i0 + warp * 16 + r;
  float row_max = -INFINITY, row_sum = 0.f;

  // Causal: keys past the block's last query are masked for every row of it.
  const int64_t key_end = p.causal ? min(p.sk, i0 + kRows) : p.sk;
  for (int64_t j0 = 0; j0 < key_end; j0 += kKeys) {
    __syncthreads();  // the previous tile's readers are done
    for (int e = threadIdx.x; e < kKeys * D; e += blockDim.x) {
      k_tile[e] = M::from_float(operand_at(k, p.k_row, p.sk, j0 + e / D, e % D));
      v_tile[e] = M::from_float(operand_at(v, p.v_row, p.sk, j0 + e / D, e % D));
    }
    __syncthreads();
    // Scores: this warp's 16 query rows against the tile's keys, 16 keys per fragment.
#pragma unroll
    for (int c = 0; c < kKeys / 16; ++c) {
      wmma::fragment<wmma::accumulator, 16, 16, M::K, float> acc;
      wmma::fill_fragment(acc, 0.f);
#pragma unroll
      for (int kk = 0; kk < D; kk += M::K) {
        wmma::fragment<wmma::matrix_a, 16, 16, M::K, typename M::FragIn, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, M::K, typename M::FragIn, wmma::col_major> bt;
        wmma::load_matrix_sync(a, q_tile + warp * 16 * D + kk, D);
        wmma::load_matrix_sync(bt, k_tile + c * 16 * D + kk, D);  // K^T: column j of K^T is row j of K
        M::round(a);
        M::round(bt);
        wmma::mma_sync(acc, a, bt, acc);
      }
      wmma::store_matrix_sync(s_w + c * 16, acc, kKeys, wmma::mem_row_major);
    }
    __syncwarp();
    // The online softmax over this tile, row r, columns half * 32 ..
    float s[kKeys / 2];
    float tile_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < kKeys / 2; ++c) {
      const int col = half * (kKeys / 2) + c;
      const int64_t j = j0 + col;
      float x = s_w[r * kKeys + col] * p.scale;
      if (mask && i < p.sq && j < p.sk) x += ld(mask + i * p.mask_row + j * p.mask_col);
      if (j >= p.sk || (p.causal && j > i)) x = -INFINITY;
      s[c] = x;
      tile_max = fmaxf(tile_max, x);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float new_max = fmaxf(row_max, tile_max);
    // Nothing finite yet (every score so far -infinity): this tile adds nothing, and the
    // running values stay as they are.
    const bool none = new_max == -INFINITY;
    const float rescale = none ? 1.f : __expf(row_max - new_max);
    float part = 0.f;
#pragma unroll
    for (int c = 0; c < kKeys / 2; ++c) {
      const float e = none ? 0.f : __expf(s[c] - new_max);
      // A NaN score: its row's sum becomes NaN, as in the reference.
      const float pe = isnan(s[c]) ? NAN : e;
      part += pe;
      p_w[r * kKeys + half * (kKeys / 2) + c] = M::from_float(pe);
    }
    part += __shfl_xor_sync(0xffffffffu, part, 1);
    row_sum = row_sum * rescale + part;
    row_max = none ? row_max : new_max;
    __syncwarp();
    // P V of this tile into t_w, then the accumulator rescaled and added to.
#pragma unroll
    for (int c = 0; c < D / 16; ++c) {
      wmma::fragment<wmma::accumulator, 16, 16, M::K, float> acc;
      wmma::fill_fragment(acc, 0.f);
#pragma unroll
      for (int kk = 0; kk < kKeys; kk += M::K) {
        wmma::fragment<wmma::matrix_a, 16, 16, M::K, typename M::FragIn, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, M::K, typename M::FragIn, wmma::row_major> bv;
        wmma::load_matrix_sync(a, p_w + kk, kKeys);
        wmma::load_matrix_sync(bv, v_tile + kk * D + c * 16, D);
        M::round(a);
        M::round(bv);
        wmma::mma_sync(acc, a, bv, acc);
      }
      wmma::store_matrix_sync(t_w + c * 16, acc, D, wmma::mem_row_major);
    }
    __syncwarp();
#pragma unroll
    for (int c = 0; c < D / 2; ++c) {
      const int col = half * (D / 2) + c;
      o_w[r * D + col] = o_w[r * D + col] * rescale + t_w[r * D + col];
    }
    __syncwarp();
  }
  if (i < p.sq) {
#pragma unroll
    for (int c = 0; c < D / 2; ++c) {
      const int col = half * (D / 2) + c;
      st(y + i * p.y_row + col, o_w[r * D + col] / row_sum);
    }
  }
#endif
}

template <class T, int D>
void launch_as(const FlashAttentionParams& p, cudaStream_t stream) {
  constexpr size_t bytes = attention_smem_bytes<T, D>();
  const dim3 grid(unsigned((p.sq + kRows - 1) / kRows), unsigned(p.batch));
  flash_attention_kernel<T, D><<<grid, kWarps * 32, bytes, stream>>>(p);
}

template <class T, int D>
void allow_smem() {
  constexpr size_t bytes = attention_smem_bytes<T, D>();
  static_assert(bytes <= 200 * 1024, "attention tiles past the shared memory of a multiprocessor");
  HIOS_CUDA_CHECK(cudaFuncSetAttribute(flash_attention_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

}  // namespace

void prepare_flash_attention(Elem elem, int64_t d) {
  with_elem(elem, [&](auto t) {
    using T = decltype(t);
    if (d == 64) allow_smem<T, 64>();
    else if (d == 128) allow_smem<T, 128>();
  });
}

bool flash_attention_fits(const FlashAttentionParams& p, int compute_capability_major) {
  return compute_capability_major >= 8 && (p.d == 64 || p.d == 128) && p.dv == p.d && p.batch >= 1 &&
         p.batch <= 65535 && p.sq >= 1 && p.sk >= 1 && (p.sq + kRows - 1) / kRows <= (int64_t(1) << 31) - 1 &&
         p.lead_rank <= kMaxTensorDims;
}

void launch_flash_attention(const FlashAttentionParams& p, cudaStream_t stream) {
  HIOS_CHECK(p.d == 64 || p.d == 128, "flash attention: head size %lld (64 or 128)", (long long)p.d);
  with_elem(p.elem, [&](auto t) {
    using T = decltype(t);
    if (p.d == 64) launch_as<T, 64>(p, stream);
    else launch_as<T, 128>(p, stream);
  });
  HIOS_CUDA_CHECK_LAUNCH();
}

}  // namespace hios::cuda
