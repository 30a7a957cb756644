// The cuDNN graph API as the convolutions use it (executor/cuda/conv_graph_api.hpp).
#include "executor/cuda/conv_graph_api.hpp"

#include <algorithm>


namespace hios::cuda::graph_api {

// The byte alignment of a pointer, up to 16: what a graph-API tensor promises. Bands of 16-bit
// tensors start at any element, so 2, 4 and 8 occur, and an engine finalized for one may refuse
// another at execution (CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER): the promise is the real one.
int64_t alignment_of(const void* p, Elem) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int64_t al = 16;
  while (al > 1 && (a & uintptr_t(al - 1)) != 0) al /= 2;
  return al;
}

BeP be(cudnnBackendDescriptorType_t t) { return std::make_shared<Be>(t); }

void be_set(const BeP& b, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void* v) {
  HIOS_CUDNN_CHECK(cudnnBackendSetAttribute(b->d, a, t, n, v));
}

namespace {

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
  // A NaN through the fused ReLU stays NaN, as in ONNX Runtime; the default drops it. cuDNN 9
  // marks the attribute deprecated, and a library that no longer takes it keeps its default,
  // so its status is not an error here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  const cudnnNanPropagation_t keep_nan = CUDNN_PROPAGATE_NAN;
  (void)cudnnBackendSetAttribute(pw->d, CUDNN_ATTR_POINTWISE_NAN_PROPAGATION, CUDNN_TYPE_NAN_PROPOGATION, 1, &keep_nan);
#pragma GCC diagnostic pop
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

}  // namespace

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
    // conv (+ z) (+ bias) (+ activation): each step a pointwise op on the one before it, the last
    // writing y, the others virtual fp32 tensors (uids from 11; without a residual the bias's is
    // 11, as it always was).
    const std::array<int64_t, 4> dims{ys.n, ys.c, ys.h, ys.w};
    const bool has_act = p.act != Activation::None;
    BeP cur = conv_out;
    int64_t next_virtual = 11;
    auto step = [&](cudnnPointwiseMode_t mode, const BeP& operand, bool last) {
      BeP out = last ? be_tensor(kUidY, dims, false, ay, nhwc, st) : be_tensor(next_virtual++, dims, true, 16, nhwc, acc);
      BeP op = be_pointwise(mode, cur, operand, out, g->keep);
      if (operand) g->keep.push_back(operand);
      g->keep.insert(g->keep.end(), {out, op});
      ops.push_back(op->d);
      cur = out;
    };
    if (p.residual()) {  // the skip connection in the convolution's epilogue
      step(CUDNN_POINTWISE_ADD, be_tensor(kUidZ, dims, false, alignment_of(p.z.ptr, e), nhwc, st), !p.b && !has_act);
      g->has_residual = true;
    }
    if (p.b) {
      step(CUDNN_POINTWISE_ADD, be_tensor(kUidB, {1, ys.c, 1, 1}, false, alignment_of(p.b, e), nhwc, st), !has_act);
      g->has_bias = true;
    }
    if (has_act) {
      step(p.act == Activation::Relu      ? CUDNN_POINTWISE_RELU_FWD
           : p.act == Activation::Sigmoid ? CUDNN_POINTWISE_SIGMOID_FWD
                                          : CUDNN_POINTWISE_TANH_FWD,
           nullptr, true);
    }
  }
  g->graph = be(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  be_set(g->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()), ops.data());
  be_set(g->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  if (cudnnBackendFinalize(g->graph->d) != CUDNN_STATUS_SUCCESS) return nullptr;
  return g;
}

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

void BeExec::run(cudnnHandle_t h, void* ws) {
  if (!pack || pack_ws != ws) {
    pack = make_variant_pack(uids, ptrs, ws);
    pack_ws = ws;
  }
  HIOS_CUDNN_CHECK(cudnnBackendExecute(h, plan->d, pack->d));
}

}  // namespace hios::cuda::graph_api
