#include "executor/cpu/tensor_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "graph/elements.hpp"
#include "graph/error.hpp"
#include "graph/ops_tensor.hpp"

namespace hios::exec::cpu {

namespace {

// Row-major strides of a shape, in elements.
std::array<int64_t, kMaxRank> strides_of(const Shape& s) {
  std::array<int64_t, kMaxRank> st{};
  int64_t acc = 1;
  for (int d = s.rank - 1; d >= 0; --d) {
    st[size_t(d)] = acc;
    acc *= s.dim(d);
  }
  return st;
}

// Element offsets of an operand broadcast to `out`, one per output element, in output order.
std::vector<int64_t> broadcast_offsets(const Shape& in, const Shape& out) {
  const Shape r = with_rank(in, out.rank);
  const auto st = strides_of(r);
  std::vector<int64_t> off(size_t(out.numel()));
  std::array<int64_t, kMaxRank> idx{};
  int64_t o = 0;
  for (int64_t i = 0; i < out.numel(); ++i) {
    off[size_t(i)] = o;
    for (int d = out.rank - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < out.dim(d)) {
        if (r.dim(d) != 1) o += st[size_t(d)];
        break;
      }
      if (r.dim(d) != 1) o -= st[size_t(d)] * (out.dim(d) - 1);
      idx[size_t(d)] = 0;
    }
  }
  return off;
}

double ld(const TensorArg& t, int64_t i) { return load_double(t.data, t.dtype, i); }
int64_t li(const TensorArg& t, int64_t i) { return load_int(t.data, t.dtype, i); }
void sd(const TensorOut& t, int64_t i, double v) { store_double(t.data, t.dtype, i, v); }
void si(const TensorOut& t, int64_t i, int64_t v) { store_int(t.data, t.dtype, i, v); }

// ---------------------------------------------------------------------------------------------
// element-wise

double erf_gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double tanh_gelu(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }

}  // namespace

double activate(const ActivationAttrs& a, double x) {
  const double al = a.alpha, be = a.beta;
  switch (a.activation) {
    case Activation::None: return x;
    case Activation::Relu: return x > 0 ? x : (std::isnan(x) ? x : 0);
    case Activation::Sigmoid: return 1 / (1 + std::exp(-x));
    case Activation::Tanh: return std::tanh(x);
    case Activation::Relu6: return std::isnan(x) ? x : std::min(std::max(x, 0.0), 6.0);
    case Activation::LeakyRelu: return x >= 0 ? x : al * x;
    case Activation::Elu: return x >= 0 ? x : al * (std::exp(x) - 1);
    case Activation::Selu: return x > 0 ? be * x : be * (al * std::exp(x) - al);
    case Activation::Celu: return std::max(0.0, x) + std::min(0.0, al * (std::exp(x / al) - 1));
    case Activation::HardSigmoid: return std::isnan(x) ? x : std::max(0.0, std::min(1.0, al * x + be));
    case Activation::HardSwish: return std::isnan(x) ? x : x * std::max(0.0, std::min(1.0, x / 6 + 0.5));
    case Activation::Softplus: return softplus(x);
    case Activation::Softsign: return x / (1 + std::fabs(x));
    case Activation::Gelu: return erf_gelu(x);
    case Activation::GeluTanh: return tanh_gelu(x);
    case Activation::Erf: return std::erf(x);
    case Activation::Mish: return x * std::tanh(softplus(x));
    case Activation::Clip: return std::isnan(x) ? x : std::min(std::max(x, al), be);
    case Activation::Exp: return std::exp(x);
    case Activation::Log: return std::log(x);
    case Activation::Sqrt: return std::sqrt(x);
    case Activation::Reciprocal: return 1 / x;
    case Activation::Abs: return std::fabs(x);
    case Activation::Neg: return -x;
    case Activation::Floor: return std::floor(x);
    case Activation::Ceil: return std::ceil(x);
    case Activation::Round: return std::nearbyint(x);  // half to even, the default rounding mode
    case Activation::Sign: return x > 0 ? 1 : x < 0 ? -1 : x;
    case Activation::Sin: return std::sin(x);
    case Activation::Cos: return std::cos(x);
    case Activation::Tan: return std::tan(x);
    case Activation::Asin: return std::asin(x);
    case Activation::Acos: return std::acos(x);
    case Activation::Atan: return std::atan(x);
    case Activation::Sinh: return std::sinh(x);
    case Activation::Cosh: return std::cosh(x);
    case Activation::Asinh: return std::asinh(x);
    case Activation::Acosh: return std::acosh(x);
    case Activation::Atanh: return std::atanh(x);
    case Activation::Not: return x == 0 ? 1 : 0;
    case Activation::IsNan: return std::isnan(x) ? 1 : 0;
    case Activation::IsInf: return (std::isinf(x) && ((x > 0 && al != 0) || (x < 0 && be != 0))) ? 1 : 0;
    case Activation::ThresholdedRelu: return x > al ? x : 0;
    case Activation::Shrink: return x < -al ? x + be : x > al ? x - be : 0;
  }
  return x;
}

namespace {

int64_t activate_int(const ActivationAttrs& a, int64_t x) {
  switch (a.activation) {
    case Activation::None: return x;
    case Activation::Relu: return std::max<int64_t>(x, 0);
    case Activation::Clip: {
      // Bounds past int64 (the defaults, +-1e300) bound nothing.
      const int64_t lo = a.alpha < -9.2e18 ? std::numeric_limits<int64_t>::min() : int64_t(std::ceil(a.alpha));
      const int64_t hi = a.beta > 9.2e18 ? std::numeric_limits<int64_t>::max() : int64_t(std::floor(a.beta));
      return std::min<int64_t>(std::max<int64_t>(x, lo), hi);
    }
    case Activation::Abs: return x < 0 ? int64_t(0 - uint64_t(x)) : x;
    case Activation::Neg: return int64_t(0 - uint64_t(x));
    case Activation::Sign: return x > 0 ? 1 : x < 0 ? -1 : 0;
    case Activation::Not: return x == 0 ? 1 : 0;
    default: return x;
  }
}

void k_activation(const Op& op, const std::vector<TensorArg>& in, const TensorOut& out) {
  const ActivationAttrs& a = op.act();
  const int64_t n = out.shape.numel();
  if (!is_float(in[0].dtype) && activation_takes_integers(a.activation)) {
    for (int64_t i = 0; i < n; ++i) si(out, i, activate_int(a, li(in[0], i)));
    return;
  }
  for (int64_t i = 0; i < n; ++i) sd(out, i, activate(a, ld(in[0], i)));
}

// Python's modulo (the sign of the divisor) and C's (the sign of the dividend).
int64_t int_mod(int64_t a, int64_t b, bool c_style) {
  if (b == 0) return 0;
  if (b == -1) return 0;  // also INT64_MIN % -1, which would trap
  int64_t r = a % b;
  if (!c_style && r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
int64_t int_div(int64_t a, int64_t b) {
  if (b == 0) return 0;  // undefined in ONNX; no trap here
  if (b == -1) return int64_t(0 - uint64_t(a));  // INT64_MIN / -1 wraps instead of trapping
  return a / b;
}
int64_t int_pow(int64_t base, int64_t e) {
  if (e < 0) return base == 1 ? 1 : base == -1 ? (e % 2 ? -1 : 1) : 0;
  uint64_t r = 1, b = uint64_t(base);
  while (e) {
    if (e & 1) r *= b;
    b *= b;
    e >>= 1;
  }
  return int64_t(r);
}

double float_binary(BinaryFn f, double a, double b) {
  switch (f) {
    case BinaryFn::Add: return a + b;
    case BinaryFn::Sub: return a - b;
    case BinaryFn::Mul: return a * b;
    case BinaryFn::Div: return a / b;
    case BinaryFn::Pow: return std::pow(a, b);
    case BinaryFn::Min: return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
    case BinaryFn::Max: return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
    case BinaryFn::Mod: {
      const double r = std::fmod(a, b);
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
    case BinaryFn::FMod: return std::fmod(a, b);
    case BinaryFn::Equal: return a == b;
    case BinaryFn::Less: return a < b;
    case BinaryFn::LessEqual: return a <= b;
    case BinaryFn::Greater: return a > b;
    case BinaryFn::GreaterEqual: return a >= b;
    case BinaryFn::PRelu: return a < 0 ? a * b : a;
    default: return 0;
  }
}

int64_t int_binary(BinaryFn f, int64_t a, int64_t b, bool is_unsigned) {
  const uint64_t ua = uint64_t(a), ub = uint64_t(b);
  switch (f) {
    case BinaryFn::Add: return int64_t(ua + ub);
    case BinaryFn::Sub: return int64_t(ua - ub);
    case BinaryFn::Mul: return int64_t(ua * ub);
    case BinaryFn::Div: return is_unsigned ? (ub ? int64_t(ua / ub) : 0) : int_div(a, b);
    case BinaryFn::Pow: return int_pow(a, b);
    case BinaryFn::Min: return is_unsigned ? int64_t(std::min(ua, ub)) : std::min(a, b);
    case BinaryFn::Max: return is_unsigned ? int64_t(std::max(ua, ub)) : std::max(a, b);
    case BinaryFn::Mod: return is_unsigned ? (ub ? int64_t(ua % ub) : 0) : int_mod(a, b, false);
    case BinaryFn::FMod: return is_unsigned ? (ub ? int64_t(ua % ub) : 0) : int_mod(a, b, true);
    case BinaryFn::Equal: return a == b;
    case BinaryFn::Less: return is_unsigned ? ua < ub : a < b;
    case BinaryFn::LessEqual: return is_unsigned ? ua <= ub : a <= b;
    case BinaryFn::Greater: return is_unsigned ? ua > ub : a > b;
    case BinaryFn::GreaterEqual: return is_unsigned ? ua >= ub : a >= b;
    case BinaryFn::And: return (a != 0) && (b != 0);
    case BinaryFn::Or: return (a != 0) || (b != 0);
    case BinaryFn::Xor: return (a != 0) != (b != 0);
    case BinaryFn::PRelu: return a < 0 ? int64_t(ua * ub) : a;
    case BinaryFn::ShiftLeft: return ub >= 64 ? 0 : int64_t(ua << ub);
    case BinaryFn::ShiftRight: return ub >= 64 ? 0 : int64_t(ua >> ub);
    case BinaryFn::BitAnd: return int64_t(ua & ub);
    case BinaryFn::BitOr: return int64_t(ua | ub);
    case BinaryFn::BitXor: return int64_t(ua ^ ub);
  }
  return 0;
}

bool unsigned_type(DType t) { return t == DType::U8 || t == DType::U16 || t == DType::U32 || t == DType::U64; }

// Shift right of an unsigned narrow type must not see the sign-extended bits: the loads
// zero-extend unsigned types already (load_int), so the int64 arithmetic is exact for them.
void k_binary(const Op& op, const std::vector<TensorArg>& in, const TensorOut& out) {
  const BinaryFn f = op.as<BinaryAttrs>().fn;
  const std::vector<int64_t> oa = broadcast_offsets(in[0].shape, out.shape);
  const std::vector<int64_t> ob = broadcast_offsets(in[1].shape, out.shape);
  const bool floats = is_float(in[0].dtype) || is_float(in[1].dtype);
  const bool uns = unsigned_type(in[0].dtype);
  for (int64_t i = 0; i < out.shape.numel(); ++i) {
    if (floats) {
      const double r = float_binary(f, ld(in[0], oa[size_t(i)]), ld(in[1], ob[size_t(i)]));
      sd(out, i, r);
    } else {
      si(out, i, int_binary(f, li(in[0], oa[size_t(i)]), li(in[1], ob[size_t(i)]), uns));
    }
  }
}

void k_where(const Op&, const std::vector<TensorArg>& in, const TensorOut& out) {
  const std::vector<int64_t> oc = broadcast_offsets(in[0].shape, out.shape);
  const std::vector<int64_t> ox = broadcast_offsets(in[1].shape, out.shape);
  const std::vector<int64_t> oy = broadcast_offsets(in[2].shape, out.shape);
  const size_t es = dtype_size(out.dtype);
  for (int64_t i = 0; i < out.shape.numel(); ++i) {
    const bool c = li(in[0], oc[size_t(i)]) != 0;
    const TensorArg& src = c ? in[1] : in[2];
    const int64_t at = c ? ox[size_t(i)] : oy[size_t(i)];
    std::memcpy(static_cast<uint8_t*>(out.data) + size_t(i) * es, static_cast<const uint8_t*>(src.data) + size_t(at) * es, es);
  }
}

// ---------------------------------------------------------------------------------------------
// reductions and softmax: the input seen as [outer, reduced..., inner] through index lists

// For every output element, the input offsets it reduces (in row-major order of the reduced dims).
struct ReducePlan {
  std::vector<int64_t> base;   // per output element: offset of its first reduced element
  std::vector<int64_t> inner;  // offsets of the reduced elements relative to base
};
ReducePlan reduce_plan(const Shape& x, const std::vector<int>& axes_in) {
  std::vector<bool> red(size_t(x.rank), axes_in.empty());
  for (int a : axes_in) red[size_t(a)] = true;
  const auto st = strides_of(x);
  ReducePlan p;
  // Reduced offsets: enumerate the reduced dims.
  p.inner = {0};
  for (int d = 0; d < x.rank; ++d) {
    if (!red[size_t(d)]) continue;
    std::vector<int64_t> next;
    for (int64_t base : p.inner) {
      for (int64_t k = 0; k < x.dim(d); ++k) next.push_back(base + k * st[size_t(d)]);
    }
    p.inner = std::move(next);
  }
  p.base = {0};
  for (int d = 0; d < x.rank; ++d) {
    if (red[size_t(d)]) continue;
    std::vector<int64_t> next;
    for (int64_t base : p.base) {
      for (int64_t k = 0; k < x.dim(d); ++k) next.push_back(base + k * st[size_t(d)]);
    }
    p.base = std::move(next);
  }
  return p;
}

void k_reduce(const Op& op, const std::vector<TensorArg>& in, const TensorOut& out) {
  const ReduceAttrs& a = op.as<ReduceAttrs>();
  const ReducePlan p = reduce_plan(in[0].shape, a.axes);
  const bool floats = is_float(in[0].dtype);
  for (size_t o = 0; o < p.base.size(); ++o) {
    const int64_t b = p.base[o];
    if (a.fn == ReduceFn::ArgMax || a.fn == ReduceFn::ArgMin) {
      int64_t best = 0;
      double bv = ld(in[0], b);
      for (size_t k = 1; k < p.inner.size(); ++k) {
        const double v = ld(in[0], b + p.inner[k]);
        const bool better = a.fn == ReduceFn::ArgMax ? (a.select_last ? v >= bv : v > bv)
                                                     : (a.select_last ? v <= bv : v < bv);
        if (better) {
          bv = v;
          best = int64_t(k);
        }
      }
      si(out, int64_t(o), best);
      continue;
    }
    if (!floats && (a.fn == ReduceFn::Sum || a.fn == ReduceFn::Max || a.fn == ReduceFn::Min || a.fn == ReduceFn::Prod ||
                    a.fn == ReduceFn::L1 || a.fn == ReduceFn::SumSquare)) {
      int64_t acc = a.fn == ReduceFn::Prod ? 1 : a.fn == ReduceFn::Max ? std::numeric_limits<int64_t>::min()
                                             : a.fn == ReduceFn::Min ? std::numeric_limits<int64_t>::max() : 0;
      for (int64_t off : p.inner) {
        const int64_t v = li(in[0], b + off);
        switch (a.fn) {
          case ReduceFn::Sum: acc = int64_t(uint64_t(acc) + uint64_t(v)); break;
          case ReduceFn::Max: acc = std::max(acc, v); break;
          case ReduceFn::Min: acc = std::min(acc, v); break;
          case ReduceFn::Prod: acc = int64_t(uint64_t(acc) * uint64_t(v)); break;
          // Wrapping as integers do (no signed overflow).
          case ReduceFn::L1: acc = int64_t(uint64_t(acc) + (v < 0 ? 0 - uint64_t(v) : uint64_t(v))); break;
          default: acc = int64_t(uint64_t(acc) + uint64_t(v) * uint64_t(v)); break;
        }
      }
      si(out, int64_t(o), acc);
      continue;
    }
    double acc = a.fn == ReduceFn::Prod ? 1 : a.fn == ReduceFn::Max ? -INFINITY : a.fn == ReduceFn::Min ? INFINITY : 0;
    double most = -INFINITY;
    if (a.fn == ReduceFn::LogSumExp) {
      for (int64_t off : p.inner) most = std::max(most, ld(in[0], b + off));
      if (!std::isfinite(most)) most = 0;
    }
    bool nan = false;
    for (int64_t off : p.inner) {
      const double v = ld(in[0], b + off);
      nan = nan || std::isnan(v);
      switch (a.fn) {
        case ReduceFn::Sum: case ReduceFn::Mean: case ReduceFn::LogSum: acc += v; break;
        case ReduceFn::Max: acc = std::max(acc, v); break;
        case ReduceFn::Min: acc = std::min(acc, v); break;
        case ReduceFn::Prod: acc *= v; break;
        case ReduceFn::L1: acc += std::fabs(v); break;
        case ReduceFn::L2: case ReduceFn::SumSquare: acc += v * v; break;
        case ReduceFn::LogSumExp: acc += std::exp(v - most); break;
        default: break;
      }
    }
    if (a.fn == ReduceFn::Mean) acc /= double(p.inner.size());
    if (a.fn == ReduceFn::L2) acc = std::sqrt(acc);
    if (a.fn == ReduceFn::LogSum) acc = std::log(acc);
    if (a.fn == ReduceFn::LogSumExp) acc = std::log(acc) + most;
    if (nan && (a.fn == ReduceFn::Max || a.fn == ReduceFn::Min)) acc = NAN;  // NaN propagates, as in ONNX Runtime
    sd(out, int64_t(o), acc);
  }
}

void k_softmax(const Op& op, const std::vector<TensorArg>& in, const TensorOut& out) {
  const SoftmaxAttrs& a = op.as<SoftmaxAttrs>();
  const Shape& x = in[0].shape;
  const int axis = x.rank == 0 ? 0 : a.axis;
  const ReducePlan p = reduce_plan(x, x.rank == 0 ? std::vector<int>{} : std::vector<int>{axis});
  for (int64_t b : p.base) {
    double most = -INFINITY;
    size_t arg = 0;
    for (size_t k = 0; k < p.inner.size(); ++k) {
      const double v = ld(in[0], b + p.inner[k]);
      if (v > most) {
        most = v;
        arg = k;
      }
    }
    if (a.fn == SoftmaxFn::Hardmax) {
      for (size_t k = 0; k < p.inner.size(); ++k) sd(out, b + p.inner[k], k == arg ? 1 : 0);
      continue;
    }
    double sum = 0;
    for (int64_t off : p.inner) sum += std::exp(ld(in[0], b + off) - most);
    for (int64_t off : p.inner) {
      const double z = ld(in[0], b + off) - most;
      sd(out, b + off, a.fn == SoftmaxFn::Softmax ? std::exp(z) / sum : z - std::log(sum));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// matmul

void k_matmul(const Op& op, const std::vector<TensorArg>& in, const TensorOut& out) {
  const MatMulAttrs& a = op.as<MatMulAttrs>();
  const Shape A = in[0].shape.rank == 1 ? Shape::of({1, in[0].shape.dim(0)}) : in[0].shape;
  const Shape B = in[1].shape.rank == 1 ? Shape::of({in[1].shape.dim(0), 1}) : in[1].shape;
  const int64_t m = a.trans_a ? A.dim(A.rank - 1) : A.dim(A.rank - 2);
  const int64_t k = a.trans_a ? A.dim(A.rank - 2) : A.dim(A.rank - 1);
  const int64_t n = a.trans_b ? B.dim(B.rank - 2) : B.dim(B.rank - 1);
  // The batch dims of the result, broadcast; each operand's batch offset per result batch.
  std::vector<int64_t> da = A.dims(), db = B.dims();
  const Shape ba = Shape::of(std::vector<int64_t>(da.begin(), da.end() - 2));
  const Shape bb = Shape::of(std::vector<int64_t>(db.begin(), db.end() - 2));
  Shape batch;
  broadcast_shapes({ba, bb}, &batch);
  const std::vector<int64_t> offa = broadcast_offsets(ba, batch), offb = broadcast_offsets(bb, batch);
  const bool floats = is_float(in[0].dtype);
  std::vector<int64_t> oc;
  if (in.size() == 3) oc = broadcast_offsets(in[2].shape, out.shape);
  if (!floats) {
    for (int64_t bi = 0; bi < batch.numel(); ++bi) {
      const int64_t a0 = offa[size_t(bi)] * m * k, b0 = offb[size_t(bi)] * k * n;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const int64_t o = (bi * m + i) * n + j;
          uint64_t s = 0;
          for (int64_t t = 0; t < k; ++t) {
            s += uint64_t(li(in[0], a0 + (a.trans_a ? t * m + i : i * k + t))) *
                 uint64_t(li(in[1], b0 + (a.trans_b ? j * k + t : t * n + j)));
          }
          if (in.size() == 3) s += uint64_t(li(in[2], oc[size_t(o)]));
          si(out, o, int64_t(s));
        }
      }
    }
    return;
  }
  // Floats: each operand matrix is read once into double, A as m rows of k and B as n rows of
  // k, so that every output element is a contiguous dot product (a transformer's 577-token
  // products took minutes as per-element typed loads walking B by columns). Each sum still
  // runs over t in order, so the rows can be spread over threads without changing a bit.
  std::vector<double> am(size_t(m * k)), bt(size_t(n * k));
  int64_t loaded_a = -1, loaded_b = -1;
  for (int64_t bi = 0; bi < batch.numel(); ++bi) {
    const int64_t a0 = offa[size_t(bi)] * m * k, b0 = offb[size_t(bi)] * k * n;
    if (a0 != loaded_a) {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t t = 0; t < k; ++t) am[size_t(i * k + t)] = ld(in[0], a0 + (a.trans_a ? t * m + i : i * k + t));
      loaded_a = a0;
    }
    if (b0 != loaded_b) {  // a weight shared by every batch entry is read once
      for (int64_t j = 0; j < n; ++j)
        for (int64_t t = 0; t < k; ++t) bt[size_t(j * k + t)] = ld(in[1], b0 + (a.trans_b ? j * k + t : t * n + j));
      loaded_b = b0;
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < m; ++i) {
      const double* ar = am.data() + i * k;
      for (int64_t j = 0; j < n; ++j) {
        const double* br = bt.data() + j * k;
        const int64_t o = (bi * m + i) * n + j;
        double s = 0;
        for (int64_t t = 0; t < k; ++t) s += ar[t] * br[t];
        s *= a.alpha;
        if (in.size() == 3) s += a.beta * ld(in[2], oc[size_t(o)]);
        sd(out, o, s);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// movement: elements copied as bytes

void copy_elem(const TensorOut& out, int64_t i, const TensorArg& in, int64_t j) {
  const size_t es = dtype_size(out.dtype);
  std::memcpy(static_cast<uint8_t*>(out.data) + size_t(i) * es, static_cast<const uint8_t*>(in.data) + size_t(j) * es, es);
}

void k_copy(const Op&, const std::vector<TensorArg>& in, const TensorOut& out) {
  if (out.data == in[0].data) return;  // a reshape view of its input (executor/memory_plan.hpp)
  std::memcpy(out.data, in[0].data, size_t(out.shape.numel()) * dtype_size(out.dtype));
}

void k_transpose(const Op& op, const std::vector<TensorArg>& in, const TensorOut& out) {
  const std::vector<int>& p = op.as<TransposeAttrs>().perm;
  const auto st = strides_of(in[0].shape);
  std::array<int64_t, kMaxRank> idx{};
  int64_t src = 0;
  for (int64_t i = 0; i < out.shape.numel(); ++i) {
    copy_elem(out, i, in[0], src);
    for (int d = out.shape.rank - 1; d >= 0; --d) {
      const int64_t s = st[size_t(p[size_t(d)])];
      if (++idx[size_t(d)] < out.shape.dim(d)) {
        src += s;
        break;
      }
      src -= s * (out.shape.dim(d) - 1);
      idx[size_t(d)] = 0;
    }
  }
}

// In double, row by row (the normalised dims are the last, so a row is contiguous): the mean
// first, then the spread about it, as ONNX's LayerNormalization defines them.
void k_norm(const Op& op, const std::vector<TensorArg>& in, const TensorOut& out) {
  const NormAttrs& a = op.as<NormAttrs>();
  const int64_t len = norm_length(a, in[0].shape), rows = len > 0 ? in[0].shape.numel() / len : 0;
  const TensorArg& scale = in[size_t(a.scale_operand())];
  const TensorArg* bias = in.size() > size_t(a.scale_operand()) + 1 ? &in[size_t(a.scale_operand()) + 1] : nullptr;
  const bool one_scale = scale.shape.numel() == 1, one_bias = bias && bias->shape.numel() == 1;
  // The residual sum rounded to float, as the add node it stands for would store it.
  auto x_at = [&](int64_t i) {
    return a.residual ? double(float(ld(in[0], i) + ld(in[1], i))) : ld(in[0], i);
  };
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * len;
    double mean = 0;
    if (a.fn == NormFn::Layer) {
      for (int64_t k = 0; k < len; ++k) mean += x_at(base + k);
      mean /= double(len);
    }
    double spread = 0;
    for (int64_t k = 0; k < len; ++k) {
      const double d = x_at(base + k) - mean;
      spread += d * d;
    }
    const double inv = 1.0 / std::sqrt(spread / double(len) + a.epsilon);
    for (int64_t k = 0; k < len; ++k) {
      const double b = bias ? ld(*bias, one_bias ? 0 : k) : 0.0;
      sd(out, base + k, (x_at(base + k) - mean) * inv * ld(scale, one_scale ? 0 : k) + b);
    }
  }
}

void k_expand(const Op&, const std::vector<TensorArg>& in, const TensorOut& out) {
  const std::vector<int64_t> off = broadcast_offsets(in[0].shape, out.shape);
  for (int64_t i = 0; i < out.shape.numel(); ++i) copy_elem(out, i, in[0], off[size_t(i)]);
}

void k_concat(const Op& op, const std::vector<TensorArg>& in, const TensorOut& out) {
  const int axis = op.as<ConcatAttrs>().axis;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= out.shape.dim(d);
  for (int d = axis + 1; d < out.shape.rank; ++d) inner *= out.shape.dim(d);
  const size_t es = dtype_size(out.dtype);
  int64_t at = 0;
  for (const TensorArg& t : in) {
    const int64_t rows = t.shape.dim(axis) * inner;
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(static_cast<uint8_t*>(out.data) + size_t((o * out.shape.dim(axis) * inner + at * inner)) * es,
                  static_cast<const uint8_t*>(t.data) + size_t(o * rows) * es, size_t(rows) * es);
    }
    at += t.shape.dim(axis);
  }
}

void k_slice(const Op& op, const std::vector<TensorArg>& in, const TensorOut& out) {
  const SliceAttrs& a = op.as<SliceAttrs>();
  const auto st = strides_of(in[0].shape);
  int64_t src = 0;
  for (int d = 0; d < out.shape.rank; ++d) src += a.starts[size_t(d)] * st[size_t(d)];
  std::array<int64_t, kMaxRank> idx{};
  for (int64_t i = 0; i < out.shape.numel(); ++i) {
    copy_elem(out, i, in[0], src);
    for (int d = out.shape.rank - 1; d >= 0; --d) {
      const int64_t s = a.steps[size_t(d)] * st[size_t(d)];
      if (++idx[size_t(d)] < out.shape.dim(d)) {
        src += s;
        break;
      }
      src -= s * (out.shape.dim(d) - 1);
      idx[size_t(d)] = 0;
    }
  }
}

int64_t checked_index(int64_t v, int64_t dim, const Op& op) {
  if (v < 0) v += dim;
  HIOS_CHECK(v >= 0 && v < dim, "cpu kernel: %s: index %lld is outside a dim of %lld", describe_op(op).c_str(),
             (long long)(v < 0 ? v - dim : v), (long long)dim);
  return v;
}

void k_gather(const Op& op, const std::vector<TensorArg>& in, const TensorOut& out) {
  const GatherAttrs& a = op.as<GatherAttrs>();
  const Shape& x = in[0].shape;
  const auto st = strides_of(x);
  if (a.elements) {
    const auto ist = strides_of(in[1].shape);
    for (int64_t i = 0; i < out.shape.numel(); ++i) {
      int64_t rem = i, src = 0;
      for (int d = 0; d < out.shape.rank; ++d) {
        const int64_t c = rem / ist[size_t(d)];
        rem %= ist[size_t(d)];
        src += (d == a.axis ? checked_index(li(in[1], i), x.dim(d), op) : c) * st[size_t(d)];
      }
      copy_elem(out, i, in[0], src);
    }
    return;
  }
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < a.axis; ++d) outer *= x.dim(d);
  for (int d = a.axis + 1; d < x.rank; ++d) inner *= x.dim(d);
  const int64_t nidx = in[1].shape.numel();
  const size_t es = dtype_size(out.dtype);
  if (outer == 1 && nidx == 1 &&
      out.data == static_cast<const uint8_t*>(in[0].data) +
                      size_t(checked_index(li(in[1], 0), x.dim(a.axis), op) * inner) * es) {
    return;  // a view of its one index's elements (executor/memory_plan.hpp)
  }
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k = 0; k < nidx; ++k) {
      const int64_t j = checked_index(li(in[1], k), x.dim(a.axis), op);
      std::memcpy(static_cast<uint8_t*>(out.data) + size_t((o * nidx + k) * inner) * es,
                  static_cast<const uint8_t*>(in[0].data) + size_t((o * x.dim(a.axis) + j) * inner) * es, size_t(inner) * es);
    }
  }
}

void k_cast(const Op&, const std::vector<TensorArg>& in, const TensorOut& out) {
  convert_elements(in[0].data, in[0].dtype, out.data, out.dtype, out.shape.numel());
}

void k_join(const Op&, const std::vector<TensorArg>&, const TensorOut& out) { sd(out, 0, 0); }

// Separable: per axis, the taps (input index, weight) of every output coordinate
// (graph/ops_tensor.hpp's rules, a row split's band included); an output element sums over the
// product of its axes' taps.
void k_resize(const Op& op, const std::vector<TensorArg>& in, const TensorOut& out) {
  const ResizeAttrs& a = op.as<ResizeAttrs>();
  const Shape& x = in[0].shape;
  const int rank = x.rank;
  std::vector<std::vector<std::vector<std::pair<int64_t, double>>>> taps(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) {
    int per = 0;
    const std::vector<ResizeTap> all = resize_axis_taps(a, d, resize_axis(a, d, x, out.shape), &per);
    taps[size_t(d)].resize(size_t(out.shape.dim(d)));
    for (int64_t o = 0; o < out.shape.dim(d); ++o) {
      for (int k = 0; k < per; ++k) {
        const ResizeTap& t = all[size_t(o * per + k)];
        if (t.used) taps[size_t(d)][size_t(o)].push_back({t.index, t.weight});
      }
    }
  }
  const auto st = strides_of(x);
  std::array<int64_t, kMaxRank> idx{};
  for (int64_t i = 0; i < out.shape.numel(); ++i) {
    int64_t rem = i;
    for (int d = rank - 1; d >= 0; --d) {
      idx[size_t(d)] = rem % out.shape.dim(d);
      rem /= out.shape.dim(d);
    }
    // Walk the product of the axes' taps as a mixed-radix counter.
    std::array<size_t, kMaxRank> k{};
    double acc = 0;
    for (;;) {
      double w = 1;
      int64_t off = 0;
      for (int d = 0; d < rank; ++d) {
        const auto& p = taps[size_t(d)][size_t(idx[size_t(d)])][k[size_t(d)]];
        off += p.first * st[size_t(d)];
        w *= p.second;
      }
      acc += w * ld(in[0], off);
      int d = rank - 1;
      while (d >= 0 && ++k[size_t(d)] == taps[size_t(d)][size_t(idx[size_t(d)])].size()) k[size_t(d--)] = 0;
      if (d < 0) break;
    }
    if (is_float(out.dtype)) sd(out, i, acc);
    else si(out, i, int64_t(std::llround(acc)));
  }
}

using TensorKernel = void (*)(const Op&, const std::vector<TensorArg>&, const TensorOut&);

}  // namespace

void run_tensor_op(const Op& op, const std::vector<TensorArg>& in, const TensorOut& out) {
  TensorKernel fn = nullptr;
  switch (op.kind) {
    case OpKind::Activation: fn = k_activation; break;
    case OpKind::Softmax: fn = k_softmax; break;
    case OpKind::Join: fn = k_join; break;
    case OpKind::Binary: fn = k_binary; break;
    case OpKind::Where: fn = k_where; break;
    case OpKind::Reduce: fn = k_reduce; break;
    case OpKind::MatMul: fn = k_matmul; break;
    case OpKind::Transpose: fn = k_transpose; break;
    case OpKind::Reshape: fn = k_copy; break;
    case OpKind::Concat: fn = k_concat; break;
    case OpKind::Slice: fn = k_slice; break;
    case OpKind::Gather: fn = k_gather; break;
    case OpKind::Cast: fn = k_cast; break;
    case OpKind::Expand: fn = k_expand; break;
    case OpKind::Resize: fn = k_resize; break;
    case OpKind::Norm: fn = k_norm; break;
    case OpKind::Attention: fn = attention; break;
    default: throw_error("cpu backend: %s has no tensor kernel", op_def(op.kind).name);
  }
  fn(op, in, out);
}

void round_to_type(float* v, int64_t count, DType t) {
  if (t == DType::F16) {
    for (int64_t i = 0; i < count; ++i) v[i] = half_to_float(float_to_half(v[i]));
  } else if (t == DType::BF16) {
    for (int64_t i = 0; i < count; ++i) v[i] = bfloat16_to_float(float_to_bfloat16(v[i]));
  }
}

}  // namespace hios::exec::cpu
