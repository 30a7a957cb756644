// Matrix products and attention on the CUDA backend: matmul as one strided batched cuBLAS
// product (a bias per output feature in cuBLASLt's epilogue), the linear layers' products, and
// attention as one fused kernel or the chain it replaces (docs/cuda-kernels.md, "Matrix
// products and attention").
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include <cublasLt.h>
#include <cublas_v2.h>

#include "executor/cuda/check.hpp"
#include "executor/cuda/cublas_lazy.hpp"
#include "executor/cuda/engine.hpp"
#include "executor/cuda/tensor_kernels.hpp"
#include "executor/cuda/tensor_plan.hpp"
#include "graph/elements.hpp"
#include "graph/error.hpp"
#include "graph/ops_tensor.hpp"

namespace hios::cuda {

namespace tensor_plan {

// A row-major copy of v in the stream's scratch where v is not row-major already (a channels-
// last image, a slice): cuBLAS reads matrices with one leading dimension.
View row_major_of(PlanCtx& c, const View& v) {
  if (row_major(v)) return v;
  View s = c.scratch(v.shape);
  s.layout = Layout::Nchw;
  s.pixel_stride = 0;
  s.batch_stride = s.item();
  const Walk wv = walk_of(v), ws = walk_of(s);
  plan_copy(c, v.ptr, wv.stride, s.ptr, ws.stride, wv.rank, wv.dims, v.elem, 0);
  return s;
}

cudaDataType_t cublas_type(Elem e) { return e == Elem::F16 ? CUDA_R_16F : e == Elem::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// A row-major batched product Y = alpha * op(A) op(B) + beta * Y, `count` times, as one strided
// batched cuBLAS call. cuBLAS is column-major: a row-major M x N product Y = A B is the
// column-major N x M product Y^T = B^T A^T, so B goes first. A stride of 0 reuses one matrix.
struct Gemm {
  const void *a = nullptr, *b = nullptr;
  void* y = nullptr;
  int64_t m = 0, n = 0, k = 0, count = 1;
  bool trans_a = false, trans_b = false;
  long long stride_a = 0, stride_b = 0;  // elements; Y's is m * n
  float alpha = 1, beta = 0;
  Elem elem = Elem::F32;
};
void emit_gemm(PlanCtx& c, const Gemm& g) {
  HIOS_CHECK(g.m < (int64_t(1) << 31) && g.n < (int64_t(1) << 31) && g.k < (int64_t(1) << 31) &&
                 g.count < (int64_t(1) << 31),
             "node '%s': a matrix product of %lld x %lld by %lld x %lld is past cuBLAS's int sizes", c.node_name.c_str(),
             (long long)g.m, (long long)g.k, (long long)g.k, (long long)g.n);
  if (c.dry) return;
  c.res.cublas();  // made now, not inside a capture
  const cublasComputeType_t compute = c.eng.math() == MathMode::Tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t type = cublas_type(g.elem);
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ld_b = int(g.trans_b ? g.k : g.n), ld_a = int(g.trans_a ? g.m : g.k), ld_y = int(g.n);
  const long long stride_y = g.m * g.n, stride_a = g.stride_a, stride_b = g.stride_b;
  const int M = int(g.m), N = int(g.n), K = int(g.k), count = int(g.count);
  const float alpha = g.alpha, beta = g.beta;
  const void *pa = g.a, *pb = g.b;
  void* py = g.y;
  c.emit([=](StreamResources& r) {
    HIOS_CUBLAS_CHECK(cublas_api().gemm_strided_batched(r.cublas(), op_b, op_a, N, M, K, &alpha, pb, type, ld_b, stride_b,
                                                        pa, type, ld_a, stride_a, &beta, py, type, ld_y, stride_y, count,
                                                        compute, CUBLAS_GEMM_DEFAULT));
  });
}

// cuBLASLt's descriptors of one product, made while planning and kept by its launch.
struct LtProduct {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, y = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  LtProduct() = default;
  LtProduct(const LtProduct&) = delete;
  LtProduct& operator=(const LtProduct&) = delete;
  ~LtProduct() {
    const CublasLtApi& lt = cublas_lt_api();
    for (cublasLtMatrixLayout_t l : {a, b, y}) {
      if (l) (void)lt.layout_destroy(l);
    }
    if (desc) (void)lt.desc_destroy(desc);
  }
};

// One product (g.count 1) with `bias` (n elements, y's type) added to every row of Y in
// cuBLASLt's epilogue: Y is written once, where broadcasting the bias into Y first and adding
// it through beta writes Y twice and reads it once more. False when cuBLASLt offers no
// algorithm for it (nothing is emitted then), and in the dry pass.
bool emit_gemm_bias(PlanCtx& c, const Gemm& g, const void* bias) {
  if (c.dry || g.count != 1 || g.beta != 0) return false;
  if (g.m >= (int64_t(1) << 31) || g.n >= (int64_t(1) << 31) || g.k >= (int64_t(1) << 31)) return false;
  const CublasLtApi& lt = cublas_lt_api();
  const cublasLtHandle_t handle = c.res.cublas_lt();
  auto p = std::make_shared<LtProduct>();
  const cublasComputeType_t compute = c.eng.math() == MathMode::Tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t type = cublas_type(g.elem);
  // Column-major, as emit_gemm: Y^T (n x m) = op(B)^T (n x k) op(A)^T (k x m).
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  HIOS_CUBLAS_CHECK(lt.desc_create(&p->desc, compute, CUDA_R_32F));
  HIOS_CUBLAS_CHECK(lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
  HIOS_CUBLAS_CHECK(lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));
  HIOS_CUBLAS_CHECK(lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  HIOS_CUBLAS_CHECK(lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  const uint64_t m = uint64_t(g.m), n = uint64_t(g.n), k = uint64_t(g.k);
  HIOS_CUBLAS_CHECK(lt.layout_create(&p->a, type, g.trans_b ? k : n, g.trans_b ? n : k, int64_t(g.trans_b ? k : n)));
  HIOS_CUBLAS_CHECK(lt.layout_create(&p->b, type, g.trans_a ? m : k, g.trans_a ? k : m, int64_t(g.trans_a ? m : k)));
  HIOS_CUBLAS_CHECK(lt.layout_create(&p->y, type, n, m, int64_t(n)));
  cublasLtMatmulPreference_t pref = nullptr;
  HIOS_CUBLAS_CHECK(lt.preference_create(&pref));
  const size_t most = c.res.cublas_workspace_bytes();
  cublasLtMatmulHeuristicResult_t found{};
  int count = 0;
  cublasStatus_t s = lt.preference_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &most, sizeof most);
  // The heuristics assume 256-byte aligned matrices unless told: views into scratch and
  // slices are aligned less.
  auto aligned = [](const void* ptr) {
    uint32_t a = 256;
    while (a > 1 && reinterpret_cast<uintptr_t>(ptr) % a != 0) a /= 2;
    return a;
  };
  const uint32_t align[4] = {aligned(g.b), aligned(g.a), aligned(g.y), aligned(g.y)};
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; ++i) s = lt.preference_set(pref, which[i], &align[i], sizeof align[i]);
  if (s == CUBLAS_STATUS_SUCCESS) s = lt.heuristic(handle, p->desc, p->a, p->b, p->y, p->y, pref, 1, &found, &count);
  (void)lt.preference_destroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || count < 1 || found.state != CUBLAS_STATUS_SUCCESS || found.workspaceSize > most) {
    return false;
  }
  p->algo = found.algo;
  p->workspace = found.workspaceSize;
  const float alpha = g.alpha, beta = 0;
  const void *pa = g.a, *pb = g.b;
  void* py = g.y;
  c.emit([p, handle, alpha, beta, pa, pb, py](StreamResources& r) {
    HIOS_CUBLAS_CHECK(cublas_lt_api().matmul(handle, p->desc, &alpha, pb, p->a, pa, p->b, &beta, py, p->y, py, p->y,
                                             &p->algo, r.cublas_workspace(), r.cublas_workspace_bytes(), r.stream()));
  });
  return true;
}

// Whether addend C (a matmul's third operand, times beta) is one bias per column of an m x n
// product: its last dim n, every other 1, its elements consecutive.
bool bias_per_column(const View& addend, int64_t n, double beta) {
  if (beta != 1 || addend.shape.numel() != n || addend.shape.rank < 1 || addend.shape.dim(addend.shape.rank - 1) != n) {
    return false;
  }
  return row_major(addend);
}

// Y = A B of `count` dense m x k and k x n matrices into m x n ones, alpha 1, nothing added.
Gemm dense_gemm(const void* a, const void* b, void* y, int64_t m, int64_t n, int64_t k, int64_t count, Elem elem) {
  Gemm g;
  g.a = a;
  g.b = b;
  g.y = y;
  g.m = m;
  g.n = n;
  g.k = k;
  g.count = count;
  g.stride_a = m * k;
  g.stride_b = k * n;
  g.elem = elem;
  return g;
}

// Row-major scratch of shape s, for cuBLAS to write.
View row_major_scratch(PlanCtx& c, const Shape& s) {
  View v = c.scratch(s);
  v.layout = Layout::Nchw;
  v.pixel_stride = 0;
  return v;
}
// Where a product into y is written: y itself when row-major, else scratch that
// copy_product_into then copies into y.
View product_target(PlanCtx& c, const View& y) { return row_major(y) ? y : row_major_scratch(c, y.shape); }
void copy_product_into(PlanCtx& c, const View& out, const View& y) {
  if (row_major(y)) return;
  const Walk wo = walk_of(out), wy = walk_of(y);
  plan_copy(c, out.ptr, wo.stride, y.ptr, wy.stride, wy.rank, wy.dims, y.elem, 0);
}

// NumPy matmul (and Gemm's transposes, alpha and beta times an addend) as one batched product
// (emit_gemm). Each operand's batch is the result's or one matrix for all (stride 0); other
// broadcasts are refused.
void plan_matmul(PlanCtx& c, const Op& op, const std::vector<View>& in, const View& y) {
  const MatMulAttrs& a = op.as<MatMulAttrs>();
  const std::vector<View> raw = float_operands(c, in);
  const View A = row_major_of(c, raw.at(0)), B = row_major_of(c, raw.at(1));
  const Shape sa = A.shape.rank == 1 ? Shape::of({1, A.shape.dim(0)}) : A.shape;
  const Shape sb = B.shape.rank == 1 ? Shape::of({B.shape.dim(0), 1}) : B.shape;
  const int64_t m = a.trans_a ? sa.dim(sa.rank - 1) : sa.dim(sa.rank - 2);
  const int64_t k = a.trans_a ? sa.dim(sa.rank - 2) : sa.dim(sa.rank - 1);
  const int64_t n = a.trans_b ? sb.dim(sb.rank - 2) : sb.dim(sb.rank - 1);
  const int64_t batch = y.shape.numel() / std::max<int64_t>(m * n, 1);
  auto batch_of = [](const Shape& s) { return s.numel() / std::max<int64_t>(s.dim(s.rank - 2) * s.dim(s.rank - 1), 1); };
  const int64_t ba = batch_of(sa), bb = batch_of(sb);
  if ((ba != 1 && ba != batch) || (bb != 1 && bb != batch)) {
    refuse_general(c, "a matmul whose operands' batch dims broadcast partly");
  }
  // The result where cuBLAS can write it: y, or row-major scratch copied into y afterwards.
  const View out = product_target(c, y);
  Gemm g = dense_gemm(A.ptr, B.ptr, out.ptr, m, n, k, batch, y.elem);
  g.trans_a = a.trans_a;
  g.trans_b = a.trans_b;
  if (ba == 1) g.stride_a = 0;
  if (bb == 1) g.stride_b = 0;
  if (bb == 1 && ba == batch && batch > 1 && !a.trans_a) {
    // Every A matrix times the one B (a projection of each token by a weight): one product of
    // batch x m rows. A batch of one-row products runs as matrix-vector kernels, tens of times
    // slower at a transformer's sizes.
    g.m *= batch;
    g.count = 1;
  }
  g.alpha = float(a.alpha);
  if (raw.size() > 2) {
    // A bias per output feature (a linear layer's) in cuBLASLt's epilogue; any other addend is
    // broadcast into the result first, then added by cuBLAS's beta.
    if (bias_per_column(raw[2], n, a.beta) && emit_gemm_bias(c, g, raw[2].ptr)) {
      copy_product_into(c, out, y);
      return;
    }
    plan_pointwise(c, {raw[2]}, out, MapFn::Copy, 0, 0, 0);
    g.beta = float(a.beta);
  }
  emit_gemm(c, g);
  copy_product_into(c, out, y);
}

// The fused kernel's arguments for attention over row-major Q, K, V into row-major `out`, the
// mask (when given) broadcast to the scores' dims.
FlashAttentionParams flash_params(const AttentionAttrs& a, const View& Q, const View& K, const View& V, const View* mask,
                                  const View& out, const Shape& score_shape) {
  const int r = Q.shape.rank;
  FlashAttentionParams f;
  f.elem = out.elem;
  f.q = Q.ptr;
  f.k = K.ptr;
  f.v = V.ptr;
  f.y = out.ptr;
  f.sq = Q.shape.dim(r - 2);
  f.sk = K.shape.dim(r - 2);
  f.d = Q.shape.dim(r - 1);
  f.dv = V.shape.dim(r - 1);
  f.batch = Q.shape.numel() / (f.sq * f.d);
  f.q_row = f.d;
  f.q_batch = f.sq * f.d;
  f.k_row = f.d;
  f.k_batch = f.sk * f.d;
  f.v_row = f.dv;
  f.v_batch = f.sk * f.dv;
  f.y_row = f.dv;
  f.y_batch = f.sq * f.dv;
  f.lead_rank = r - 2;
  for (int d = 0; d < r - 2; ++d) f.lead_dims[d] = score_shape.dim(d);
  if (mask) {
    int64_t dims[kMaxTensorDims] = {}, stride[kMaxTensorDims] = {};
    for (int d = 0; d < r; ++d) dims[d] = score_shape.dim(d);
    broadcast_strides(*mask, r, dims, stride);
    f.mask = mask->ptr;
    for (int d = 0; d < r - 2; ++d) f.mask_lead_stride[d] = stride[d];
    f.mask_row = stride[r - 2];
    f.mask_col = stride[r - 1];
  }
  f.scale = float(a.scale);
  f.causal = a.causal ? 1 : 0;
  return f;
}

// Where the fused kernel applies (not in strict fp32, whose products must not be TF32), the
// launches emitted since `first` (the other way of computing the node) are timed against it
// once per `form` and shape, and replaced by it when it is faster. True when it replaced them.
int compute_capability_major(int device);
bool fused_attention_instead(PlanCtx& c, size_t first, const FlashAttentionParams& f, const char* form,
                             const AttentionAttrs& a) {
  if (c.dry || c.eng.math() == MathMode::Fp32 || !flash_attention_fits(f, compute_capability_major(c.eng.device()))) {
    return false;
  }
  prepare_flash_attention(f.elem, f.d);
  const std::string key = strprintf("%s %d %lld %lld %lld %lld %lld mask %d causal %d math %d", form, int(f.elem),
                                    (long long)f.batch, (long long)f.sq, (long long)f.sk, (long long)f.d, (long long)f.dv,
                                    int(a.mask), int(a.causal), int(c.eng.math()));
  std::vector<Launch>& launches = *c.launches;
  const cudaStream_t st = c.res.stream();
  const bool fused = measured_once(c.eng.device(), key, [&] {
    const double other = time_on_stream(st, [&] {
      for (size_t i = first; i < launches.size(); ++i) launches[i](c.res);
    });
    return time_on_stream(st, [&] { launch_flash_attention(f, st); }) < other;
  });
  if (!fused) return false;
  launches.resize(first);
  c.emit([f](StreamResources& r) { launch_flash_attention(f, r.stream()); });
  return true;
}

int compute_capability_major(int device) {
  int major = 0;
  HIOS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major;
}

// Attention (graph/ops.hpp, AttentionAttrs) as one fused kernel (executor/cuda/attention.cu)
// where it applies and measured faster, once per shape; otherwise as the chain it replaces, in
// one node: the scores scale * Q K^T by one batched product into row-major scratch, the mask and
// the causal mask (a table of 0 and -infinity, made once per shape) added in place, the softmax
// over the keys in place (a warp reads its line before it writes it), then the product with V.
// Strict fp32 (--math fp32) keeps the chain: the fused kernel's products are TF32.
void plan_token_major_attention(PlanCtx& c, const Op& op, const std::vector<View>& in, const View& y);
void plan_attention(PlanCtx& c, const Op& op, const std::vector<View>& in, const View& y) {
  const AttentionAttrs& a = op.as<AttentionAttrs>();
  if (a.token_major) return plan_token_major_attention(c, op, in, y);
  const std::vector<View> raw = float_operands(c, in);
  const View Q = row_major_of(c, raw.at(0)), K = row_major_of(c, raw.at(1)), V = row_major_of(c, raw.at(2));
  const int r = Q.shape.rank;
  const int64_t sq = Q.shape.dim(r - 2), sk = K.shape.dim(r - 2), d = Q.shape.dim(r - 1), dv = V.shape.dim(r - 1);
  const int64_t batch = Q.shape.numel() / (sq * d);
  Shape score_shape = Q.shape;
  score_shape.dim(r - 1) = sk;
  const View scores = row_major_scratch(c, score_shape);
  const View out = product_target(c, y);
  const size_t chain_first = c.dry ? 0 : c.launches->size();
  Gemm qk = dense_gemm(Q.ptr, K.ptr, scores.ptr, sq, sk, d, batch, y.elem);
  qk.trans_b = true;
  qk.alpha = float(a.scale);
  emit_gemm(c, qk);
  const int add = int(BinaryFn::Add);
  if (a.mask) plan_pointwise(c, {scores, raw.at(3)}, scores, MapFn::Binary, add, 0, 0);
  if (a.causal) {
    const Shape tri = Shape::of({sq, sk});
    const size_t bytes = size_t(sq * sk) * elem_bytes(y.elem);
    void* table = nullptr;
    if (!c.dry) {
      std::vector<uint8_t> host(bytes);
      for (int64_t i = 0; i < sq; ++i) {
        for (int64_t j = 0; j < sk; ++j) {
          const float v = j > i ? -INFINITY : 0.0f;
          const size_t at = size_t(i * sk + j);
          if (y.elem == Elem::F32) {
            std::memcpy(host.data() + at * 4, &v, 4);
          } else {
            const uint16_t h = y.elem == Elem::F16 ? float_to_half(v) : float_to_bfloat16(v);
            std::memcpy(host.data() + at * 2, &h, 2);
          }
        }
      }
      table = const_cast<void*>(c.eng.table(strprintf("causal %lldx%lld %d", (long long)sq, (long long)sk, int(y.elem)),
                                            host.data(), bytes));
    }
    plan_pointwise(c, {scores, whole_view(table, tri, Layout::Nchw, y.elem)}, scores, MapFn::Binary, add, 0, 0);
  }
  Op softmax;
  softmax.kind = OpKind::Softmax;
  softmax.attrs = SoftmaxAttrs{SoftmaxFn::Softmax, r - 1};
  plan_softmax_axis(c, softmax, scores, scores);
  emit_gemm(c, dense_gemm(scores.ptr, V.ptr, out.ptr, sq, dv, sk, batch, y.elem));
  if (!c.dry) {
    const FlashAttentionParams f = flash_params(a, Q, K, V, a.mask ? &raw.at(3) : nullptr, out, score_shape);
    (void)fused_attention_instead(c, chain_first, f, "attention", a);
  }
  copy_product_into(c, out, y);
}

// Token-major attention (Q, K, V, Y [..., S, H, D]): its operands copied head-major, the
// attention above, the result copied back; or, where every leading dim is 1 and the fused
// kernel applies, that kernel reading each head's rows where they lie (rows H * D elements
// apart, heads D apart), with no copy at all. The faster of the two, timed once per shape.
void plan_token_major_attention(PlanCtx& c, const Op& op, const std::vector<View>& in, const View& y) {
  AttentionAttrs a = op.as<AttentionAttrs>();
  const std::vector<View> raw = float_operands(c, in);
  const View Q = row_major_of(c, raw.at(0)), K = row_major_of(c, raw.at(1)), V = row_major_of(c, raw.at(2));
  const int r = Q.shape.rank;
  auto head_major = [](Shape s) {
    std::swap(s.dim(s.rank - 3), s.dim(s.rank - 2));
    return s;
  };
  // Copies between a row-major token-major view and a row-major head-major one (either way).
  auto swap_copy = [&](const View& from, const View& to) {
    const Walk wf = walk_of(from), wt = walk_of(to);
    int64_t src[kMaxTensorDims] = {};
    std::copy(wf.stride, wf.stride + r, src);
    std::swap(src[r - 3], src[r - 2]);
    plan_copy(c, from.ptr, src, to.ptr, wt.stride, r, wt.dims, y.elem, 0);
  };
  const size_t first = c.dry ? 0 : c.launches->size();
  const View Qh = row_major_scratch(c, head_major(Q.shape)), Kh = row_major_scratch(c, head_major(K.shape)),
             Vh = row_major_scratch(c, head_major(V.shape)), Yh = row_major_scratch(c, head_major(y.shape));
  swap_copy(Q, Qh);
  swap_copy(K, Kh);
  swap_copy(V, Vh);
  Op inner = op;
  a.token_major = false;
  inner.attrs = a;
  std::vector<View> ops{Qh, Kh, Vh};
  if (a.mask) ops.push_back(raw.at(3));
  plan_attention(c, inner, ops, Yh);
  swap_copy(Yh, y);
  const View out = product_target(c, y);
  int64_t lead = 1;
  for (int d = 0; d < r - 3; ++d) lead *= Q.shape.dim(d);
  if (c.dry || lead != 1) return;
  Shape score_shape = head_major(Q.shape);
  score_shape.dim(r - 1) = K.shape.dim(r - 3);
  FlashAttentionParams f = flash_params(a, Qh, Kh, Vh, a.mask ? &raw.at(3) : nullptr, out, score_shape);
  const int64_t heads = Q.shape.dim(r - 2);
  f.q = Q.ptr;
  f.k = K.ptr;
  f.v = V.ptr;
  f.q_row = f.k_row = heads * f.d;
  f.v_row = f.y_row = heads * f.dv;
  f.q_batch = f.k_batch = f.d;
  f.v_batch = f.y_batch = f.dv;
  if (fused_attention_instead(c, first, f, "token-major attention", a)) copy_product_into(c, out, y);
}

}  // namespace tensor_plan

using namespace tensor_plan;

void plan_linear_gemm(PlanCtx& c, const View& x, const void* weight, bool has_bias, const void* bias,
                      const View& y, int64_t features, int64_t outs) {
  const View out = product_target(c, y);
  Gemm g = dense_gemm(x.ptr, weight, out.ptr, x.shape.n, outs, features, 1, y.elem);
  g.trans_b = true;  // the weights are [outs][features]
  if (has_bias) {  // broadcast into the result first, then added by cuBLAS
    plan_pointwise(c, {whole_view(const_cast<void*>(bias), Shape{1, outs, 1, 1}, Layout::Nchw, y.elem)}, out,
                   MapFn::Copy, 0, 0, 0);
    g.beta = 1;
  }
  emit_gemm(c, g);
  copy_product_into(c, out, y);
}

}  // namespace hios::cuda
