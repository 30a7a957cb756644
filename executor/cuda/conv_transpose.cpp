// The transposed convolution on the CUDA backend: cuDNN's backward-data convolution, which is
// exactly a transposed convolution of its "dy" (our input) by the forward filter (our weights,
// [in][out / groups][kh][kw], KRSC in NHWC), followed by hios's bias kernel in place.
//
// cuDNN takes one padding per axis. With pads before p and after q, the output is rows
// [p, p + H_out) of the unpadded transposed result, which is what backward data with padding p
// gives for an output of H_out rows as long as the forward convolution of H_out rows lands on
// the input's rows again: 0 <= p - q + output_padding < stride. Other pads (a band of a row
// split has them, graph/ops_conv_transpose.cpp) take the unpadded result in scratch, from which
// the pad kernel crops the output's rows and columns, zeros past its end.
//
// The algorithm is cuDNN's fastest deterministic one by cudnnFind over the real buffers (any, where
// it has no deterministic one), once per signature and device (the key names every dim), with
// TF32 forbidden in fp32 mode, as the convolutions do.
#include <cudnn.h>

#include <map>
#include <memory>
#include <mutex>

#include "executor/cuda/check.hpp"
#include "executor/cuda/engine.hpp"
#include "graph/error.hpp"

namespace hios::cuda {

namespace {

struct BackwardDescs {
  cudnnTensorDescriptor_t dy = nullptr, dx = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  BackwardDescs() {
    HIOS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&dy));
    HIOS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&dx));
    HIOS_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    HIOS_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
  }
  ~BackwardDescs() {
    (void)cudnnDestroyTensorDescriptor(dy);
    (void)cudnnDestroyTensorDescriptor(dx);
    (void)cudnnDestroyFilterDescriptor(w);
    (void)cudnnDestroyConvolutionDescriptor(conv);
  }
  BackwardDescs(const BackwardDescs&) = delete;
  BackwardDescs& operator=(const BackwardDescs&) = delete;
};

struct BackwardChoice {
  cudnnConvolutionBwdDataAlgo_t algo{};
  cudnnMathType_t math{};
  size_t workspace = 0;
};
std::mutex choices_mu;
std::map<std::string, BackwardChoice>& choices() {
  static std::map<std::string, BackwardChoice> c;
  return c;
}

int checked_int(int64_t v, const std::string& node, const char* what) {
  HIOS_CHECK(v >= 0 && v <= (int64_t(1) << 31) - 1, "node '%s': %s = %lld exceeds cuDNN's 32-bit descriptors",
             node.c_str(), what, (long long)v);
  return int(v);
}

}  // namespace

void plan_conv_transpose(PlanCtx& c, const Op& op, const std::string& prefix, const std::vector<View>& in,
                         const View& y) {
  const ConvTransposeAttrs& a = op.as<ConvTransposeAttrs>();
  const View x = c.packed(in.at(0));
  bool direct = true;
  for (int i = 0; i < 2; ++i) {
    const int lead = a.pads[i] - a.pads[i + 2] + a.output_padding[i];
    if (lead < 0 || lead >= a.stride[i]) direct = false;
  }
  HIOS_CHECK(y.packed(), "node '%s': conv_transpose writes a packed output", c.node_name.c_str());
  const View dst = direct ? y
                          : c.scratch(Shape::of({x.shape.n, a.out_channels,
                                                 (x.shape.h - 1) * a.stride[0] + int64_t(a.dilation[0]) * (a.kernel[0] - 1) + 1,
                                                 (x.shape.w - 1) * a.stride[1] + int64_t(a.dilation[1]) * (a.kernel[1] - 1) + 1}));
  const int pad_h = direct ? a.pads[0] : 0, pad_w = direct ? a.pads[1] : 0;
  auto d = std::make_shared<BackwardDescs>();
  const cudnnTensorFormat_t fmt = x.nhwc() ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  const cudnnDataType_t st = cudnn_type(x.elem);
  const Shape &xs = x.shape, &ys = dst.shape;
  const std::string& nm = c.node_name;
  HIOS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d->dy, fmt, st, checked_int(xs.n, nm, "batch"), checked_int(xs.c, nm, "channels"),
                                              checked_int(xs.h, nm, "height"), checked_int(xs.w, nm, "width")));
  HIOS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d->dx, fmt, st, checked_int(ys.n, nm, "batch"), checked_int(ys.c, nm, "channels"),
                                              checked_int(ys.h, nm, "height"), checked_int(ys.w, nm, "width")));
  HIOS_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d->w, st, fmt, int(xs.c), int(a.out_channels / a.groups), a.kernel[0],
                                              a.kernel[1]));
  HIOS_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d->conv, pad_h, pad_w, a.stride[0], a.stride[1], a.dilation[0],
                                                   a.dilation[1], CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  HIOS_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d->conv, int(a.groups)));
  const MathMode math = c.eng.math();
  const cudnnMathType_t mt = math == MathMode::Fp32 ? CUDNN_FMA_MATH
                             : x.elem != Elem::F32  ? CUDNN_TENSOR_OP_MATH
                                                    : CUDNN_DEFAULT_MATH;
  HIOS_CUDNN_CHECK(cudnnSetConvolutionMathType(d->conv, mt));
  const std::string key = strprintf("convT %s %s %s %s k%dx%d s%dx%d p%d,%d d%dx%d g%lld dev%d", math_mode_name(math),
                                    x.nhwc() ? "nhwc" : "nchw", xs.str().c_str(), ys.str().c_str(), a.kernel[0],
                                    a.kernel[1], a.stride[0], a.stride[1], pad_h, pad_w, a.dilation[0],
                                    a.dilation[1], (long long)a.groups, c.eng.device());
  BackwardChoice ch;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(choices_mu);
    auto it = choices().find(key);
    if (it != choices().end()) {
      ch = it->second;
      known = true;
    }
  }
  if (!known && !c.dry) {
    // cudnnFind over the real buffers (planning may synchronise), keeping the fastest algorithm
    // that is deterministic and, in fp32 mode, free of tensor-core math.
    const Engine::Params& prm = c.eng.params(prefix);
    size_t ws_bytes = 0;
    void* ws = c.eng.find_workspace(&ws_bytes);
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int found = 0;
    HIOS_CUDNN_CHECK(cudnnSetStream(c.res.cudnn(), c.res.stream()));
    HIOS_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(c.res.cudnn(), d->w, prm.weight, d->dy, x.ptr, d->conv,
                                                                 d->dx, dst.ptr, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                                 &found, perf, ws, ws_bytes));
    // Deterministic algorithms first (a captured pass then replays the eager one bit for bit);
    // where cuDNN has none for the problem, the fastest of the others.
    bool picked = false;
    for (int pass = 0; pass < 2 && !picked; ++pass) {
      for (int i = 0; i < found && !picked; ++i) {
        const cudnnConvolutionBwdDataAlgoPerf_t& p = perf[i];
        if (p.status != CUDNN_STATUS_SUCCESS || (pass == 0 && p.determinism != CUDNN_DETERMINISTIC)) continue;
        if (math == MathMode::Fp32 && p.mathType == CUDNN_TENSOR_OP_MATH) continue;
        ch = BackwardChoice{p.algo, p.mathType, p.memory};
        picked = true;
      }
    }
    HIOS_CHECK(picked, "node '%s': cuDNN has no backward-data algorithm for this conv_transpose (%s)", nm.c_str(),
               key.c_str());
    std::lock_guard<std::mutex> lock(choices_mu);
    choices()[key] = ch;
    known = true;
  }
  if (c.dry) {
    // The dry pass sizes the workspace before any choice exists: cuDNN's largest need among
    // its algorithms for this problem bounds what the real pass can pick.
    size_t most = ch.workspace;
    if (!known) {
      for (int algo = 0; algo < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT; ++algo) {
        size_t need = 0;
        if (cudnnGetConvolutionBackwardDataWorkspaceSize(c.res.cudnn(), d->w, d->dy, d->conv, d->dx,
                                                         cudnnConvolutionBwdDataAlgo_t(algo), &need) ==
            CUDNN_STATUS_SUCCESS) {
          most = std::max(most, std::min(need, size_t(256) << 20));
        }
      }
    }
    c.workspace_need = std::max(c.workspace_need, most);
    return;
  }
  HIOS_CUDNN_CHECK(cudnnSetConvolutionMathType(d->conv, ch.math));
  const Engine::Params& prm = c.eng.params(prefix);
  const void* w = prm.weight;
  const void* b = prm.bias;
  const Shape s = y.shape;
  const int nhwc = y.nhwc() ? 1 : 0;
  void* into = dst.ptr;
  PadParams crop;  // the output's window of the unpadded result (unused when direct)
  crop.x = dst.ptr;
  crop.y = y.ptr;
  crop.elem = y.elem;
  crop.n = s.n, crop.c = s.c, crop.ih = dst.shape.h, crop.iw = dst.shape.w, crop.oh = s.h, crop.ow = s.w;
  crop.top = -a.pads[0], crop.left = -a.pads[1];
  crop.nhwc = nhwc;
  crop.y_batch_stride = y.item();
  crop.y_pixel_stride = y.nhwc() ? s.c : 1;
  const Elem elem = y.elem;
  const size_t ws_need = ch.workspace;
  const cudnnConvolutionBwdDataAlgo_t algo = ch.algo;
  void* yp = y.ptr;
  const void* xp = x.ptr;
  // A workspace of its own where the stream's (sized by the dry pass before any choice) is smaller.
  std::shared_ptr<DeviceBuffer> own;
  if (ws_need > c.res.workspace_bytes()) {
    own = std::make_shared<DeviceBuffer>(c.eng.device(), ws_need, "the conv_transpose workspace of '" + nm + "'");
  }
  c.emit([=](StreamResources& r) {
    const float one = 1.f, zero = 0.f;
    void* ws = own ? own->get() : r.workspace();
    HIOS_CUDNN_CHECK(cudnnConvolutionBackwardData(r.cudnn(), &one, d->w, w, d->dy, xp, d->conv, algo, ws, ws_need,
                                                  &zero, d->dx, into));
    if (!direct) launch_pad(crop, r.stream());
    if (b) launch_bias_act(yp, yp, b, 0, s.n, s.c, s.h * s.w, nhwc, elem, r.stream());
  });
}

}  // namespace hios::cuda
