#include "executor/cuda/conv.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "executor/cuda/check.hpp"
#include "executor/cuda/kernels.hpp"
#include "executor/watchdog.hpp"

namespace hios::cuda {

namespace {

const float kOne = 1.0f;
const float kZero = 0.0f;

int act_code(Activation a) { return static_cast<int>(a); }  // kernels.hpp's codes follow the enum

// The arguments hios's own kernels (depthwise, direct) share, from a problem: shared by
// autotuning and execution so the timed launch is exactly the launch that runs.
template <typename Params>
Params kernel_params(const ConvProblem& p) {
  Params dp;
  dp.x = p.x.ptr;
  dp.w = p.w;
  dp.b = p.b;
  dp.y = p.y.ptr;
  dp.n = int(p.x.shape.n);
  dp.c = int(p.x.shape.c);
  dp.h = int(p.x.shape.h);
  dp.w_in = int(p.x.shape.w);
  dp.oh = int(p.y.shape.h);
  dp.ow = int(p.y.shape.w);
  dp.kh = p.kernel[0];
  dp.kw = p.kernel[1];
  dp.sh = p.stride[0];
  dp.sw = p.stride[1];
  dp.ph = p.padding[0];
  dp.pw = p.padding[1];
  dp.input_relu = p.input_relu;
  // With a residual the activation comes after the sum: residual_epilogue applies both.
  dp.act = p.residual() ? 0 : act_code(p.act);
  dp.nhwc = p.x.nhwc() ? 1 : 0;
  dp.elem = p.x.elem;
  return dp;
}

// What hios's kernels leave to a pass of their own: a residual's sum and the activation after
// it (their own epilogues take the bias and an activation only).
struct ResidualEpilogue {
  void* y = nullptr;
  const void* z = nullptr;
  int act = 0;
  Shape ys;
  int nhwc = 0;
  Elem elem = Elem::F32;
  void operator()(cudaStream_t st) const {
    if (z) launch_bias_act(y, y, nullptr, act, ys.n, ys.c, ys.h * ys.w, nhwc, elem, st, z);
  }
};
ResidualEpilogue residual_epilogue(const ConvProblem& p) {
  return {p.y.ptr, p.z.ptr, act_code(p.act), p.y.shape, p.y.nhwc() ? 1 : 0, p.y.elem};
}

DepthwiseParams depthwise_params(const ConvProblem& p) {
  DepthwiseParams dp = kernel_params<DepthwiseParams>(p);
  dp.dh = p.dilation[0];
  dp.dw = p.dilation[1];
  return dp;
}

// The direct kernel's arguments: the fallback for problems nothing else takes.
DirectConvParams direct_params(const ConvProblem& p) {
  DirectConvParams dp = kernel_params<DirectConvParams>(p);
  dp.oc = int(p.out_channels);
  dp.groups = int(p.groups);
  dp.dh = p.dilation[0];
  dp.dw = p.dilation[1];
  return dp;
}

// The legacy API has one padding per dimension: it takes a band only when the band's H
// paddings above and below are equal.
bool legacy_fits(const ConvProblem& p) { return p.cudnn_ok && p.padding[0] == p.pad_bottom; }

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The byte alignment of a pointer, up to 16: what a graph-API tensor promises. Bands of 16-bit
// tensors start at any element, so 2, 4 and 8 occur, and an engine finalized for one may refuse
// another at execution (CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER): the promise is the real one.
int64_t alignment_of(const void* p, Elem) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int64_t al = 16;
  while (al > 1 && (a & uintptr_t(al - 1)) != 0) al /= 2;
  return al;
}

// ---------------------------------------------------------------------------------------------
// cuDNN graph API helpers

struct Be {
  cudnnBackendDescriptor_t d = nullptr;
  explicit Be(cudnnBackendDescriptorType_t t) { HIOS_CUDNN_CHECK(cudnnBackendCreateDescriptor(t, &d)); }
  ~Be() {
    if (d) (void)cudnnBackendDestroyDescriptor(d);
  }
  Be(const Be&) = delete;
  Be& operator=(const Be&) = delete;
};
using BeP = std::shared_ptr<Be>;

BeP be(cudnnBackendDescriptorType_t t) { return std::make_shared<Be>(t); }

void be_set(const BeP& b, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void* v) {
  HIOS_CUDNN_CHECK(cudnnBackendSetAttribute(b->d, a, t, n, v));
}

// A packed tensor of dims (n, c, h, w) (for a filter: k, c/g, r, s), stored NCHW or NHWC
// (a filter: KCRS or KRSC), of element type f (virtual intermediates: fp32).
BeP be_tensor(int64_t uid, const std::array<int64_t, 4>& dims, bool is_virtual, int64_t align, bool nhwc,
              cudnnDataType_t f) {
  const std::array<int64_t, 4> strides =
      nhwc ? std::array<int64_t, 4>{dims[1] * dims[2] * dims[3], 1, dims[3] * dims[1], dims[1]}
           : std::array<int64_t, 4>{dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
  BeP t = be(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  be_set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
  be_set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
  be_set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
  be_set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  be_set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  if (is_virtual) {
    const bool v = true;
    be_set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
  }
  HIOS_CUDNN_CHECK(cudnnBackendFinalize(t->d));
  return t;
}

BeP be_pointwise(cudnnPointwiseMode_t mode, const BeP& x, const BeP& b, const BeP& y, std::vector<BeP>& keep) {
  BeP pw = be(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  const cudnnDataType_t f = CUDNN_DATA_FLOAT;
  be_set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  be_set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f);
  HIOS_CUDNN_CHECK(cudnnBackendFinalize(pw->d));
  BeP op = be(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  be_set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw->d);
  be_set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x->d);
  if (b) be_set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b->d);
  be_set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y->d);
  HIOS_CUDNN_CHECK(cudnnBackendFinalize(op->d));
  keep.push_back(pw);
  return op;
}

constexpr int64_t kUidX = 1, kUidW = 2, kUidY = 3, kUidB = 4, kUidZ = 5;

// An operation graph (convolution, optionally + bias + activation) and everything it refers to.
struct BeGraph {
  std::vector<BeP> keep;
  BeP graph;
  bool has_bias = false;
  bool has_residual = false;  // reads the residual (kUidZ)
};

// Returns null when cuDNN cannot express or finalize the graph.
std::shared_ptr<BeGraph> build_graph(cudnnHandle_t h, const ConvProblem& p, const void* x, bool fused) {
  auto g = std::make_shared<BeGraph>();
  const Shape& xs = p.x.shape;
  const Shape& ys = p.y.shape;
  const Elem e = p.x.elem;
  const int64_t ax = alignment_of(x, e), ay = alignment_of(p.y.ptr, e), aw = alignment_of(p.w, e);
  const bool nhwc = p.x.nhwc();
  // Tensors in memory are in the storage type; the convolution's output before a fused
  // epilogue is virtual, fp32 (accumulation is fp32 in every mode).
  const cudnnDataType_t st = cudnn_type(e), acc = CUDNN_DATA_FLOAT;
  BeP tx = be_tensor(kUidX, {xs.n, xs.c, xs.h, xs.w}, false, ax, nhwc, st);
  BeP tw = be_tensor(kUidW, {p.out_channels, xs.c / p.groups, p.kernel[0], p.kernel[1]}, false, aw, nhwc, st);
  const bool pointwise = fused && (p.b != nullptr || p.act != Activation::None || p.residual());
  BeP conv_out = pointwise ? be_tensor(10, {ys.n, ys.c, ys.h, ys.w}, true, 16, nhwc, acc)
                           : be_tensor(kUidY, {ys.n, ys.c, ys.h, ys.w}, false, ay, nhwc, st);
  g->keep = {tx, tw, conv_out};

  BeP cd = be(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t dims = 2;
  const cudnnDataType_t f = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t pad[2] = {p.padding[0], p.padding[1]}, post[2] = {p.pad_bottom, p.padding[1]},
                str[2] = {p.stride[0], p.stride[1]}, dil[2] = {p.dilation[0], p.dilation[1]};
  be_set(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
  be_set(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
  be_set(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  be_set(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  be_set(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, post);
  be_set(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
  be_set(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str);
  HIOS_CUDNN_CHECK(cudnnBackendFinalize(cd->d));
  g->keep.push_back(cd);

  BeP op = be(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  const float alpha = 1.0f, beta = 0.0f;
  be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx->d);
  be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw->d);
  be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv_out->d);
  be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd->d);
  be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
  be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
  if (cudnnBackendFinalize(op->d) != CUDNN_STATUS_SUCCESS) return nullptr;
  g->keep.push_back(op);
  std::vector<cudnnBackendDescriptor_t> ops{op->d};

  if (pointwise) {
    BeP cur = conv_out;
    const bool last_is_bias = p.act == Activation::None;
    if (p.residual()) {
      // conv + z + bias, then the activation: the skip connection in the convolution's epilogue.
      const bool last = last_is_bias && !p.b;
      BeP tz = be_tensor(kUidZ, {ys.n, ys.c, ys.h, ys.w}, false, alignment_of(p.z.ptr, e), nhwc, st);
      BeP out = last ? be_tensor(kUidY, {ys.n, ys.c, ys.h, ys.w}, false, ay, nhwc, st)
                     : be_tensor(12, {ys.n, ys.c, ys.h, ys.w}, true, 16, nhwc, acc);
      BeP add = be_pointwise(CUDNN_POINTWISE_ADD, cur, tz, out, g->keep);
      g->keep.insert(g->keep.end(), {tz, out, add});
      ops.push_back(add->d);
      cur = out;
      g->has_residual = true;
    }
    if (p.b) {
      BeP tb = be_tensor(kUidB, {1, ys.c, 1, 1}, false, alignment_of(p.b, e), nhwc, st);
      BeP out = last_is_bias ? be_tensor(kUidY, {ys.n, ys.c, ys.h, ys.w}, false, ay, nhwc, st)
                             : be_tensor(11, {ys.n, ys.c, ys.h, ys.w}, true, 16, nhwc, acc);
      BeP add = be_pointwise(CUDNN_POINTWISE_ADD, cur, tb, out, g->keep);
      g->keep.insert(g->keep.end(), {tb, out, add});
      ops.push_back(add->d);
      cur = out;
      g->has_bias = true;
    }
    if (p.act != Activation::None) {
      const cudnnPointwiseMode_t m = p.act == Activation::Relu      ? CUDNN_POINTWISE_RELU_FWD
                                     : p.act == Activation::Sigmoid ? CUDNN_POINTWISE_SIGMOID_FWD
                                                                    : CUDNN_POINTWISE_TANH_FWD;
      BeP out = be_tensor(kUidY, {ys.n, ys.c, ys.h, ys.w}, false, ay, nhwc, st);
      BeP a = be_pointwise(m, cur, nullptr, out, g->keep);
      g->keep.insert(g->keep.end(), {out, a});
      ops.push_back(a->d);
    }
  }
  g->graph = be(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  be_set(g->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()), ops.data());
  be_set(g->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  if (cudnnBackendFinalize(g->graph->d) != CUDNN_STATUS_SUCCESS) return nullptr;
  return g;
}

struct EngineInfo {
  int64_t index = -1;
  bool tensor_core = false, down_convert = false, nondeterministic = false, runtime_compiled = false;
};

EngineInfo engine_info(const BeP& cfg) {
  EngineInfo info;
  BeP eng = be(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg->d, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng->d) !=
      CUDNN_STATUS_SUCCESS) {
    return info;
  }
  (void)cudnnBackendGetAttribute(eng->d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &info.index);
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  n = 0;
  if (cudnnBackendGetAttribute(eng->d, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < n; ++i) {
      info.tensor_core |= notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
      info.down_convert |= notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS;
      info.nondeterministic |= notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    }
  }
  cudnnBackendBehaviorNote_t bnotes[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  n = 0;
  if (cudnnBackendGetAttribute(eng->d, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, bnotes) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < n; ++i) info.runtime_compiled |= bnotes[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
  }
  return info;
}

std::vector<BeP> heuristic_configs(const BeGraph& g, cudnnBackendHeurMode_t mode, int most) {
  BeP h = be(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  be_set(h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g.graph->d);
  be_set(h, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (cudnnBackendFinalize(h->d) != CUDNN_STATUS_SUCCESS) return {};
  std::vector<BeP> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < most; ++i) {
    cfgs.push_back(be(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(cfgs.back()->d);
  }
  int64_t got = 0;
  if (cudnnBackendGetAttribute(h->d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, most, &got,
                               raw.data()) != CUDNN_STATUS_SUCCESS) {
    return {};
  }
  cfgs.resize(size_t(std::max<int64_t>(0, std::min<int64_t>(got, most))));
  return cfgs;
}

BeP make_plan(cudnnHandle_t h, const BeP& cfg) {
  BeP plan = be(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  be_set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  be_set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg->d);
  if (cudnnBackendFinalize(plan->d) != CUDNN_STATUS_SUCCESS) return nullptr;
  return plan;
}

int64_t plan_workspace(const BeP& plan) {
  int64_t ws = 0, n = 0;
  HIOS_CUDNN_CHECK(cudnnBackendGetAttribute(plan->d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                            &ws));
  return ws;
}

BeP make_variant_pack(const std::vector<int64_t>& uids, const std::vector<void*>& ptrs, void* ws) {
  BeP vp = be(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  be_set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data());
  be_set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()), ptrs.data());
  be_set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  HIOS_CUDNN_CHECK(cudnnBackendFinalize(vp->d));
  return vp;
}

// A graph-API plan and the node's pointers. The variant pack names the workspace, which is
// only known once every node of the stream is planned: it is built on first use (the eager
// pass before any capture) and again should the stream's workspace ever move.
struct BeExec {
  std::shared_ptr<BeGraph> graph;
  BeP plan;
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  BeP pack;
  void* pack_ws = nullptr;
  void run(cudnnHandle_t h, void* ws) {
    if (!pack || pack_ws != ws) {
      pack = make_variant_pack(uids, ptrs, ws);
      pack_ws = ws;
    }
    HIOS_CUDNN_CHECK(cudnnBackendExecute(h, plan->d, pack->d));
  }
};

// ---------------------------------------------------------------------------------------------
// Legacy descriptors

struct LegacyDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, b = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
  LegacyDescs(const ConvProblem& p) {
    HIOS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    HIOS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    HIOS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&b));
    HIOS_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    HIOS_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    HIOS_CUDNN_CHECK(cudnnCreateActivationDescriptor(&act));
    const Shape& xs = p.x.shape;
    const Shape& ys = p.y.shape;
    // NHWC: activations channels-last and the filter KRSC (Engine::to_channels_last).
    const cudnnTensorFormat_t fmt = p.x.nhwc() ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    // 16-bit storage: x, w, y and the bias in that type, fp32 compute ("pseudo-half").
    const cudnnDataType_t st = cudnn_type(p.x.elem);
    HIOS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, fmt, st, int(xs.n), int(xs.c), int(xs.h), int(xs.w)));
    HIOS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, fmt, st, int(ys.n), int(ys.c), int(ys.h), int(ys.w)));
    HIOS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(b, CUDNN_TENSOR_NCHW, st, 1, int(ys.c), 1, 1));
    HIOS_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, st, fmt, int(p.out_channels), int(xs.c / p.groups),
                                                p.kernel[0], p.kernel[1]));
    HIOS_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, p.padding[0], p.padding[1], p.stride[0], p.stride[1],
                                                     p.dilation[0], p.dilation[1], CUDNN_CROSS_CORRELATION,
                                                     CUDNN_DATA_FLOAT));
    HIOS_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, int(p.groups)));
    // CUDNN_DEFAULT_MATH lets cuDNN use TF32 tensor cores for float data; FMA forbids them;
    // 16-bit data asks for tensor cores outright.
    HIOS_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, p.fp32                ? CUDNN_FMA_MATH
                                                       : p.x.elem != Elem::F32 ? CUDNN_TENSOR_OP_MATH
                                                                               : CUDNN_DEFAULT_MATH));
    const cudnnActivationMode_t m = p.act == Activation::Relu      ? CUDNN_ACTIVATION_RELU
                                    : p.act == Activation::Sigmoid ? CUDNN_ACTIVATION_SIGMOID
                                    : p.act == Activation::Tanh    ? CUDNN_ACTIVATION_TANH
                                    : p.act == Activation::Relu6   ? CUDNN_ACTIVATION_CLIPPED_RELU
                                                                   : CUDNN_ACTIVATION_IDENTITY;
    HIOS_CUDNN_CHECK(cudnnSetActivationDescriptor(act, m, CUDNN_NOT_PROPAGATE_NAN, p.act == Activation::Relu6 ? 6.0 : 0.0));
  }
  ~LegacyDescs() {
    (void)cudnnDestroyTensorDescriptor(x);
    (void)cudnnDestroyTensorDescriptor(y);
    (void)cudnnDestroyTensorDescriptor(b);
    (void)cudnnDestroyFilterDescriptor(w);
    (void)cudnnDestroyConvolutionDescriptor(conv);
    (void)cudnnDestroyActivationDescriptor(act);
  }
  LegacyDescs(const LegacyDescs&) = delete;
  LegacyDescs& operator=(const LegacyDescs&) = delete;
};

// ---------------------------------------------------------------------------------------------
// The choice, cached per device and problem signature.

enum class Impl { GraphFused, GraphConv, Legacy, Depthwise, Direct };

struct Choice {
  Impl impl = Impl::Legacy;
  BeP plan;                        // graph API
  std::shared_ptr<BeGraph> graph;  // keeps the plan's descriptors alive
  bool graph_bias = false;         // the fused graph reads the bias
  cudnnConvolutionFwdAlgo_t algo{};
  cudnnMathType_t math{};
  bool legacy_fused = false;
  int config_index = -1;           // graph API: position in heuristic_configs_for's list
  int depthwise_variant = 0;       // hios depthwise: DepthwiseParams::variant
  size_t workspace = 0;
  double ms = 0;
  std::string what;
};

struct ChoiceCache {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Choice>> entries;
};
ChoiceCache& choice_cache(int device) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<ChoiceCache>> caches;
  std::lock_guard<std::mutex> lock(mu);
  auto& c = caches[device];
  if (!c) c = std::make_unique<ChoiceCache>();
  return *c;
}

// Runs what a candidate would run (relu pre-pass included) on the planning stream.
using Trial = std::function<void(cudaStream_t, cudnnHandle_t, void* ws, size_t ws_bytes)>;

void relu_pass(cudaStream_t st, const ConvProblem& p) {
  const Shape& s = p.x.shape;
  launch_bias_act(p.x.ptr, p.relu_tmp.ptr, nullptr, act_code(Activation::Relu), s.n, s.c, s.h * s.w, 0, p.x.elem, st);
}

std::string key_of(const ConvProblem& p, const void* x) {
  const Shape& s = p.x.shape;
  // A whole tensor's signature is unchanged by row splits (recorded recipes stay valid); a
  // band's unequal H paddings, or its hios-only geometry, add to it.
  std::string band;
  if (p.pad_bottom != p.padding[0]) band += strprintf(" post%d", p.pad_bottom);
  if (!p.cudnn_ok) band += " hios-only";
  // Layouts are problems of their own; NCHW keys stay as they were (recorded recipes).
  if (p.x.nhwc()) band += " nhwc";
  if (p.residual()) band += " residual";
  if (p.x.elem != Elem::F32) {
    // 16-bit storage: the exact alignments (a band's pointer may sit at any element).
    band += strprintf(" al%lld,%lld,%lld", (long long)alignment_of(x, p.x.elem),
                      (long long)alignment_of(p.y.ptr, p.x.elem), (long long)alignment_of(p.w, p.x.elem));
  }
  return strprintf("x%lldx%lldx%lldx%lld w%lldx%lldx%dx%d p%d,%d s%d,%d d%d,%d g%lld %s b%d %s%s a%d%d%d",
                   (long long)s.n, (long long)s.c, (long long)s.h, (long long)s.w, (long long)p.out_channels,
                   (long long)(s.c / p.groups), p.kernel[0], p.kernel[1], p.padding[0], p.padding[1], p.stride[0],
                   p.stride[1], p.dilation[0], p.dilation[1], (long long)p.groups,
                   p.x.elem == Elem::F16 ? "fp16" : p.x.elem == Elem::BF16 ? "bf16" : p.fp32 ? "fp32" : "tf32",
                   int(p.b != nullptr), activation_name(p.act), p.input_relu ? " relu-in" : "", int(aligned16(x)),
                   int(aligned16(p.y.ptr)), int(aligned16(p.w))) +
         band;
}

// The graph API's candidate configurations of one operation graph, in a fixed order: a
// recipe names its choice by position here (the heuristics answer alike for the same device,
// cuDNN and problem, which the profile database's identity pins).
std::vector<BeP> heuristic_configs_for(const BeGraph& g) {
  std::vector<BeP> cfgs = heuristic_configs(g, CUDNN_HEUR_MODE_A, 12);
  for (BeP& extra : heuristic_configs(g, CUDNN_HEUR_MODE_FALLBACK, 4)) cfgs.push_back(extra);
  return cfgs;
}

// Engines hios may run: no down-conversion to half precision, deterministic (a captured graph
// replays the eager result bit for bit), no TF32 in fp32 mode, and precompiled (engines
// compiled at run time, NVRTC, take up to a second each to finalize, for every signature of
// every model; precompiled ones cover these problems).
bool usable_engine(const EngineInfo& info, bool fp32) {
  return !info.down_convert && !info.nondeterministic && !(fp32 && info.tensor_core) && !info.runtime_compiled;
}

// A graph-API choice: configuration `index` of heuristic_configs_for, planned as `plan`.
std::shared_ptr<Choice> graph_choice(bool fused, const std::shared_ptr<BeGraph>& g, const BeP& plan, size_t workspace,
                                     int index, const EngineInfo& info) {
  auto ch = std::make_shared<Choice>();
  ch->impl = fused ? Impl::GraphFused : Impl::GraphConv;
  ch->plan = plan;
  ch->graph = g;
  ch->graph_bias = fused && g->has_bias;
  ch->workspace = workspace;
  ch->config_index = index;
  ch->what = strprintf("graph engine %lld%s%s", (long long)info.index, fused ? " fused" : " + epilogue",
                       info.tensor_core ? " tc" : "");
  return ch;
}

// Recipes adopted from a profile database, per device: signature key -> recipe.
struct RecipeBook {
  std::mutex mu;
  std::map<std::string, json> entries;
};
RecipeBook& recipe_book(int device) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<RecipeBook>> books;
  std::lock_guard<std::mutex> lock(mu);
  auto& b = books[device];
  if (!b) b = std::make_unique<RecipeBook>();
  return *b;
}

const char* impl_recipe_name(Impl i) {
  switch (i) {
    case Impl::GraphFused: return "graph-fused";
    case Impl::GraphConv: return "graph";
    case Impl::Legacy: return "legacy";
    case Impl::Depthwise: return "depthwise";
    case Impl::Direct: return "direct";
  }
  return "?";
}

json recipe_of(const Choice& ch) {
  json r = json::object();
  r["impl"] = impl_recipe_name(ch.impl);
  if (ch.impl == Impl::GraphFused || ch.impl == Impl::GraphConv) r["config"] = ch.config_index;
  if (ch.impl == Impl::Depthwise) r["variant"] = ch.depthwise_variant;
  if (ch.impl == Impl::Legacy) {
    r["algo"] = int(ch.algo);
    r["math"] = int(ch.math);
    r["fused"] = ch.legacy_fused;
  }
  r["ms"] = ch.ms;
  return r;
}

// Rebuilds a recorded choice without timing anything; null when the recipe does not fit this
// problem any more (then the caller times the candidates as usual).
std::shared_ptr<Choice> rebuild(PlanCtx& c, const ConvProblem& p, const json& r) {
  const std::string impl = r.value("impl", std::string());
  const void* x = p.input_relu ? p.relu_tmp.ptr : p.x.ptr;
  auto ch = std::make_shared<Choice>();
  ch->ms = r.value("ms", 0.0);
  if (impl == "depthwise") {
    if (!depthwise_kernel_fits(p)) return nullptr;
    ch->impl = Impl::Depthwise;
    // Recipes from before the variants name none: variant 1 is the kernel they timed.
    const int64_t variant = r.value("variant", int64_t(1));
    if (variant != 0 && variant != 1) return nullptr;
    ch->depthwise_variant = int(variant);
    ch->what = variant == 0 ? "hios depthwise" : "hios depthwise rows";
  } else if (impl == "direct") {
    ch->impl = Impl::Direct;
    ch->what = "hios direct";
  } else if (impl == "graph-fused" || impl == "graph") {
    if (!p.cudnn_ok) return nullptr;
    const bool fused = impl == "graph-fused";
    const int64_t index = r.value("config", int64_t(-1));
    std::shared_ptr<BeGraph> g = build_graph(c.res.cudnn(), p, x, fused);
    if (!g) return nullptr;
    const std::vector<BeP> cfgs = heuristic_configs_for(*g);
    if (index < 0 || index >= int64_t(cfgs.size())) return nullptr;
    const EngineInfo info = engine_info(cfgs[size_t(index)]);
    if (!usable_engine(info, p.fp32)) return nullptr;
    BeP plan = make_plan(c.res.cudnn(), cfgs[size_t(index)]);
    if (!plan) return nullptr;
    size_t ws_bytes = 0;
    (void)c.eng.find_workspace(&ws_bytes);
    const int64_t need = plan_workspace(plan);
    if (need < 0 || size_t(need) > ws_bytes) return nullptr;
    const double ms = ch->ms;
    ch = graph_choice(fused, g, plan, size_t(need), int(index), info);
    ch->ms = ms;
  } else if (impl == "legacy") {
    const int64_t algo = r.value("algo", int64_t(-1)), math = r.value("math", int64_t(-1));
    if (!legacy_fits(p)) return nullptr;
    if (algo < 0 || algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT || math < 0 || math > 3) return nullptr;
    if (p.fp32 && cudnnMathType_t(math) != CUDNN_FMA_MATH) return nullptr;
    LegacyDescs d(p);
    HIOS_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, cudnnMathType_t(math)));
    size_t need = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(c.res.cudnn(), d.x, d.w, d.conv, d.y, cudnnConvolutionFwdAlgo_t(algo),
                                                &need) != CUDNN_STATUS_SUCCESS) {
      return nullptr;
    }
    ch->impl = Impl::Legacy;
    ch->algo = cudnnConvolutionFwdAlgo_t(algo);
    ch->math = cudnnMathType_t(math);
    ch->legacy_fused = r.value("fused", false);
    ch->workspace = need;
    ch->what = strprintf("legacy algo %d%s", int(algo), ch->legacy_fused ? " fused" : " + epilogue");
  } else {
    return nullptr;
  }
  ch->what += strprintf(" %.3f ms (recalled)", ch->ms);
  return ch;
}

// The implementations one convolution may run, each with the trial that times it.
struct Candidates {
  std::vector<std::shared_ptr<Choice>> choices;
  std::vector<Trial> trials;
  void add(std::shared_ptr<Choice> ch, Trial t) {
    choices.push_back(std::move(ch));
    trials.push_back(std::move(t));
  }
};

// What the cuDNN candidates' trials share: the input they read (the ReLU's output in scratch
// when a ReLU comes first), the ReLU pre-pass, and the epilogue's activation and geometry.
struct TrialInputs {
  const void* x = nullptr;
  std::function<void(cudaStream_t)> pre;
  int act = 0;
  Shape ys;
  int nhwc = 0;
  Elem elem = Elem::F32;
};

TrialInputs trial_inputs(const ConvProblem& p) {
  TrialInputs in;
  in.x = p.input_relu ? p.relu_tmp.ptr : p.x.ptr;
  in.pre = [p](cudaStream_t st) {
    if (p.input_relu) relu_pass(st, p);
  };
  in.act = act_code(p.act);
  in.ys = p.y.shape;
  in.nhwc = p.y.nhwc() ? 1 : 0;
  in.elem = p.y.elem;
  return in;
}

// cuDNN's graph API: the fused convolution (up to 3 engines of the heuristics), then the
// convolution alone with the epilogue kernel (up to 6), each within the workspace.
void add_graph_candidates(PlanCtx& c, const ConvProblem& p, const TrialInputs& in, Candidates& out) {
  StreamResources& res = c.res;
  size_t ws_bytes = 0;
  (void)c.eng.find_workspace(&ws_bytes);
  for (bool fused : {true, false}) {
    if (fused && p.b == nullptr && p.act == Activation::None && !p.residual()) continue;  // nothing to fuse
    if (fused && p.act == Activation::Relu6) continue;  // no clipped pointwise op here: the epilogue kernel clips
    std::shared_ptr<BeGraph> g = build_graph(res.cudnn(), p, in.x, fused);
    if (!g) continue;
    const std::vector<BeP> cfgs = heuristic_configs_for(*g);
    std::vector<int64_t> seen;
    int built = 0;
    const int most = fused ? 3 : 6;
    for (size_t ci = 0; ci < cfgs.size(); ++ci) {
      const BeP& cfg = cfgs[ci];
      if (built >= most) break;
      const EngineInfo info = engine_info(cfg);
      if (!usable_engine(info, p.fp32)) continue;
      if (std::find(seen.begin(), seen.end(), info.index) != seen.end()) continue;
      seen.push_back(info.index);
      BeP plan = make_plan(res.cudnn(), cfg);
      if (!plan) continue;
      const int64_t need = plan_workspace(plan);
      if (need < 0 || size_t(need) > ws_bytes) continue;
      ++built;
      std::shared_ptr<Choice> ch = graph_choice(fused, g, plan, size_t(need), int(ci), info);
      auto exec = std::make_shared<BeExec>();
      exec->graph = g;
      exec->plan = plan;
      exec->uids = {kUidX, kUidW, kUidY};
      exec->ptrs = {const_cast<void*>(in.x), const_cast<void*>(p.w), p.y.ptr};
      if (ch->graph_bias) {
        exec->uids.push_back(kUidB);
        exec->ptrs.push_back(const_cast<void*>(p.b));
      }
      if (g->has_residual) {
        exec->uids.push_back(kUidZ);
        exec->ptrs.push_back(p.z.ptr);
      }
      const void* b = p.b;
      const void* z = p.z.ptr;
      void* y = p.y.ptr;
      out.add(ch, [exec, fused, b, z, y, in](cudaStream_t st, cudnnHandle_t h, void* w, size_t) {
        in.pre(st);
        exec->run(h, w);
        if (!fused) launch_bias_act(y, y, b, in.act, in.ys.n, in.ys.c, in.ys.h * in.ys.w, in.nhwc, in.elem, st, z);
      });
    }
  }
}

// The legacy API: the algorithm cudnnFind chose, fused with the bias and activation
// (cudnnConvolutionBiasActivationForward) where that call takes the problem.
void add_legacy_candidate(PlanCtx& c, const ConvProblem& p, const std::string& key, const TrialInputs& in,
                          Candidates& out) {
  Engine& eng = c.eng;
  StreamResources& res = c.res;
  size_t ws_bytes = 0;
  void* ws = eng.find_workspace(&ws_bytes);
  const void* x = in.x;
  auto d = std::make_shared<LegacyDescs>(p);
  ConvChoice& lc = eng.find_conv(key, res, d->x, x, d->w, p.w, d->conv, d->y, p.y.ptr, p.fp32);
  HIOS_CUDNN_CHECK(cudnnSetConvolutionMathType(d->conv, lc.math));
  auto ch = std::make_shared<Choice>();
  ch->impl = Impl::Legacy;
  ch->algo = lc.algo;
  ch->math = lc.math;
  ch->workspace = lc.workspace;
  // cudnnConvolutionBiasActivationForward: ReLU with any algorithm; no activation only with
  // IMPLICIT_PRECOMP_GEMM; a bias is required (the zero one stands in).
  ch->legacy_fused = p.act == Activation::Relu ||
                     (p.act == Activation::None && p.b && lc.algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
  const void* bias = p.b ? p.b : eng.zeros(p.out_channels, res.stream());
  if (ch->legacy_fused) {
    HIOS_CUDA_CHECK(cudaStreamSynchronize(res.stream()));
    // With the workspace a launch will have (cudnnFind's, for the plain convolution): the
    // fused call may want more, and would then refuse with BAD_PARAM only when it runs.
    const cudnnStatus_t s = cudnnConvolutionBiasActivationForward(
        res.cudnn(), &kOne, d->x, x, d->w, p.w, d->conv, lc.algo, ws, std::min(ws_bytes, lc.workspace),
        p.residual() ? &kOne : &kZero, d->y, p.residual() ? p.z.ptr : p.y.ptr, d->b, bias, d->act, d->y, p.y.ptr);
    if (s == CUDNN_STATUS_NOT_SUPPORTED || s == CUDNN_STATUS_BAD_PARAM) {
      ch->legacy_fused = false;
    } else if (s != CUDNN_STATUS_SUCCESS) {
      fail_cudnn(s, "cudnnConvolutionBiasActivationForward (trial)", __FILE__, __LINE__);
    }
  }
  ch->what = strprintf("legacy algo %d%s", int(lc.algo), ch->legacy_fused ? " fused" : " + epilogue");
  const bool lf = ch->legacy_fused;
  const cudnnConvolutionFwdAlgo_t algo = lc.algo;
  const void* w = p.w;
  const void* b = p.b;
  const void* z = p.z.ptr;
  void* y = p.y.ptr;
  out.add(ch, [d, lf, algo, x, w, b, z, bias, y, in](cudaStream_t st, cudnnHandle_t h, void* wsp, size_t wsb) {
    in.pre(st);
    if (lf) {
      HIOS_CUDNN_CHECK(cudnnConvolutionBiasActivationForward(h, &kOne, d->x, x, d->w, w, d->conv, algo, wsp, wsb,
                                                             z ? &kOne : &kZero, d->y, z ? z : y, d->b, bias, d->act,
                                                             d->y, y));
    } else {
      HIOS_CUDNN_CHECK(cudnnConvolutionForward(h, &kOne, d->x, x, d->w, w, d->conv, algo, wsp, wsb, &kZero, d->y, y));
      launch_bias_act(y, y, b, in.act, in.ys.n, in.ys.c, in.ys.h * in.ys.w, in.nhwc, in.elem, st, z);
    }
  });
}

// hios's depthwise kernel. NHWC square windows have two (4 x 4 output tiles, or runs of one
// row); which is faster depends on the shape, so both are timed.
void add_depthwise_candidates(const ConvProblem& p, Candidates& out) {
  const bool two = p.x.nhwc() && p.kernel[0] == p.kernel[1] && p.stride[0] == p.stride[1] &&
                   (p.kernel[0] == 3 || p.kernel[0] == 5 || p.kernel[0] == 7);
  for (int variant = 0; variant < (two ? 2 : 1); ++variant) {
    auto ch = std::make_shared<Choice>();
    ch->impl = Impl::Depthwise;
    ch->depthwise_variant = variant;
    ch->what = variant == 0 ? "hios depthwise" : "hios depthwise rows";
    DepthwiseParams dp = depthwise_params(p);
    dp.variant = variant;
    const ResidualEpilogue after = residual_epilogue(p);
    out.add(ch, [dp, after](cudaStream_t st, cudnnHandle_t, void*, size_t) {
      launch_depthwise(dp, st);
      after(st);
    });
  }
}

// hios's direct kernel, for a problem no other candidate takes (a band whose unequal paddings
// no graph-API engine accepts, or every other candidate refused when it ran): slow, but it
// computes any convolution.
std::shared_ptr<Choice> direct_choice(const char* what) {
  auto ch = std::make_shared<Choice>();
  ch->impl = Impl::Direct;
  ch->what = what;
  return ch;
}
Trial direct_trial(const ConvProblem& p) {
  const DirectConvParams dp = direct_params(p);
  const ResidualEpilogue after = residual_epilogue(p);
  return [dp, after](cudaStream_t st, cudnnHandle_t, void*, size_t) {
    launch_conv_direct(dp, st);
    after(st);
  };
}

// Times every candidate on the planning stream (time_on_stream) and keeps the fastest. One that
// cuDNN refuses when it runs (it checks some constraints only then) drops out; if all do, the
// direct kernel runs.
std::shared_ptr<Choice> keep_fastest(PlanCtx& c, const ConvProblem& p, const std::string& key, Candidates& cands) {
  StreamResources& res = c.res;
  size_t ws_bytes = 0;
  void* ws = c.eng.find_workspace(&ws_bytes);
  const size_t n = cands.choices.size();
  size_t best = 0;
  for (size_t i = 0; i < n; ++i) {
    Choice& ch = *cands.choices[i];
    const Trial& t = cands.trials[i];
    try {
      // Each candidate gets the workspace its launches will get, no more: one that needs more
      // than it asked for is refused here, not in a pass.
      const size_t given = std::min(ws_bytes, ch.workspace);
      exec::note_main_thread_activity(strprintf("node '%s': timing convolution candidate %zu of %zu, %s, for %s",
                                                c.node_name.c_str(), i + 1, n, ch.what.c_str(), key.c_str()));
      ch.ms = time_on_stream(res.stream(), [&] { t(res.stream(), res.cudnn(), ws, given); });
    } catch (const Error& e) {
      ch.ms = INFINITY;
      ch.what += std::string(" refused: ") + e.what();
    }
    if (ch.ms < cands.choices[best]->ms) best = i;
  }
  if (n == 0 || !std::isfinite(cands.choices[best]->ms)) {
    auto ch = direct_choice("hios direct (every other candidate refused)");
    const Trial t = direct_trial(p);
    ch->ms = time_on_stream(res.stream(), [&] { t(res.stream(), res.cudnn(), nullptr, 0); });
    cands.add(ch, t);
    best = cands.choices.size() - 1;
  }
  exec::note_main_thread_activity("");
  HIOS_CHECK(std::isfinite(cands.choices[best]->ms), "node '%s': no convolution implementation ran for %s",
             c.node_name.c_str(), key.c_str());
  std::shared_ptr<Choice> ch = cands.choices[best];
  ch->what += strprintf(" %.3f ms (of %zu candidates)", ch->ms, cands.choices.size());
  return ch;
}

// The implementation a convolution runs: the families --conv-impl allows, each candidate timed.
std::shared_ptr<Choice> choose(PlanCtx& c, const ConvProblem& p, const std::string& key) {
  const ConvImpl only = c.eng.conv_impl();
  const bool want_hios = only == ConvImpl::Auto || only == ConvImpl::Hios;
  const bool legacy_ok = legacy_fits(p);
  const bool depthwise_ok = depthwise_kernel_fits(p);
  // A forced family that cannot compute a band (the legacy API and unequal paddings, hios on a
  // convolution that is not depthwise) gives way to the graph API.
  const bool want_graph = p.cudnn_ok && (only == ConvImpl::Auto || only == ConvImpl::Graph ||
                                         (only == ConvImpl::Legacy && !legacy_ok) ||
                                         (only == ConvImpl::Hios && !depthwise_ok && !legacy_ok));
  const bool want_legacy = only == ConvImpl::Auto || only == ConvImpl::Legacy;
  const TrialInputs in = trial_inputs(p);

  Candidates cands;
  if (want_graph) add_graph_candidates(c, p, in, cands);
  // The legacy API is also a candidate when nothing else is (forcing hios on a convolution its
  // depthwise kernel cannot compute, or the graph API finding no engine).
  if (legacy_ok && (want_legacy || (only == ConvImpl::Hios && !depthwise_ok) ||
                    (only == ConvImpl::Graph && cands.choices.empty()))) {
    add_legacy_candidate(c, p, key, in, cands);
  }
  if (want_hios && depthwise_ok) add_depthwise_candidates(p, cands);
  if (cands.choices.empty()) cands.add(direct_choice("hios direct"), direct_trial(p));
  return keep_fastest(c, p, key, cands);
}

}  // namespace

json conv_choices(int device) {
  json out = json::object();
  {
    RecipeBook& book = recipe_book(device);
    std::lock_guard<std::mutex> lock(book.mu);
    for (const auto& [key, r] : book.entries) out[key] = r;
  }
  ChoiceCache& cache = choice_cache(device);
  std::lock_guard<std::mutex> lock(cache.mu);
  for (const auto& [key, ch] : cache.entries) out[key] = recipe_of(*ch);
  return out;
}

void adopt_conv_choices(int device, const json& recipes) {
  HIOS_CHECK(recipes.is_object(), "algorithm choices: expected an object of signature -> recipe");
  RecipeBook& book = recipe_book(device);
  std::lock_guard<std::mutex> lock(book.mu);
  for (const auto& [key, r] : recipes.items()) {
    // Malformed recipes are skipped, not fatal: the choice is timed again instead.
    if (r.is_object() && r.contains("impl") && r["impl"].is_string()) book.entries[key] = r;
  }
}

bool depthwise_kernel_fits(const ConvProblem& p) {
  const int64_t c = p.x.shape.c;
  // Dilated windows (DeepLab's and LR-ASPP's atrous backbones) run on the generic NHWC kernel,
  // where cuDNN's grouped kernels reached a twentieth of the memory bandwidth.
  const bool dilation_ok = (p.dilation[0] == 1 && p.dilation[1] == 1) || p.x.nhwc();
  return p.groups == c && p.out_channels == c && dilation_ok &&
         p.kernel[0] <= kMaxDepthwiseKernel && p.kernel[1] <= kMaxDepthwiseKernel && p.stride[0] <= kMaxDepthwiseStride &&
         p.stride[1] <= kMaxDepthwiseStride && c <= 65535 && p.x.shape.n <= 65535;
}

void plan_convolution(PlanCtx& c, const ConvProblem& p) {
  if (c.dry) return;
  const void* x = p.input_relu ? p.relu_tmp.ptr : p.x.ptr;
  const std::string key = key_of(p, x) + " impl " + conv_impl_name(c.eng.conv_impl());
  ChoiceCache& cache = choice_cache(c.eng.device());
  std::shared_ptr<Choice> ch;
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.entries.find(key);
    if (it != cache.entries.end()) ch = it->second;
  }
  if (!ch) {
    json recipe;
    {
      RecipeBook& book = recipe_book(c.eng.device());
      std::lock_guard<std::mutex> lock(book.mu);
      auto it = book.entries.find(key);
      if (it != book.entries.end()) recipe = it->second;
    }
    if (!recipe.is_null()) ch = rebuild(c, p, recipe);
    if (!ch) {
      const auto start = std::chrono::steady_clock::now();
      ch = choose(c, p, key);
      // A choice that takes seconds (cuDNN planning, or the slow direct kernel being timed) is
      // worth a line: it is where a loading program's time goes.
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (s > 1.0) {
        std::fprintf(stderr, "hios: note: node '%s': choosing its convolution took %.1f s: %s (%s)\n",
                     c.node_name.c_str(), s, ch->what.c_str(), key.c_str());
      }
    }
    std::lock_guard<std::mutex> lock(cache.mu);
    cache.entries.emplace(key, ch);
  }
  c.eng.note_conv(key, ch->what);
  c.workspace_need = std::max(c.workspace_need, ch->workspace);

  const int act = act_code(p.act);
  const Shape ys = p.y.shape;
  const int nhwc = p.y.nhwc() ? 1 : 0;
  const Elem elem = p.y.elem;
  const ConvProblem prob = p;
  auto pre = [prob](cudaStream_t st) {
    if (prob.input_relu) relu_pass(st, prob);
  };
  switch (ch->impl) {
    case Impl::Depthwise: {
      DepthwiseParams dp = depthwise_params(p);
      dp.variant = ch->depthwise_variant;
      const ResidualEpilogue after = residual_epilogue(p);
      c.emit([dp, after](StreamResources& r) {
        launch_depthwise(dp, r.stream());
        after(r.stream());
      });
      return;
    }
    case Impl::Direct: {
      const DirectConvParams dp = direct_params(p);
      const ResidualEpilogue after = residual_epilogue(p);
      c.emit([dp, after](StreamResources& r) {
        launch_conv_direct(dp, r.stream());
        after(r.stream());
      });
      return;
    }
    case Impl::GraphFused:
    case Impl::GraphConv: {
      auto exec = std::make_shared<BeExec>();
      exec->graph = ch->graph;
      exec->plan = ch->plan;
      exec->uids = {kUidX, kUidW, kUidY};
      exec->ptrs = {const_cast<void*>(x), const_cast<void*>(p.w), p.y.ptr};
      if (ch->graph_bias) {
        exec->uids.push_back(kUidB);
        exec->ptrs.push_back(const_cast<void*>(p.b));
      }
      if (ch->graph->has_residual) {
        exec->uids.push_back(kUidZ);
        exec->ptrs.push_back(p.z.ptr);
      }
      const bool epilogue = ch->impl == Impl::GraphConv;
      const void* b = p.b;
      const void* z = p.z.ptr;
      void* y = p.y.ptr;
      c.emit([exec, epilogue, b, z, act, ys, y, pre, nhwc, elem](StreamResources& r) {
        pre(r.stream());
        exec->run(r.cudnn(), r.workspace());
        if (epilogue) launch_bias_act(y, y, b, act, ys.n, ys.c, ys.h * ys.w, nhwc, elem, r.stream(), z);
      });
      return;
    }
    case Impl::Legacy: {
      auto d = std::make_shared<LegacyDescs>(p);
      HIOS_CUDNN_CHECK(cudnnSetConvolutionMathType(d->conv, ch->math));
      const bool lf = ch->legacy_fused;
      const cudnnConvolutionFwdAlgo_t algo = ch->algo;
      const void* w = p.w;
      const void* b = p.b;
      const void* bias = p.b ? p.b : c.eng.zeros(p.out_channels, c.res.stream());
      const void* z = p.z.ptr;
      void* y = p.y.ptr;
      const std::string what = ch->what;
      c.emit([d, lf, algo, x, w, b, z, bias, y, act, ys, pre, nhwc, elem, key, what](StreamResources& r) {
        pre(r.stream());
        if (lf) {
          const cudnnStatus_t s = cudnnConvolutionBiasActivationForward(
              r.cudnn(), &kOne, d->x, x, d->w, w, d->conv, algo, r.workspace(), r.workspace_bytes(), z ? &kOne : &kZero,
              d->y, z ? z : y, d->b, bias, d->act, d->y, y);
          // The trial at planning ran this call; say which problem refused it now, and with what.
          if (s != CUDNN_STATUS_SUCCESS) {
            const std::string call = strprintf("cudnnConvolutionBiasActivationForward (%s, workspace %zu bytes) for %s",
                                               what.c_str(), r.workspace_bytes(), key.c_str());
            fail_cudnn(s, call.c_str(), __FILE__, __LINE__);
          }
        } else {
          HIOS_CUDNN_CHECK(cudnnConvolutionForward(r.cudnn(), &kOne, d->x, x, d->w, w, d->conv, algo, r.workspace(),
                                                   r.workspace_bytes(), &kZero, d->y, y));
          launch_bias_act(y, y, b, act, ys.n, ys.c, ys.h * ys.w, nhwc, elem, r.stream(), z);
        }
      });
      return;
    }
  }
}

}  // namespace hios::cuda
