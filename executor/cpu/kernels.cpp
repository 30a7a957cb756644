#include "executor/cpu/kernels.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include "executor/cpu/tensor_kernels.hpp"
#include "graph/error.hpp"

namespace hios::exec::cpu {

static double apply_act(Activation act, double v) {
  switch (act) {
    case Activation::None: return v;
    case Activation::Relu: return v > 0 || std::isnan(v) ? v : 0.0;  // NaN stays NaN, as in ONNX Runtime
    case Activation::Sigmoid: return 1.0 / (1.0 + std::exp(-v));
    case Activation::Tanh: return std::tanh(v);
    case Activation::Relu6: return std::isnan(v) ? v : v > 0 ? (v < 6 ? v : 6.0) : 0.0;
    // As the activation op computes it (tensor_kernels.cpp), so a folded one gives the same.
    case Activation::HardSwish: return std::isnan(v) ? v : v * std::max(0.0, std::min(1.0, v / 6 + 0.5));
    default: break;  // the rest take attributes: activation_kernel()
  }
  return v;
}

// The larger, where a NaN on either side wins and stays (ONNX Runtime's max pool propagates it).
static float nan_max(float m, float v) { return (v > m || std::isnan(v)) && !std::isnan(m) ? v : m; }

// First output index o >= 0 with o * stride + offset >= 0, and one past the last with
// o * stride + offset <= limit - 1, clipped to [0, out): the outputs whose tap is in bounds.
static void valid_range(int64_t offset, int64_t stride, int64_t limit, int64_t out, int64_t& lo, int64_t& hi) {
  lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t top = limit - 1 - offset;
  hi = top < 0 ? 0 : top / stride + 1;
  lo = std::min(lo, out);
  hi = std::min(hi, out);
  if (hi < lo) hi = lo;
}

void conv2d(const ConvAttrs& a, const Shape& in, const float* x, const Shape& out, float* y, const float* w,
            const float* b, const float* z) {
  const int64_t icg = in.c / a.groups, ocg = out.c / a.groups;
  const int64_t KH = a.kernel[0], KW = a.kernel[1], SH = a.stride[0], SW = a.stride[1];
  const int64_t PH = a.padding[0], PW = a.padding[1], DH = a.dilation[0], DW = a.dilation[1];
  const int64_t OH = out.h, OW = out.w, OHW = OH * OW;
  // A band of a row split: output row oh is global row R0 + oh, and the input tensor holds the
  // global rows from I0 on, out of IH (docs/row-splits.md). Unsplit: R0 = I0 = 0, IH = in.h.
  const int64_t R0 = a.rows.banded() ? a.rows.out_first : 0, I0 = a.rows.banded() ? a.rows.in_first : 0;
  const int64_t IH = a.rows.banded() ? a.rows.in_full : in.h;
#pragma omp parallel
  {
    // One plane of double accumulators per thread; each output element sums over (ic, kh, kw)
    // in that fixed order, so the result does not depend on the thread count.
    std::vector<double> acc(static_cast<size_t>(OHW));
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < out.n; ++n) {
      for (int64_t oc = 0; oc < out.c; ++oc) {
        const int64_t grp = oc / ocg;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t ic = 0; ic < icg; ++ic) {
          const float* xp = x + ((n * in.c + grp * icg + ic) * in.h) * in.w;
          const float* wp = w + (oc * icg + ic) * KH * KW;
          for (int64_t kh = 0; kh < KH; ++kh) {
            int64_t oh0, oh1;
            valid_range(R0 * SH + kh * DH - PH, SH, IH, OH, oh0, oh1);
            for (int64_t kw = 0; kw < KW; ++kw) {
              int64_t ow0, ow1;
              valid_range(kw * DW - PW, SW, in.w, OW, ow0, ow1);
              const double wv = wp[kh * KW + kw];
              for (int64_t oh = oh0; oh < oh1; ++oh) {
                const float* xr = xp + ((R0 + oh) * SH - PH + kh * DH - I0) * in.w + (kw * DW - PW);
                double* ar = acc.data() + oh * OW;
                for (int64_t ow = ow0; ow < ow1; ++ow) ar[ow] += wv * double(xr[ow * SW]);
              }
            }
          }
        }
        const double bias = b ? double(b[oc]) : 0.0;
        float* yp = y + (n * out.c + oc) * OHW;
        if (z) {
          // Rounded as the unfused graph rounds: the convolution's value, its sum with the
          // residual, then the activation of that sum, each stored as float.
          const float* zp = z + (n * out.c + oc) * OHW;
          for (int64_t i = 0; i < OHW; ++i) {
            const float sum = float(double(float(acc[i] + bias)) + double(zp[i]));
            yp[i] = float(apply_act(a.activation, double(sum)));
          }
        } else {
          for (int64_t i = 0; i < OHW; ++i) yp[i] = float(apply_act(a.activation, acc[i] + bias));
        }
      }
    }
  }
}

void pool2d(const PoolAttrs& a, const Shape& in, const float* x, const Shape& out, float* y) {
  const bool global = a.kind == PoolKind::GlobalMax || a.kind == PoolKind::GlobalAvg;
  const int64_t KH = a.kernel[0], KW = a.kernel[1], SH = a.stride[0], SW = a.stride[1];
  const int64_t PH = a.padding[0], PW = a.padding[1];
  // Band geometry as in conv2d: windows and padding follow the global rows.
  const int64_t R0 = a.rows.banded() ? a.rows.out_first : 0, I0 = a.rows.banded() ? a.rows.in_first : 0;
  const int64_t IH = a.rows.banded() ? a.rows.in_full : in.h;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < in.n; ++n) {
    for (int64_t c = 0; c < in.c; ++c) {
      const float* xp = x + (n * in.c + c) * in.h * in.w;
      float* yp = y + (n * out.c + c) * out.h * out.w;
      if (global) {
        if (a.kind == PoolKind::GlobalMax) {
          float m = -std::numeric_limits<float>::infinity();
          for (int64_t i = 0; i < in.h * in.w; ++i) m = nan_max(m, xp[i]);
          yp[0] = m;
        } else {
          // A partial pool (the end of a row split) sums the rows it holds but divides by the
          // whole tensor (IH rows), so the parts' results add up to the mean.
          double s = 0;
          for (int64_t i = 0; i < in.h * in.w; ++i) s += xp[i];
          yp[0] = float(s / double(IH * in.w));
        }
        continue;
      }
      for (int64_t oh = 0; oh < out.h; ++oh) {
        for (int64_t ow = 0; ow < out.w; ++ow) {
          int64_t hs = (R0 + oh) * SH - PH, ws = ow * SW - PW;
          if (a.kind == PoolKind::Max) {
            // Padding never wins a max: only in-bounds taps count.
            int64_t he = std::min(hs + KH, IH), we = std::min(ws + KW, in.w);
            hs = std::max<int64_t>(hs, 0);
            ws = std::max<int64_t>(ws, 0);
            float m = -std::numeric_limits<float>::infinity();
            for (int64_t ih = hs; ih < he; ++ih) {
              for (int64_t iw = ws; iw < we; ++iw) m = nan_max(m, xp[(ih - I0) * in.w + iw]);
            }
            yp[oh * out.w + ow] = m;
          } else {
            // PyTorch: the full window is clipped to the padded input (a ceil_mode window may
            // run past it); count_include_pad divides by that, otherwise by the in-bounds taps.
            int64_t he = std::min(hs + KH, IH + PH), we = std::min(ws + KW, in.w + PW);
            int64_t padded = (he - hs) * (we - ws);
            hs = std::max<int64_t>(hs, 0);
            ws = std::max<int64_t>(ws, 0);
            he = std::min(he, IH);
            we = std::min(we, in.w);
            double s = 0;
            for (int64_t ih = hs; ih < he; ++ih) {
              for (int64_t iw = ws; iw < we; ++iw) s += xp[(ih - I0) * in.w + iw];
            }
            int64_t divisor = a.count_include_pad ? padded : (he - hs) * (we - ws);
            yp[oh * out.w + ow] = float(s / double(divisor));
          }
        }
      }
    }
  }
}

void activation(Activation act, int64_t count, const float* x, float* y) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) y[i] = float(apply_act(act, double(x[i])));
}

void elementwise(OpKind kind, const std::vector<const float*>& operands, int64_t count, float* y) {
  HIOS_CHECK(kind == OpKind::Add || kind == OpKind::Mul, "cpu elementwise: '%s' is not add or mul",
             op_def(kind).name);
  const bool mul = kind == OpKind::Mul;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    double v = operands[0][i];
    for (size_t k = 1; k < operands.size(); ++k) v = mul ? v * double(operands[k][i]) : v + double(operands[k][i]);
    y[i] = float(v);
  }
}

void linear(const LinearAttrs& a, const Shape& in, const float* x, const Shape& out, float* y, const float* w,
            const float* b) {
  const int64_t F = in.c * in.h * in.w;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < in.n; ++n) {
    for (int64_t o = 0; o < a.out_features; ++o) {
      const float* xr = x + n * F;
      const float* wr = w + o * F;
      double s = 0;
      for (int64_t i = 0; i < F; ++i) s += double(wr[i]) * double(xr[i]);
      if (b) s += b[o];
      y[n * out.c + o] = float(s);
    }
  }
}

void softmax_channels(const Shape& s, const float* x, float* y) {
  const int64_t HW = s.h * s.w;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t p = 0; p < HW; ++p) {
      const float* xp = x + n * s.c * HW + p;
      float* yp = y + n * s.c * HW + p;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < s.c; ++c) m = std::max(m, double(xp[c * HW]));
      double sum = 0;
      for (int64_t c = 0; c < s.c; ++c) sum += std::exp(double(xp[c * HW]) - m);
      for (int64_t c = 0; c < s.c; ++c) yp[c * HW] = float(std::exp(double(xp[c * HW]) - m) / sum);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The kernel table, indexed by OpKind.

namespace {

using KernelFn = void (*)(const Op&, const std::vector<const float*>&, const std::vector<Shape>&, const Shape&,
                          float*, const std::vector<OpParamsView>&, Scratch&);

const OpParamsView& first_params(const Op& op, const std::vector<OpParamsView>& p) {
  HIOS_CHECK(!p.empty() && p[0].weight, "cpu kernel: %s has no weights", describe_op(op).c_str());
  return p[0];
}

void k_input(const Op&, const std::vector<const float*>&, const std::vector<Shape>&, const Shape&, float*,
             const std::vector<OpParamsView>&, Scratch&) {
  throw_error("cpu kernel: the input placeholder is never launched (its values come from set_input)");
}
void k_conv(const Op& op, const std::vector<const float*>& in, const std::vector<Shape>& s, const Shape& out, float* y,
            const std::vector<OpParamsView>& p, Scratch&) {
  const OpParamsView& w = first_params(op, p);
  const bool residual = op.conv().residual;
  HIOS_CHECK(!residual || in.size() == 2, "cpu conv: a residual conv got %zu operands", in.size());
  conv2d(op.conv(), s[0], in[0], out, y, w.weight, w.bias, residual ? in[1] : nullptr);
}
// Each output pixel gathers the input pixels whose patches reach it: output row oh reads input
// row ih through kernel row kh where oh + pad_top = ih * stride + kh * dilation. Accumulated in
// double, as the convolution is.
void k_conv_transpose(const Op& op, const std::vector<const float*>& in, const std::vector<Shape>& s, const Shape& out,
                      float* y, const std::vector<OpParamsView>& p, Scratch&) {
  const ConvTransposeAttrs& a = op.as<ConvTransposeAttrs>();
  const OpParamsView& w = first_params(op, p);
  const Shape& x = s[0];
  const int64_t in_g = x.c / a.groups, out_g = a.out_channels / a.groups, kh = a.kernel[0], kw = a.kernel[1];
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < out.n; ++n) {
    for (int64_t co = 0; co < out.c; ++co) {
      const int64_t g = co / out_g, cog = co % out_g;
      for (int64_t oh = 0; oh < out.h; ++oh) {
        for (int64_t ow = 0; ow < out.w; ++ow) {
          double acc = w.bias ? w.bias[co] : 0.0;
          for (int64_t i = 0; i < kh; ++i) {
            const int64_t th = oh + a.pads[0] - i * a.dilation[0];
            if (th < 0 || th % a.stride[0]) continue;
            const int64_t ih = th / a.stride[0];
            if (ih >= x.h) continue;
            for (int64_t j = 0; j < kw; ++j) {
              const int64_t tw = ow + a.pads[1] - j * a.dilation[1];
              if (tw < 0 || tw % a.stride[1]) continue;
              const int64_t iw = tw / a.stride[1];
              if (iw >= x.w) continue;
              for (int64_t cig = 0; cig < in_g; ++cig) {
                const int64_t ci = g * in_g + cig;
                acc += double(in[0][((n * x.c + ci) * x.h + ih) * x.w + iw]) *
                       double(w.weight[((ci * out_g + cog) * kh + i) * kw + j]);
              }
            }
          }
          y[((n * out.c + co) * out.h + oh) * out.w + ow] = float(acc);
        }
      }
    }
  }
}
void k_pool(const Op& op, const std::vector<const float*>& in, const std::vector<Shape>& s, const Shape& out, float* y,
            const std::vector<OpParamsView>&, Scratch&) {
  pool2d(op.pool(), s[0], in[0], out, y);
}
void k_activation(const Op& op, const std::vector<const float*>& in, const std::vector<Shape>&, const Shape& out,
                  float* y, const std::vector<OpParamsView>&, Scratch&) {
  if (int(op.act().activation) <= int(Activation::Relu6)) {
    activation(op.act().activation, out.numel(), in[0], y);
    return;
  }
  const ActivationAttrs& a = op.act();
  const int64_t count = out.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) y[i] = float(activate(a, double(in[0][i])));
}
void k_elementwise(const Op& op, const std::vector<const float*>& in, const std::vector<Shape>&, const Shape& out,
                   float* y, const std::vector<OpParamsView>&, Scratch&) {
  elementwise(op.kind, in, out.numel(), y);
}
void k_identity(const Op&, const std::vector<const float*>& in, const std::vector<Shape>&, const Shape& out, float* y,
                const std::vector<OpParamsView>&, Scratch&) {
  if (in[0] != y) std::copy(in[0], in[0] + out.numel(), y);
}
void k_linear(const Op& op, const std::vector<const float*>& in, const std::vector<Shape>& s, const Shape& out,
              float* y, const std::vector<OpParamsView>& p, Scratch&) {
  const OpParamsView& w = first_params(op, p);
  linear(op.linear(), s[0], in[0], out, y, w.weight, w.bias);
}
void k_softmax(const Op& op, const std::vector<const float*>& in, const std::vector<Shape>& s, const Shape& out, float* y,
               const std::vector<OpParamsView>&, Scratch&) {
  const SoftmaxAttrs& a = op.as<SoftmaxAttrs>();
  if (a.fn == SoftmaxFn::Softmax && a.axis == 1 && s[0].rank == 4) {
    softmax_channels(s[0], in[0], y);
    return;
  }
  run_tensor_op(op, {TensorArg{in[0], s[0], DType::F32}}, TensorOut{y, out, DType::F32});
}
// The general ops run through run_tensor_op (the backend calls it with typed operands).
void k_general(const Op& op, const std::vector<const float*>&, const std::vector<Shape>&, const Shape&, float*,
               const std::vector<OpParamsView>&, Scratch&) {
  throw_error("cpu kernel: %s is a general tensor op: run_tensor_op runs it", op_def(op.kind).name);
}
void k_sequential(const Op& op, const std::vector<const float*>& in, const std::vector<Shape>& s, const Shape& out,
                  float* y, const std::vector<OpParamsView>& p, Scratch& scratch) {
  const auto& steps = op.sequential().steps;
  HIOS_CHECK(p.size() == steps.size(), "cpu kernel: sequential with %zu steps got %zu parameter sets", steps.size(),
             p.size());
  std::string label = "(sequential step)";
  InferContext ctx{label, s[0].n, s[0].h, s[0].w};
  const float* cur = in[0];
  Shape cur_shape = s[0];
  for (size_t i = 0; i < steps.size(); ++i) {
    Shape next = infer_op(steps[i], {cur_shape}, ctx);
    float* dst = y;
    if (i + 1 < steps.size()) {
      // Ping-pong between the two scratch buffers; the last step writes the node's output.
      std::vector<float>& buf = (i % 2 == 0) ? scratch.a : scratch.b;
      if (buf.size() < static_cast<size_t>(next.numel())) buf.resize(static_cast<size_t>(next.numel()));
      dst = buf.data();
    } else {
      HIOS_CHECK(next == out, "cpu kernel: sequential ends in %s but the node's shape is %s", next.str().c_str(),
                 out.str().c_str());
    }
    run_op(steps[i], {cur}, {cur_shape}, next, dst, {p[i]}, scratch);
    cur = dst;
    cur_shape = next;
  }
}

// Operand k holds the rows from held[k]; each wanted row comes from the first operand holding it.
void k_rows(const Op& op, const std::vector<const float*>& in, const std::vector<Shape>& s, const Shape& out,
            float* y, const std::vector<OpParamsView>&, Scratch&) {
  const RowsAttrs& a = op.rows();
  for (int64_t r = 0; r < out.h; ++r) {
    const int64_t g = a.first + r;
    size_t k = 0;
    while (k < in.size() && !(a.held[k] <= g && g < a.held[k] + s[k].h)) ++k;
    if (k == in.size()) {
      std::string held;
      for (size_t j = 0; j < in.size(); ++j) held += strprintf(" %lld+%lld", (long long)a.held[j], (long long)s[j].h);
      throw_error("cpu kernel: %s: no operand holds row %lld (operands hold%s)", describe_op(op).c_str(), (long long)g,
                  held.c_str());
    }
    for (int64_t p = 0; p < out.n * out.c; ++p) {
      const float* src = in[k] + (p * s[k].h + (g - a.held[k])) * out.w;
      std::copy(src, src + out.w, y + (p * out.h + r) * out.w);
    }
  }
}

void k_pad(const Op& op, const std::vector<const float*>& in, const std::vector<Shape>& s, const Shape& out, float* y,
           const std::vector<OpParamsView>&, Scratch&) {
  const PadAttrs& a = op.pad();
  const float fill = a.fill == PadFill::NegInf ? -std::numeric_limits<float>::infinity() : 0.f;
  const Shape& x = s[0];
  for (int64_t p = 0; p < out.n * out.c; ++p) {
    for (int64_t oy = 0; oy < out.h; ++oy) {
      const int64_t iy = oy - a.pads[0];
      float* row = y + (p * out.h + oy) * out.w;
      for (int64_t ox = 0; ox < out.w; ++ox) {
        const int64_t ix = ox - a.pads[1];
        row[ox] = (iy >= 0 && iy < x.h && ix >= 0 && ix < x.w) ? in[0][(p * x.h + iy) * x.w + ix] : fill;
      }
    }
  }
}

struct KernelEntry {
  OpKind kind;
  KernelFn fn;
};

// Order matches OpKind; check_kernel_table() verifies it.
constexpr KernelEntry kKernels[] = {
    {OpKind::Input, k_input},       {OpKind::Conv, k_conv},          {OpKind::Pool, k_pool},
    {OpKind::Activation, k_activation}, {OpKind::Add, k_elementwise}, {OpKind::Mul, k_elementwise},
    {OpKind::Identity, k_identity}, {OpKind::Sequential, k_sequential}, {OpKind::Linear, k_linear},
    {OpKind::Softmax, k_softmax},   {OpKind::Rows, k_rows},          {OpKind::Pad, k_pad},
    {OpKind::Join, k_general},      {OpKind::Binary, k_general},     {OpKind::Where, k_general},
    {OpKind::Reduce, k_general},    {OpKind::MatMul, k_general},     {OpKind::Transpose, k_general},
    {OpKind::Reshape, k_general},   {OpKind::Concat, k_general},     {OpKind::Slice, k_general},
    {OpKind::Gather, k_general},    {OpKind::Cast, k_general},       {OpKind::Expand, k_general},
    {OpKind::Resize, k_general},    {OpKind::ConvTranspose, k_conv_transpose}, {OpKind::Norm, k_general}, {OpKind::Attention, k_general},
};
static_assert(std::size(kKernels) == kNumOpKinds, "the CPU kernel table must have one entry per OpKind");

}  // namespace

void check_kernel_table() {
  for (int k = 0; k < kNumOpKinds; ++k) {
    HIOS_CHECK(static_cast<int>(kKernels[k].kind) == k && kKernels[k].fn != nullptr,
               "cpu backend: kernel table entry %d is not '%s'", k, op_def(static_cast<OpKind>(k)).name);
  }
}

void run_op(const Op& op, const std::vector<const float*>& in, const std::vector<Shape>& in_shapes, const Shape& out,
            float* y, const std::vector<OpParamsView>& params, Scratch& scratch) {
  int k = static_cast<int>(op.kind);
  HIOS_CHECK(k >= 0 && k < kNumOpKinds, "cpu backend: op kind %d is out of range", k);
  HIOS_CHECK(!in.empty() && in.size() == in_shapes.size(), "cpu backend: %s got %zu inputs and %zu shapes",
             op_def(op.kind).name, in.size(), in_shapes.size());
  kKernels[k].fn(op, in, in_shapes, out, y, params, scratch);
}

int64_t scratch_elems(const Op& op, const Shape& in) {
  if (op.kind != OpKind::Sequential) return 0;
  std::string label = "(sequential step)";
  InferContext ctx{label, in.n, in.h, in.w};
  Shape cur = in;
  int64_t most = 0;
  const auto& steps = op.sequential().steps;
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    cur = infer_op(steps[i], {cur}, ctx);
    most = std::max(most, cur.numel());
  }
  return most;
}

// ---------------------------------------------------------------------------------------------
// Term assembly.

bool reads_one_whole_tensor(const Graph& g, int v) {
  const Node& nd = g.nodes[v];
  if (nd.inputs.size() != 1 || nd.inputs[0].size() != 1) return false;
  const Value& val = nd.inputs[0][0];
  return val.begin == 0 && g.value_end(val) == g.nodes[val.node].shape.c;
}

void assemble_terms(const Graph& g, int v, const std::vector<const float*>& producers,
                    std::vector<std::vector<float>>& out) {
  const Node& nd = g.nodes[v];
  const bool operands = op_def(nd.op.kind).terms_are_operands;
  size_t nvalues = 0;
  for (const Term& t : nd.inputs) nvalues += t.size();
  HIOS_CHECK(producers.size() == nvalues, "cpu assembly of '%s': %zu producers for %zu values", nd.name.c_str(),
             producers.size(), nvalues);
  HIOS_CHECK(!nd.inputs.empty() && !nd.inputs[0].empty(), "cpu assembly of '%s': no input", nd.name.c_str());

  const Shape base = g.value_shape(nd.inputs[0][0]);
  const int64_t N = base.n, cat_hw = base.h * base.w;
  const size_t concatenated = nd.input_terms();
  int64_t total_c = 0;
  for (size_t t = 0; t < concatenated; ++t) total_c += g.value_shape(nd.inputs[t][0]).c;

  // Operands keep their own shapes (a rows op's operands differ in H); a concat's terms share H x W.
  // A residual convolution's residual term is an operand of its own after the concatenation.
  out.resize(operands ? nd.inputs.size() : 1 + (nd.inputs.size() - concatenated));
  if (operands) {
    for (size_t t = 0; t < nd.inputs.size(); ++t) {
      out[t].resize(static_cast<size_t>(g.value_shape(nd.inputs[t][0]).numel()));
    }
  } else {
    out[0].resize(static_cast<size_t>(N * total_c * cat_hw));
    if (out.size() == 2) out[1].resize(static_cast<size_t>(g.value_shape(nd.inputs.back()[0]).numel()));
  }

  size_t k = 0;
  int64_t c_off = 0;  // channel offset of the current term in the concatenation
  for (size_t t = 0; t < nd.inputs.size(); ++t) {
    const Term& term = nd.inputs[t];
    const Shape ts = g.value_shape(term[0]);
    const int64_t tc = ts.c;
    const bool own = operands || t >= concatenated;  // an operand in a buffer of its own
    const int64_t HW = own ? ts.h * ts.w : cat_hw;
    float* dst = operands ? out[t].data() : own ? out[1].data() : out[0].data();
    const int64_t dst_c = own ? tc : total_c;
    const int64_t dst_off = own ? 0 : c_off;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t c = 0; c < tc; ++c) {
        float* dp = dst + ((n * dst_c) + dst_off + c) * HW;
        for (int64_t i = 0; i < HW; ++i) {
          double s = 0;
          for (size_t j = 0; j < term.size(); ++j) {
            const Value& val = term[j];
            const int64_t src_c = g.nodes[val.node].shape.c;
            s += double(producers[k + j][((n * src_c) + val.begin + c) * HW + i]);
          }
          dp[i] = float(s);
        }
      }
    }
    k += term.size();
    c_off += tc;
  }
}

}  // namespace hios::exec::cpu
