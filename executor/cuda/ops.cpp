// The CUDA kernel table: how each IR op runs on a stream, with cuDNN wherever cuDNN has the op
// and with hios's own kernels (executor/cuda/*.cu) where it has not (term assembly, ceil_mode
// pooling, the bands and row copies of row splits).
#include <algorithm>
#include <limits>
#include <functional>
#include <map>
#include <mutex>
#include <climits>
#include <cstdint>

#include "executor/cuda/check.hpp"
#include "executor/cuda/conv.hpp"
#include "executor/cuda/engine.hpp"
#include "executor/cuda/kernels.hpp"
#include "graph/relu_fold.hpp"

namespace hios::cuda {

namespace {

// ---------------------------------------------------------------------------------------------
// Descriptor owners. Launches capture them by shared_ptr, so a plan keeps what it uses alive.

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc() { HIOS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d)); }
  ~TensorDesc() { (void)cudnnDestroyTensorDescriptor(d); }
};
struct ActDesc {
  cudnnActivationDescriptor_t d = nullptr;
  ActDesc() { HIOS_CUDNN_CHECK(cudnnCreateActivationDescriptor(&d)); }
  ~ActDesc() { (void)cudnnDestroyActivationDescriptor(d); }
};
struct PoolDesc {
  cudnnPoolingDescriptor_t d = nullptr;
  PoolDesc() { HIOS_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&d)); }
  ~PoolDesc() { (void)cudnnDestroyPoolingDescriptor(d); }
};
struct OpTensorDesc {
  cudnnOpTensorDescriptor_t d = nullptr;
  OpTensorDesc() { HIOS_CUDNN_CHECK(cudnnCreateOpTensorDescriptor(&d)); }
  ~OpTensorDesc() { (void)cudnnDestroyOpTensorDescriptor(d); }
};


// Strides in elements of a view's (n, c, h, w), in either layout.
std::array<int64_t, 4> strides_of(const View& v) {
  const Shape& s = v.shape;
  const int64_t bs = s.n == 1 ? v.item() : v.batch_stride;
  if (v.nhwc()) return {bs, 1, s.w * v.pixel_stride, v.pixel_stride};
  return {bs, s.h * s.w, s.w, 1};
}


// 16-bit storage keeps cuDNN to convolutions (whose 16-bit engines are the point); pooling,
// activations, op-tensor and softmax run on hios's kernels, which take every storage type.
bool half(const View& v) { return v.elem != Elem::F32; }

std::shared_ptr<TensorDesc> tensor_desc(const View& v, const std::string& node) {
  auto t = std::make_shared<TensorDesc>();
  const Shape& s = v.shape;
  const std::array<int64_t, 4> st = strides_of(v);
  HIOS_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(t->d, cudnn_type(v.elem), to_int(s.n, node, "batch"),
                                                to_int(s.c, node, "channels"), to_int(s.h, node, "height"),
                                                to_int(s.w, node, "width"), to_int(st[0], node, "batch stride"),
                                                to_int(st[1], node, "channel stride"), to_int(st[2], node, "row stride"),
                                                to_int(st[3], node, "pixel stride")));
  return t;
}

// How term assembly walks a view (kernels.hpp, CombineTerm): NCHW and packed views are one
// block per batch item; an NHWC slice is a block of its channels per pixel.
struct Blocks {
  int64_t rows, len, stride;
};
Blocks blocks_of(const View& v) {
  if (!v.nhwc() || (v.pixel_stride == v.shape.c) || v.shape.h * v.shape.w == 1) return {1, v.item(), 0};
  return {v.shape.h * v.shape.w, v.shape.c, v.pixel_stride};
}
// The widest access (CombineTerm::vec) a term's walk allows: 8 elements (16 bytes) in 16-bit
// storage, else 4, else 1, as every address it starts from and every length and stride it
// steps by allow. Fed one address or count at a time.
struct AccessWidth {
  Elem elem;
  // Two elements is the fallback that matters for NASNet's stem: its 42-channel terms ran one
  // 2-byte element per access in bf16, at 4.8-5.5x their copy time (docs/benchmarks.md).
  bool eight, four = true, two = true;
  explicit AccessWidth(Elem e) : elem(e), eight(e != Elem::F32) {}
  void count(int64_t n) {
    eight = eight && n % 8 == 0;
    four = four && n % 4 == 0;
    two = two && n % 2 == 0;
  }
  void address(const void* p) {
    eight = eight && reinterpret_cast<uintptr_t>(p) % 16 == 0;
    four = four && vec4_aligned(p, elem);
    two = two && reinterpret_cast<uintptr_t>(p) % (2 * elem_bytes(elem)) == 0;
  }
  int width() const { return eight ? 8 : four ? 4 : two ? 2 : 1; }
};

// Per-pixel blocks whatever the view (terms of one launch that must walk alike).
Blocks pixel_blocks_of(const View& v) {
  if (!v.nhwc()) return blocks_of(v);
  return {v.shape.h * v.shape.w, v.shape.c, v.pixel_stride};
}

cudnnActivationMode_t act_mode(Activation a) {
  switch (a) {
    case Activation::Relu: return CUDNN_ACTIVATION_RELU;
    case Activation::Sigmoid: return CUDNN_ACTIVATION_SIGMOID;
    case Activation::Tanh: return CUDNN_ACTIVATION_TANH;
    case Activation::Relu6: return CUDNN_ACTIVATION_CLIPPED_RELU;  // clipped at the coefficient, 6
    case Activation::None: return CUDNN_ACTIVATION_IDENTITY;
    default: break;  // the others run on the strided map kernel (plan_tensor_activation)
  }
  return CUDNN_ACTIVATION_IDENTITY;
}

std::shared_ptr<ActDesc> act_desc(Activation a) {
  auto d = std::make_shared<ActDesc>();
  HIOS_CUDNN_CHECK(cudnnSetActivationDescriptor(d->d, act_mode(a), CUDNN_PROPAGATE_NAN, a == Activation::Relu6 ? 6.0 : 0.0));
  return d;
}


// ---------------------------------------------------------------------------------------------
// Convolution (also the linear layer, as a 1x1 convolution over the flattened input).

void plan_conv(PlanCtx& c, const Op& op, const std::string& prefix, const std::vector<View>& in, const View& out) {
  const ConvAttrs& a = op.conv();
  HIOS_CHECK(!a.residual || in.size() == 2, "node '%s': a residual convolution got %zu operands", c.node_name.c_str(),
             in.size());
  plan_conv_spec(c,
                 ConvSpec{a.out_channels, a.groups, a.kernel, a.stride, a.padding, a.dilation, a.bias, a.activation,
                          a.rows},
                 prefix, in.at(0), out, false, a.residual ? &in[1] : nullptr);
}

// One row: a matrix-vector product (elementwise.cu), in full fp32 as PyTorch's nn.Linear by
// default: at batch 1 cuDNN's 1x1 convolution over a 1x1 map, tried first, ran 60 times slower
// (0.3 ms for Inception's 2048 -> 1000 layer on an H200). More rows (a batch, or a
// transformer's tokens): one cuBLAS product in the math mode, which the per-row kernel ran at
// about 1 TFLOP/s (577 tokens of a ViT's 768 -> 768 projection: 0.6 ms on an H200).
void plan_linear(PlanCtx& c, const Op& op, const std::string& prefix, const std::vector<View>& in, const View& out) {
  const LinearAttrs& a = op.linear();
  auto check_params = [&](const Engine::Params& prm, int64_t features) {
    HIOS_CHECK(prm.weight_count == a.out_features * features && prm.bias_count == (a.bias ? a.out_features : 0),
               "node '%s': parameters of '%s' do not match a %lld -> %lld linear layer", c.node_name.c_str(),
               prefix.c_str(), (long long)features, (long long)a.out_features);
  };
  const View x = c.packed(in.at(0));
  if (x.shape.n > 1) {  // both passes: the product may take scratch
    const Engine::Params* prm = c.dry ? nullptr : &c.eng.params(prefix);
    if (prm) check_params(*prm, x.item());
    return plan_linear_gemm(c, x, prm ? prm->weight : nullptr, a.bias, prm ? prm->bias : nullptr, out, x.item(),
                            a.out_features);
  }
  if (c.dry) return;
  const Engine::Params& prm = c.eng.params(prefix);
  check_params(prm, x.item());
  const void* xp = x.ptr;
  const void* w = prm.weight;
  const void* b = prm.bias;
  void* yp = out.ptr;
  const int64_t n = x.shape.n, features = x.item(), outs = a.out_features;
  const Elem e = x.elem;
  c.emit([=](StreamResources& r) { launch_linear(xp, w, b, yp, n, features, outs, e, r.stream()); });
}

// ---------------------------------------------------------------------------------------------
// Pooling

int64_t floor_window_out(int64_t in, int k, int s, int p) { return (in + 2 * int64_t(p) - k) / s + 1; }


// One of hios's pool kernels: the tiled one where the window fits its tile, else the generic.
void emit_hios_pool(PlanCtx& c, const PoolParams& pp, bool tiled_fits) {
  c.emit([pp, tiled_fits](StreamResources& r) {
    if (tiled_fits) {
      launch_pool_tiled(pp, r.stream());
    } else {
      launch_pool(pp, r.stream());
    }
  });
}

// A pool's window; a global pool's is its whole input.
struct PoolWindow {
  std::array<int, 2> k, s, p;
  bool global = false, is_max = false;
};

PoolWindow pool_window(const PoolAttrs& a, const View& x, const std::string& node) {
  PoolWindow w{a.kernel, a.stride, a.padding};
  w.global = a.kind == PoolKind::GlobalAvg || a.kind == PoolKind::GlobalMax;
  w.is_max = a.kind == PoolKind::Max || a.kind == PoolKind::GlobalMax;
  if (w.global) {
    w.k = {to_int(x.shape.h, node, "height"), to_int(x.shape.w, node, "width")};
    w.s = w.k;
    w.p = {0, 0};
  }
  return w;
}

// hios's own pooling kernels' parameters for the whole tensor (a band's rows are set apart).
PoolParams hios_pool_params(const PoolAttrs& a, const PoolWindow& w, const View& x, const View& y, const std::string& node) {
  PoolParams pp;
  pp.x = x.ptr;
  pp.y = y.ptr;
  pp.elem = x.elem;
  pp.n = int(x.shape.n);
  pp.c = to_int(x.shape.c, node, "channels");
  pp.h = to_int(x.shape.h, node, "height");
  pp.w = to_int(x.shape.w, node, "width");
  pp.oh = to_int(y.shape.h, node, "output height");
  pp.ow = to_int(y.shape.w, node, "output width");
  pp.kh = w.k[0];
  pp.kw = w.k[1];
  pp.sh = w.s[0];
  pp.sw = w.s[1];
  pp.ph = w.p[0];
  pp.pw = w.p[1];
  pp.is_max = w.is_max;
  pp.count_include_pad = a.count_include_pad;
  pp.x_batch_stride = x.shape.n == 1 ? x.item() : x.batch_stride;
  pp.nhwc = x.nhwc();
  pp.x_pixel_stride = x.pixel_stride;
  pp.full_h = pp.h;
  return pp;
}

// A band: cuDNN would clip windows and count divisors at the band's edges, not the whole
// tensor's, so hios's kernels compute it (windows in whole-tensor rows, PoolParams).
void plan_pool_band(PlanCtx& c, const PoolAttrs& a, const PoolWindow& w, const View& y, PoolParams pp, bool tiled_ok) {
  const std::string& node = c.node_name;
  HIOS_CHECK(!w.global && y.shape.h == a.rows.out_count, "node '%s': a band of %lld pooled rows has an output of %s",
             node.c_str(), (long long)a.rows.out_count, y.shape.str().c_str());
  pp.r0 = to_int(a.rows.out_first, node, "band's first row");
  pp.i0 = to_int(a.rows.in_first, node, "band's first input row");
  pp.full_h = to_int(a.rows.in_full, node, "whole input height");
  emit_hios_pool(c, pp, tiled_ok);
}

// hios's global pool kernel's arguments. A partial average divides by the whole tensor's
// pixels, `full_rows` rows of them; an NHWC map may be split in parts (kernels.hpp).
GlobalPoolParams global_pool_params(const PoolParams& pp, const View& x, const View& y, int64_t full_rows, int splits,
                                    float* partial) {
  GlobalPoolParams gp;
  gp.x = x.ptr;
  gp.y = y.ptr;
  gp.elem = x.elem;
  gp.n = pp.n;
  gp.c = pp.c;
  gp.hw = x.shape.h * x.shape.w;
  gp.x_batch_stride = pp.x_batch_stride;
  gp.x_pixel_stride = pp.nhwc ? x.pixel_stride : 1;
  gp.nhwc = pp.nhwc;
  gp.is_max = pp.is_max;
  gp.divisor = float(double(full_rows) * double(x.shape.w));
  gp.splits = splits;
  gp.partial = partial;
  return gp;
}

// fp32 storage: cuDNN's pooling, or hios's kernel where cuDNN's floor-mode windows cannot
// express the pool or hios's measures faster (tiled in NCHW, channel-parallel in NHWC; a
// global pool against hios's split reduction where its map is split, `global`, otherwise
// cuDNN's). `scale` takes a partial average to its share of the whole.
void plan_cudnn_or_hios_pool(PlanCtx& c, const PoolAttrs& a, const PoolWindow& w, const View& x, const View& y,
                             const PoolParams& pp, bool tiled_ok, float scale, const GlobalPoolParams* global) {
  const std::string& node = c.node_name;
  const bool cudnn_ok = floor_window_out(x.shape.h, w.k[0], w.s[0], w.p[0]) == y.shape.h &&
                        floor_window_out(x.shape.w, w.k[1], w.s[1], w.p[1]) == y.shape.w;
  auto pd = std::make_shared<PoolDesc>();
  const cudnnPoolingMode_t mode = w.is_max ? CUDNN_POOLING_MAX
                                  : a.count_include_pad || w.global ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                                    : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  HIOS_CUDNN_CHECK(cudnnSetPooling2dDescriptor(pd->d, mode, CUDNN_PROPAGATE_NAN, w.k[0], w.k[1], w.p[0], w.p[1],
                                               w.s[0], w.s[1]));
  auto xd = tensor_desc(x, node);
  auto yd = tensor_desc(y, node);
  const void* xp = x.ptr;
  void* yp = y.ptr;
  auto with_cudnn = [=](cudnnHandle_t h) {
    HIOS_CUDNN_CHECK(cudnnPoolingForward(h, pd->d, &scale, xd->d, xp, &kZero, yd->d, yp));
  };
  const bool hios_ok = tiled_ok || (pp.nhwc && !w.global) || global;
  bool use_hios = !cudnn_ok;
  if (cudnn_ok && hios_ok) {
    const std::string key =
        strprintf("pool %s %dx%d/%d,%d p%d,%d incl%d on %s b%lld%s", pool_kind_name(a.kind), w.k[0], w.k[1], w.s[0],
                  w.s[1], w.p[0], w.p[1], int(a.count_include_pad), x.shape.str().c_str(), (long long)pp.x_batch_stride,
                  pp.nhwc ? strprintf(" nhwc px%lld", (long long)pp.x_pixel_stride).c_str() : "");
    StreamResources& res = c.res;
    use_hios = measured_once(c.eng.device(), "pool " + key, [&] {
      const double t_cudnn = time_on_stream(res.stream(), [&] { with_cudnn(res.cudnn()); });
      const double t_hios = time_on_stream(res.stream(), [&] {
        if (global) {
          launch_global_pool(*global, res.stream());
        } else if (tiled_ok) {
          launch_pool_tiled(pp, res.stream());
        } else {
          launch_pool(pp, res.stream());
        }
      });
      return t_hios < t_cudnn;
    });
  }
  if (use_hios && global) {
    c.emit([gp = *global](StreamResources& r) { launch_global_pool(gp, r.stream()); });
    return;
  }
  if (use_hios) {
    emit_hios_pool(c, pp, tiled_ok);
    return;
  }
  c.emit([with_cudnn](StreamResources& r) { with_cudnn(r.cudnn()); });
}

void plan_pool(PlanCtx& c, const Op& op, const std::string&, const std::vector<View>& in, const View& y) {
  const PoolAttrs& a = op.pool();
  const View x = in.at(0);
  // An NHWC global pool's parts (global_pool_splits): their fp32 sums in scratch, both passes.
  const bool global = a.kind == PoolKind::GlobalAvg || a.kind == PoolKind::GlobalMax;
  const int splits = global && x.nhwc() ? global_pool_splits(x.shape.n, x.shape.c, x.shape.h * x.shape.w) : 1;
  float* parts =
      splits > 1 ? static_cast<float*>(c.scratch_bytes(size_t(splits) * size_t(x.shape.n * x.shape.c) * sizeof(float)))
                 : nullptr;
  if (c.dry) return;
  const std::string& node = c.node_name;
  const PoolWindow w = pool_window(a, x, node);
  const bool tiled_ok = !x.nhwc() && !w.global && w.k[0] <= kMaxTiledPoolWindow && w.k[1] <= kMaxTiledPoolWindow &&
                        w.s[0] <= kMaxTiledPoolStride && w.s[1] <= kMaxTiledPoolStride && x.shape.c <= 65535 &&
                        x.shape.n <= 65535;
  const PoolParams pp = hios_pool_params(a, w, x, y, node);
  // A partial global average (the part of a row split ending in a global pool, graph/ops.hpp):
  // x holds some of the tensor's rows, and the parts' results add up to the whole mean, so
  // each divides by the whole tensor's in_full * W: cuDNN's mean over the rows held, scaled by
  // rows held / in_full.
  const bool partial = w.global && a.rows.banded();
  if (partial) {
    HIOS_CHECK(a.kind == PoolKind::GlobalAvg && a.rows.in_full >= x.shape.h && y.shape.h == 1,
               "node '%s': a partial global pool must be an average over at most %lld rows, not %s of %s",
               node.c_str(), (long long)a.rows.in_full, pool_kind_name(a.kind), x.shape.str().c_str());
  }
  if (a.rows.banded() && !partial) {
    plan_pool_band(c, a, w, y, pp, tiled_ok);
  } else if (half(x) && w.global) {
    // 16-bit storage: hios's reduction kernel, in parts where they measure faster.
    GlobalPoolParams gp = global_pool_params(pp, x, y, partial ? a.rows.in_full : x.shape.h, splits, parts);
    if (splits > 1) {
      GlobalPoolParams whole = gp;
      whole.splits = 1;
      whole.partial = nullptr;
      const std::string key = strprintf("global pool %s in %d parts on %s b%lld px%lld %s", pool_kind_name(a.kind), splits,
                                        x.shape.str().c_str(), (long long)gp.x_batch_stride,
                                        (long long)gp.x_pixel_stride, x.elem == Elem::F16 ? "fp16" : "bf16");
      StreamResources& res = c.res;
      const bool in_parts = measured_once(c.eng.device(), "pool " + key, [&] {
        const double t_whole = time_on_stream(res.stream(), [&] { launch_global_pool(whole, res.stream()); });
        return time_on_stream(res.stream(), [&] { launch_global_pool(gp, res.stream()); }) < t_whole;
      });
      if (!in_parts) gp = whole;
    }
    c.emit([gp](StreamResources& r) { launch_global_pool(gp, r.stream()); });
  } else if (half(x)) {
    emit_hios_pool(c, pp, tiled_ok);
  } else {
    const float scale = partial ? float(double(x.shape.h) / double(a.rows.in_full)) : 1.0f;
    const GlobalPoolParams gp = global_pool_params(pp, x, y, partial ? a.rows.in_full : x.shape.h, splits, parts);
    plan_cudnn_or_hios_pool(c, a, w, x, y, pp, tiled_ok, scale, splits > 1 ? &gp : nullptr);
  }
}

// ---------------------------------------------------------------------------------------------
// Point-wise ops

void plan_activation(PlanCtx& c, const Op& op, const std::string&, const std::vector<View>& in, const View& y) {
  if (int(op.act().activation) > int(Activation::Relu6) || y.shape.rank != 4) {
    return plan_tensor_activation(c, op, in.at(0), y);
  }
  if (half(y)) {
    const View x = c.packed(in.at(0));  // the kernel walks packed tensors (both passes: scratch)
    if (c.dry) return;
    const Shape s = y.shape;
    const int act = static_cast<int>(op.act().activation), nhwc = y.nhwc() ? 1 : 0;
    c.emit([x, y, s, act, nhwc](StreamResources& r) {
      launch_bias_act(x.ptr, y.ptr, nullptr, act, s.n, s.c, s.h * s.w, nhwc, y.elem, r.stream());
    });
    return;
  }
  if (c.dry) return;
  const View x = in.at(0);
  auto ad = act_desc(op.act().activation);
  auto xd = tensor_desc(x, c.node_name);
  auto yd = tensor_desc(y, c.node_name);
  const void* xp = x.ptr;
  void* yp = y.ptr;
  c.emit([=](StreamResources& r) {
    HIOS_CUDNN_CHECK(cudnnActivationForward(r.cudnn(), ad->d, &kOne, xd->d, xp, &kZero, yd->d, yp));
  });
}

// Add and mul: one operand per term. Two operands (the common case) are one cudnnOpTensor;
// more are folded with cudnnAddTensor, or, for mul, one product kernel.
void plan_binary(PlanCtx& c, const std::vector<View>& in, const View& y, cudnnOpTensorOp_t op) {
  if (c.dry) return;
  HIOS_CHECK(in.size() >= 2, "node '%s': needs at least two operands", c.node_name.c_str());
  const bool product = op == CUDNN_OP_TENSOR_MUL;
  if ((product && in.size() > 2) || half(y)) {
    // hios's term kernel: a product of one-operand terms, or one term summing every operand.
    HIOS_CHECK(int(in.size()) <= kMaxCombineTerms && int(in.size()) <= kMaxCombineSrcs,
               "node '%s': %s of %zu operands; the CUDA backend combines at most %d in one node",
               c.node_name.c_str(), product ? "mul" : "add", in.size(), kMaxCombineTerms);
    CombineParams p;
    p.dst = y.ptr;
    p.elem = y.elem;
    p.dst_batch_stride = y.item();
    p.batch = int(y.shape.n);
    p.mode = product ? CombineMode::Product : CombineMode::Sum;
    p.num_terms = product ? int(in.size()) : 1;
    // Every operand is walked alike: whole items, or pixel by pixel when any is an NHWC slice.
    bool flat = true;
    for (const View& v : in) flat = flat && blocks_of(v).rows == 1;
    AccessWidth width(y.elem);
    width.address(y.ptr);
    if (y.shape.n > 1) width.count(y.item());
    for (size_t i = 0; i < in.size(); ++i) {
      const Blocks b = flat ? blocks_of(in[i]) : pixel_blocks_of(in[i]);
      p.srcs[i] = CombineSrc{in[i].ptr, in[i].shape.n == 1 ? in[i].item() : in[i].batch_stride, b.stride};
      width.address(in[i].ptr);
      width.count(b.len);
      width.count(b.stride);
      if (in[i].shape.n > 1) width.count(p.srcs[i].batch_stride);
      CombineTerm t;
      t.len = b.len;
      t.rows = b.rows;
      t.dst_row_stride = flat ? 0 : y.shape.c;
      t.first = int(i);
      t.count = 1;
      if (product || i == 0) p.terms[i] = t;
    }
    if (!product) {
      p.terms[0].count = int(in.size());
      p.terms[0].vec = width.width();
    }
    c.emit([p](StreamResources& r) { launch_combine(p, r.stream()); });
    return;
  }
  auto od = std::make_shared<OpTensorDesc>();
  HIOS_CUDNN_CHECK(cudnnSetOpTensorDescriptor(od->d, op, CUDNN_DATA_FLOAT, CUDNN_PROPAGATE_NAN));
  std::vector<std::shared_ptr<TensorDesc>> descs;
  std::vector<const void*> ptrs;
  for (const View& v : in) {
    descs.push_back(tensor_desc(v, c.node_name));
    ptrs.push_back(v.ptr);
  }
  auto yd = tensor_desc(y, c.node_name);
  void* yp = y.ptr;
  c.emit([=](StreamResources& r) {
    HIOS_CUDNN_CHECK(cudnnOpTensor(r.cudnn(), od->d, &kOne, descs[0]->d, ptrs[0], &kOne, descs[1]->d, ptrs[1], &kZero,
                                   yd->d, yp));
    for (size_t i = 2; i < ptrs.size(); ++i) {
      HIOS_CUDNN_CHECK(cudnnAddTensor(r.cudnn(), &kOne, descs[i]->d, ptrs[i], &kOne, yd->d, yp));
    }
  });
}

void plan_add(PlanCtx& c, const Op&, const std::string&, const std::vector<View>& in, const View& y) {
  plan_binary(c, in, y, CUDNN_OP_TENSOR_ADD);
}
void plan_mul(PlanCtx& c, const Op&, const std::string&, const std::vector<View>& in, const View& y) {
  plan_binary(c, in, y, CUDNN_OP_TENSOR_MUL);
}

void plan_softmax(PlanCtx& c, const Op& op, const std::string&, const std::vector<View>& in, const View& y) {
  if (op.as<SoftmaxAttrs>().fn != SoftmaxFn::Softmax || op.as<SoftmaxAttrs>().axis != 1 || y.shape.rank != 4) {
    return plan_tensor_softmax(c, op, in.at(0), y);
  }
  if (half(y)) {
    const View x = c.packed(in.at(0));
    if (c.dry) return;
    const Shape s = y.shape;
    const int nhwc = y.nhwc() ? 1 : 0;
    c.emit([x, y, s, nhwc](StreamResources& r) {
      launch_softmax(x.ptr, y.ptr, s.n, s.c, s.h * s.w, nhwc, y.elem, r.stream());
    });
    return;
  }
  if (c.dry) return;
  const View x = in.at(0);
  auto xd = tensor_desc(x, c.node_name);
  auto yd = tensor_desc(y, c.node_name);
  const void* xp = x.ptr;
  void* yp = y.ptr;
  c.emit([=](StreamResources& r) {
    HIOS_CUDNN_CHECK(cudnnSoftmaxForward(r.cudnn(), CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &kOne, xd->d, xp,
                                         &kZero, yd->d, yp));
  });
}

// A launch copying view x into view y of the same shape (either may be an NHWC slice).
CombineParams copy_params(const View& x, const View& y) {
  const bool flat = blocks_of(x).rows == 1 && blocks_of(y).rows == 1;
  const Blocks bx = flat ? blocks_of(x) : pixel_blocks_of(x), by = flat ? blocks_of(y) : pixel_blocks_of(y);
  CombineParams p;
  p.dst = y.ptr;
  p.elem = y.elem;
  p.dst_batch_stride = y.shape.n == 1 ? y.item() : y.batch_stride;
  p.batch = int(y.shape.n);
  p.num_terms = 1;
  p.srcs[0] = CombineSrc{x.ptr, x.shape.n == 1 ? x.item() : x.batch_stride, bx.stride};
  CombineTerm t;
  t.len = bx.len;
  t.rows = bx.rows;
  t.dst_row_stride = by.stride;
  t.first = 0;
  t.count = 1;
  AccessWidth width(y.elem);
  for (const void* a : {static_cast<const void*>(x.ptr), static_cast<const void*>(y.ptr)}) width.address(a);
  for (int64_t n : {t.len, p.srcs[0].batch_stride, p.dst_batch_stride, bx.stride, by.stride}) width.count(n);
  t.vec = width.width();
  p.terms[0] = t;
  return p;
}

// The node's value is its assembled input. plan_node assembles straight into the output, so
// only a single value read whole or sliced is left to copy, unless the caller bound the output
// to that value's own storage.
void plan_identity(PlanCtx& c, const Op&, const std::string&, const std::vector<View>& in, const View& y) {
  const View x = in.at(0);
  if (c.dry || x.ptr == y.ptr) return;
  c.emit([p = copy_params(x, y)](StreamResources& r) { launch_combine(p, r.stream()); });
}

// A row segment copying `rows` rows of every plane of v, from v's row `from`, to row `to` of
// dst (packed, dst_h rows high).
// In NHWC, v must be packed: a row is then w * c consecutive elements and the tensor one plane
// (the caller sets RowsParams::channels = 1).
RowSegment row_segment(const View& v, int64_t from, int64_t rows, const void* dst, int64_t dst_h, int64_t to) {
  if (v.nhwc()) {
    const int64_t row = v.shape.w * v.shape.c;
    RowSegment s;
    s.src = v.at(from * row);
    s.src_batch_stride = v.shape.n == 1 ? v.item() : v.batch_stride;
    s.dst_offset = to * row;
    s.len = rows * row;
    const int64_t dst_item = dst_h * row;
    s.vec4 = row % 4 == 0 && (v.shape.n == 1 || (s.src_batch_stride % 4 == 0 && dst_item % 4 == 0)) &&
                     vec4_aligned(s.src, v.elem) && vec4_aligned(dst, v.elem)
                 ? 1
                 : 0;
    return s;
  }
  const int64_t w = v.shape.w;
  RowSegment s;
  s.src = v.at(from * w);
  s.src_batch_stride = v.shape.n == 1 ? v.item() : v.batch_stride;
  s.src_plane = v.shape.h * w;
  s.dst_offset = to * w;
  s.len = rows * w;
  const int64_t dst_item = v.shape.c * dst_h * w;
  s.vec4 = w % 4 == 0 && (v.shape.n == 1 || (s.src_batch_stride % 4 == 0 && dst_item % 4 == 0)) &&
                   vec4_aligned(s.src, v.elem) && vec4_aligned(dst, v.elem)
               ? 1
               : 0;
  return s;
}

// Rows [first, first + count) of a tensor `full` rows high, each from the first operand that
// holds it (operand k holds the rows from held[k]). One segment per run of rows taken from one
// operand, all in one launch; operands may be channel slices of batched tensors.
void plan_rows(PlanCtx& c, const Op& op, const std::string&, const std::vector<View>& in_views, const View& y) {
  // NHWC row copies need packed operands (a row of a slice is not one run); in both passes, so
  // the dry one counts the scratch.
  std::vector<View> in = in_views;
  if (y.nhwc()) {
    for (View& v : in) v = c.packed(v);
  }
  if (c.dry) return;
  const RowsAttrs& a = op.rows();
  const std::string& node = c.node_name;
  HIOS_CHECK(in.size() == a.held.size() && y.shape.h == a.count,
             "node '%s': rows of %zu operands with %zu held offsets gives %s, expected %lld rows", node.c_str(),
             in.size(), a.held.size(), y.shape.str().c_str(), (long long)a.count);
  for (size_t k = 0; k < in.size(); ++k) {
    HIOS_CHECK(in[k].shape.n == y.shape.n && in[k].shape.c == y.shape.c && in[k].shape.w == y.shape.w,
               "node '%s': rows operand %zu is %s, the output %s", node.c_str(), k, in[k].shape.str().c_str(),
               y.shape.str().c_str());
  }
  auto holds = [&](size_t k, int64_t g) { return a.held[k] <= g && g < a.held[k] + in[k].shape.h; };
  std::vector<RowSegment> segs;
  for (int64_t r = 0; r < a.count;) {
    const int64_t g = a.first + r;
    size_t k = 0;
    while (k < in.size() && !holds(k, g)) ++k;
    HIOS_CHECK(k < in.size(), "node '%s': no rows operand holds row %lld", node.c_str(), (long long)g);
    // The run ends where operand k's rows end or an earlier operand's begin (an earlier operand
    // that ends before g never holds a later row).
    int64_t end = std::min(a.held[k] + in[k].shape.h, a.first + a.count);
    for (size_t j = 0; j < k; ++j) {
      if (a.held[j] > g) end = std::min(end, a.held[j]);
    }
    const RowSegment seg = row_segment(in[k], g - a.held[k], end - g, y.ptr, y.shape.h, r);
    // A band the memory plan put at the address of its rows here (RowGroup) is in place already.
    const bool in_place = y.nhwc() && y.shape.n == 1 && seg.src == y.at(seg.dst_offset);
    if (!in_place) segs.push_back(seg);
    r = end - a.first;
  }
  for (size_t first = 0; first < segs.size(); first += kMaxRowSegments) {
    RowsParams p;
    p.dst = y.ptr;
    p.elem = y.elem;
    p.dst_batch_stride = y.item();
    p.dst_plane = y.shape.h * y.shape.w;
    p.channels = y.nhwc() ? 1 : y.shape.c;
    p.batch = to_int(y.shape.n, node, "batch");
    for (size_t i = first; i < std::min(segs.size(), first + kMaxRowSegments); ++i) p.segs[p.num_segments++] = segs[i];
    c.emit([p](StreamResources& r) { launch_rows(p, r.stream()); });
  }
}

// The placeholder's value is the deterministic graph input: planning it writes it once, and
// passes never rewrite it (the executor's backends receive it through set_input instead).
void plan_input(PlanCtx& c, const Op&, const std::string&, const std::vector<View>&, const View&) {
  if (!c.dry) c.eng.upload_input();
}

// Steps run back to back; intermediates live in two scratch buffers used in turn. A conv
// without activation followed by an activation step becomes one fused conv, and a ReLU step
// followed by a depthwise conv becomes that conv reading relu(x) (NASNet's separable
// convolutions): one pass over the tensor instead of two.
void plan_sequential(PlanCtx& c, const Op& op, const std::string& prefix, const std::vector<View>& in,
                     const View& out) {
  struct Step {
    Op op;
    std::string name;
    bool input_relu = false;
  };
  const auto& steps = op.sequential().steps;
  std::vector<Step> plan;
  Shape cur = in.at(0).shape;
  InferContext ictx{c.node_name, cur.n, cur.h, cur.w};
  std::vector<Shape> shapes;
  // An input stored through a ReLU already (relu_fold.hpp) makes a first ReLU step a no-op;
  // the steps keep their indices, which name their weights.
  const bool skip_first = c.input_relu_stored && steps.size() > 1 && starts_with_relu(steps[0]);
  for (size_t i = skip_first ? 1 : 0; i < steps.size(); ++i) {
    Step s{steps[i], prefix + strprintf(".steps[%zu]", i), false};
    if (s.op.kind == OpKind::Activation && s.op.act().activation == Activation::Relu && i + 1 < steps.size() &&
        steps[i + 1].kind == OpKind::Conv) {
      const ConvAttrs& a = steps[i + 1].conv();
      ConvProblem probe;
      probe.x.shape = cur;
      probe.out_channels = a.out_channels;
      probe.groups = a.groups;
      probe.kernel = a.kernel;
      probe.stride = a.stride;
      probe.dilation = a.dilation;
      if (depthwise_kernel_fits(probe)) {
        ++i;
        s = Step{steps[i], prefix + strprintf(".steps[%zu]", i), true};
      }
    }
    if (s.op.kind == OpKind::Conv && s.op.conv().activation == Activation::None && i + 1 < steps.size() &&
        steps[i + 1].kind == OpKind::Activation && conv_epilogue_activation(steps[i + 1].act().activation)) {
      ConvAttrs a = s.op.conv();
      a.activation = steps[i + 1].act().activation;
      s.op.attrs = a;
      ++i;  // the activation step is folded into this conv
    }
    cur = infer_op(s.op, {cur}, ictx);
    shapes.push_back(cur);
    plan.push_back(std::move(s));
  }
  size_t biggest = 0;
  for (size_t i = 0; i + 1 < shapes.size(); ++i) biggest = std::max<size_t>(biggest, size_t(shapes[i].numel()));
  View buf[2];
  if (plan.size() > 1) {
    buf[0] = c.scratch(Shape{1, 1, 1, int64_t(biggest)});
    if (plan.size() > 2) buf[1] = c.scratch(Shape{1, 1, 1, int64_t(biggest)});
  }
  View x = in.at(0);
  for (size_t i = 0; i < plan.size(); ++i) {
    const View y = i + 1 == plan.size() ? out : whole_view(buf[i % 2].ptr, shapes[i], c.eng.layout(), c.eng.elem());
    if (plan[i].input_relu) {
      const ConvAttrs& a = plan[i].op.conv();
      plan_conv_spec(c,
                     ConvSpec{a.out_channels, a.groups, a.kernel, a.stride, a.padding, a.dilation, a.bias,
                              a.activation, a.rows},
                     plan[i].name, x, y, true);
    } else {
      cuda_op_impl(plan[i].op.kind).plan(c, plan[i].op, plan[i].name, {x}, y);
    }
    x = y;
  }
}

constexpr std::array<CudaOpImpl, kNumOpKinds> kTable = {{
    {OpKind::Input, plan_input}, {OpKind::Conv, plan_conv}, {OpKind::Pool, plan_pool},
    {OpKind::Activation, plan_activation}, {OpKind::Add, plan_add}, {OpKind::Mul, plan_mul},
    {OpKind::Identity, plan_identity}, {OpKind::Sequential, plan_sequential}, {OpKind::Linear, plan_linear},
    {OpKind::Softmax, plan_softmax}, {OpKind::Rows, plan_rows}, {OpKind::Pad, plan_pad},
    {OpKind::Join, plan_general}, {OpKind::Binary, plan_general}, {OpKind::Where, plan_general},
    {OpKind::Reduce, plan_general}, {OpKind::MatMul, plan_general}, {OpKind::Transpose, plan_general},
    {OpKind::Reshape, plan_reshape}, {OpKind::Concat, plan_general}, {OpKind::Slice, plan_general},
    {OpKind::Gather, plan_general}, {OpKind::Cast, plan_general}, {OpKind::Expand, plan_general},
    {OpKind::Resize, plan_general}, {OpKind::ConvTranspose, plan_conv_transpose}, {OpKind::Norm, plan_general},
    {OpKind::Attention, plan_general},
}};

// A new OpKind without a row here fails to compile, not at run time.
constexpr bool table_complete() {
  for (int i = 0; i < kNumOpKinds; ++i) {
    if (kTable[size_t(i)].kind != OpKind(i) || kTable[size_t(i)].plan == nullptr) return false;
  }
  return true;
}
static_assert(table_complete(), "the CUDA kernel table must hold one row per OpKind, in OpKind order");

}  // namespace

const CudaOpImpl& cuda_op_impl(OpKind kind) { return kTable.at(size_t(kind)); }

// ---------------------------------------------------------------------------------------------
// Input assembly

// Only images (rank 4) are stored channels-last in NHWC: every other tensor is row-major.
View whole_view(void* ptr, const Shape& s, Layout layout, Elem elem) {
  if (s.rank != 4) layout = Layout::Nchw;
  return View{ptr, s, s.c * s.h * s.w, layout, layout == Layout::Nhwc ? s.c : 0, elem};
}

View PlanCtx::scratch(const Shape& s) {
  return whole_view(scratch_bytes(size_t(s.numel()) * elem_bytes(eng.elem())), s, eng.layout(), eng.elem());
}

void* PlanCtx::scratch_bytes(size_t bytes) {
  const size_t at = (scratch_top + 255) / 256 * 256;  // keep every buffer 256-byte aligned
  scratch_top = at + bytes;
  char* base = dry ? nullptr : static_cast<char*>(res.scratch());
  HIOS_CHECK(dry || at + bytes <= res.scratch_bytes(), "node '%s': scratch arena of stream %d too small (%zu < %zu)",
             node_name.c_str(), res.index(), res.scratch_bytes(), at + bytes);
  return base ? base + at : nullptr;
}

View PlanCtx::packed(const View& v) {
  if (v.packed()) return v;
  View dst = scratch(v.shape);
  if (!dry) emit([p = copy_params(v, dst)](StreamResources& r) { launch_combine(p, r.stream()); });
  return dst;
}

View PlanCtx::rows_of(const View& v, int64_t first, int64_t count) {
  if (first == 0 && count == v.shape.h) return packed(v);
  Shape s = v.shape;
  s.h = count;
  if (v.nhwc()) {
    // A packed batch-1 NHWC tensor's rows hold every channel: the band is an offset.
    if (s.n == 1 && v.packed()) return whole_view(v.at(first * s.w * s.c), s, v.layout, v.elem);
  } else if (s.n * s.c == 1) {
    return whole_view(v.at(first * s.w), s, v.layout, v.elem);  // one plane: an offset
  }
  const View src = v.nhwc() ? packed(v) : v;
  View dst = scratch(s);
  if (!dry) {
    RowsParams p;
    p.dst = dst.ptr;
    p.elem = dst.elem;
    p.dst_batch_stride = dst.item();
    p.dst_plane = s.h * s.w;
    p.channels = v.nhwc() ? 1 : s.c;
    p.batch = int(s.n);
    p.num_segments = 1;
    p.segs[0] = row_segment(src, first, count, dst.ptr, count, 0);
    emit([p](StreamResources& r) { launch_rows(p, r.stream()); });
  }
  return dst;
}

void PlanCtx::assemble_into(const std::vector<Term>& terms, const View& dst, bool relu) {
  if (dry || terms.empty()) return;
  const Graph& g = eng.graph();
  // One piece per (term, run of at most kMaxCombineSrcs values); pieces after a term's first
  // add into what the first wrote, so they go in later launches.
  struct Piece {
    CombineTerm term;
    std::vector<CombineSrc> srcs;
    int pass;
  };
  std::vector<Piece> pieces;
  const int64_t hw = dst.shape.h * dst.shape.w;
  // In NHWC a term is its channels of every pixel (dst is packed: pixels dst.shape.c apart),
  // unless it is all of dst's channels and every source is packed too: then one flat block.
  const bool nhwc = dst.nhwc() && hw > 1;
  int64_t c0 = 0;
  int passes = 1;
  for (const Term& t : terms) {
    const int64_t ct = g.value_shape(t.at(0)).c;
    bool flat = !nhwc || ct == dst.shape.c;
    for (const Value& val : t) flat = flat && (!nhwc || eng.value_view(val).packed());
    for (size_t first = 0, pass = 0; first < t.size(); first += kMaxCombineSrcs, ++pass) {
      Piece pc;
      pc.pass = int(pass);
      pc.term.dst_offset = nhwc ? c0 : c0 * hw;
      pc.term.len = flat ? ct * hw : ct;
      pc.term.rows = flat ? 1 : hw;
      pc.term.dst_row_stride = flat ? 0 : dst.shape.c;
      AccessWidth width(dst.elem);
      width.count(pc.term.len);
      width.count(pc.term.dst_row_stride);
      if (dst.shape.n > 1) width.count(dst.item());
      width.address(dst.at(pc.term.dst_offset));
      for (size_t i = first; i < std::min(t.size(), first + kMaxCombineSrcs); ++i) {
        View v = eng.value_view(t[i]);
        CombineSrc s{v.ptr, v.shape.n == 1 ? v.item() : v.batch_stride, flat ? 0 : v.pixel_stride};
        width.address(s.ptr);
        width.count(s.row_stride);
        if (v.shape.n > 1) width.count(s.batch_stride);
        pc.srcs.push_back(s);
      }
      pc.term.vec = width.width();
      // The ReLU goes on a term's last write, once its sum is whole.
      pc.term.relu = relu && first + kMaxCombineSrcs >= t.size() ? 1 : 0;
      passes = std::max(passes, int(pass) + 1);
      pieces.push_back(std::move(pc));
    }
    c0 += ct;
  }
  for (int pass = 0; pass < passes; ++pass) {
    CombineParams p;
    auto flush = [&]() {
      if (p.num_terms == 0) return;
      CombineParams q = p;
      emit([q](StreamResources& r) { launch_combine(q, r.stream()); });
      p = CombineParams();
    };
    int nsrc = 0;
    for (const Piece& pc : pieces) {
      if (pc.pass != pass) continue;
      if (p.num_terms == kMaxCombineTerms || nsrc + int(pc.srcs.size()) > kMaxCombineSrcs) {
        flush();
        nsrc = 0;
      }
      p.dst = dst.ptr;
      p.elem = dst.elem;
      p.dst_batch_stride = dst.item();
      p.batch = int(dst.shape.n);
      p.accumulate = pass > 0;
      CombineTerm t = pc.term;
      t.first = nsrc;
      t.count = int(pc.srcs.size());
      for (const CombineSrc& s : pc.srcs) p.srcs[nsrc++] = s;
      p.terms[p.num_terms++] = t;
    }
    flush();
  }
}

View PlanCtx::input_of(const std::vector<Term>& terms, const Shape& shape, const View* dst_hint, bool relu) {
  if (terms.size() == 1 && terms[0].size() == 1) {
    // A single value is read where its producer left it: no copy (relu_fold.hpp never asks an
    // identity of one value for a ReLU).
    HIOS_CHECK(!relu, "node '%s': a ReLU on a single value read in place", node_name.c_str());
    return eng.value_view(terms[0][0]);
  }
  View dst = dst_hint ? *dst_hint : scratch(shape);
  assemble_into(terms, dst, relu);
  return dst;
}

void plan_node(PlanCtx& c, int id) {
  const Graph& g = c.eng.graph();
  const Node& nd = g.nodes.at(size_t(id));
  if (!c.dry) c.eng.load_params(id);
  const View out = c.eng.node_view(id);
  const OpDef& def = op_def(nd.op.kind);
  // graph/relu_fold.hpp: a node storing relu(value) ends in a ReLU epilogue (the assembly's
  // write, a convolution's activation), and a sequential reading one skips its first ReLU.
  const bool store_relu = c.eng.stores_relu(id);
  const Op op = store_relu ? with_output_relu(nd.op) : nd.op;
  c.input_relu_stored = nd.inputs.size() == 1 && nd.inputs[0].size() == 1 && c.eng.stores_relu(nd.inputs[0][0].node);
  if (def.general) check_general_node(nd);
  c.node = id;
  std::vector<View> in;
  if (nd.op.kind == OpKind::Input) {
    // No inputs.
  } else if (def.terms_are_operands) {
    for (const Term& t : nd.inputs) {
      Shape s = g.value_shape(t.at(0));
      in.push_back(c.input_of({t}, s, nullptr));
    }
  } else {
    // Identity assembles straight into its own output.
    Shape s = nd.shape;
    if (nd.op.kind != OpKind::Identity) {
      s = g.value_shape(nd.inputs.at(0).at(0));
      s.c = 0;
      for (const Term& t : nd.inputs) s.c += g.value_shape(t.at(0)).c;
    }
    const bool identity = nd.op.kind == OpKind::Identity;
    if (const Term* r = nd.residual_term()) {
      // A residual convolution: its input terms, then the residual (ConvAttrs::residual).
      s.c = 0;
      for (size_t t = 0; t < nd.input_terms(); ++t) s.c += g.value_shape(nd.inputs[t].at(0)).c;
      in.push_back(c.input_of(std::vector<Term>(nd.inputs.begin(), nd.inputs.end() - 1), s, nullptr));
      in.push_back(c.input_of({*r}, nd.shape, nullptr));
    } else {
      in.push_back(c.input_of(nd.inputs, s, identity ? &out : nullptr, identity && store_relu));
    }
  }
  cuda_op_impl(op.kind).plan(c, op, nd.name, in, out);
}

}  // namespace hios::cuda
