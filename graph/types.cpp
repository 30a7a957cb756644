// Element types, shapes and the element-wise functions' table: the vocabulary every op of
// graph/ops.cpp and graph/ops_tensor.cpp is written in.
#include <algorithm>

#include "graph/error.hpp"
#include "graph/ops.hpp"

namespace hios {

namespace {
struct DTypeInfo {
  DType t;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F32, "float32", 4}, {DType::F16, "float16", 2}, {DType::BF16, "bfloat16", 2}, {DType::F64, "float64", 8},
    {DType::I64, "int64", 8},   {DType::I32, "int32", 4},   {DType::I16, "int16", 2},     {DType::I8, "int8", 1},
    {DType::U8, "uint8", 1},    {DType::U16, "uint16", 2},  {DType::U32, "uint32", 4},    {DType::U64, "uint64", 8},
    {DType::Bool, "bool", 1},
};
static_assert(sizeof(kDTypes) / sizeof(kDTypes[0]) == kNumDTypes, "one row per DType");
}  // namespace

size_t dtype_size(DType t) { return kDTypes[size_t(t)].size; }
const char* dtype_name(DType t) { return kDTypes[size_t(t)].name; }
bool parse_dtype(std::string_view name, DType* out) {
  for (const DTypeInfo& d : kDTypes) {
    if (name == d.name) {
      *out = d.t;
      return true;
    }
  }
  return false;
}
bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64; }
bool is_signed_int(DType t) { return t == DType::I64 || t == DType::I32 || t == DType::I16 || t == DType::I8; }

Shape Shape::of(const std::vector<int64_t>& dims) {
  HIOS_CHECK(dims.size() <= size_t(kMaxRank), "a tensor of rank %zu: hios tensors have rank %d at most", dims.size(),
             kMaxRank);
  // Bounds that keep every later size computation (offsets, byte counts, a dim grown by a concat)
  // inside int64: a dim of at most 2^40 and at most 2^48 elements in all. A dim of 2^62 beside a
  // dim of 0 is an empty tensor on paper and an overflow in the first sum that adds to it.
  constexpr int64_t kMaxDimSize = int64_t(1) << 40, kMaxElements = int64_t(1) << 48;
  Shape s{1, 1, 1, 1};
  s.rank = int(dims.size());
  int64_t elements = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    HIOS_CHECK(dims[i] >= 0 && dims[i] <= kMaxDimSize, "a tensor with dim %zu of size %lld: dims are 0 to 2^40",
               i, (long long)dims[i]);
    s.dim(int(i)) = dims[i];
    // Zero dims are skipped: numel() multiplies left to right, so the other dims' product must
    // fit whatever the zeros make of the total.
    if (dims[i] > 1) elements = elements > kMaxElements / dims[i] ? kMaxElements + 1 : elements * dims[i];
  }
  HIOS_CHECK(elements <= kMaxElements, "a tensor of %s: hios tensors hold at most 2^48 elements",
             s.str().c_str());
  return s;
}

std::vector<int64_t> Shape::dims() const {
  std::vector<int64_t> d(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) d[size_t(i)] = dim(i);
  return d;
}

std::string Shape::str() const {
  if (rank == 4) return strprintf("%lldx%lldx%lldx%lld", (long long)n, (long long)c, (long long)h, (long long)w);
  if (rank == 0) return "scalar";
  std::string out;
  for (int i = 0; i < rank; ++i) out += (i ? "x" : "") + std::to_string(dim(i));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Small enum codecs.

namespace {
// Name, whether it reads alpha / beta, and whether it maps integers onto integers exactly.
struct ActivationInfo {
  Activation a;
  const char* name;
  bool alpha, beta, integers;
};
constexpr ActivationInfo kActivations[] = {
    {Activation::None, "none", false, false, true},
    {Activation::Relu, "relu", false, false, true},
    {Activation::Sigmoid, "sigmoid", false, false, false},
    {Activation::Tanh, "tanh", false, false, false},
    {Activation::Relu6, "relu6", false, false, false},
    {Activation::LeakyRelu, "leaky_relu", true, false, false},
    {Activation::Elu, "elu", true, false, false},
    {Activation::Selu, "selu", true, true, false},
    {Activation::Celu, "celu", true, false, false},
    {Activation::HardSigmoid, "hard_sigmoid", true, true, false},
    {Activation::HardSwish, "hard_swish", false, false, false},
    {Activation::Softplus, "softplus", false, false, false},
    {Activation::Softsign, "softsign", false, false, false},
    {Activation::Gelu, "gelu", false, false, false},
    {Activation::GeluTanh, "gelu_tanh", false, false, false},
    {Activation::Erf, "erf", false, false, false},
    {Activation::Mish, "mish", false, false, false},
    {Activation::Clip, "clip", true, true, true},
    {Activation::Exp, "exp", false, false, false},
    {Activation::Log, "log", false, false, false},
    {Activation::Sqrt, "sqrt", false, false, false},
    {Activation::Reciprocal, "reciprocal", false, false, false},
    {Activation::Abs, "abs", false, false, true},
    {Activation::Neg, "neg", false, false, true},
    {Activation::Floor, "floor", false, false, false},
    {Activation::Ceil, "ceil", false, false, false},
    {Activation::Round, "round", false, false, false},
    {Activation::Sign, "sign", false, false, true},
    {Activation::Sin, "sin", false, false, false},
    {Activation::Cos, "cos", false, false, false},
    {Activation::Tan, "tan", false, false, false},
    {Activation::Asin, "asin", false, false, false},
    {Activation::Acos, "acos", false, false, false},
    {Activation::Atan, "atan", false, false, false},
    {Activation::Sinh, "sinh", false, false, false},
    {Activation::Cosh, "cosh", false, false, false},
    {Activation::Asinh, "asinh", false, false, false},
    {Activation::Acosh, "acosh", false, false, false},
    {Activation::Atanh, "atanh", false, false, false},
    {Activation::Not, "not", false, false, true},
    {Activation::IsNan, "is_nan", false, false, false},
    {Activation::IsInf, "is_inf", true, true, false},
    {Activation::ThresholdedRelu, "thresholded_relu", true, false, false},
    {Activation::Shrink, "shrink", true, true, false},
};
static_assert(sizeof(kActivations) / sizeof(kActivations[0]) == kNumActivations, "one row per Activation");
const ActivationInfo& activation_info(Activation a) { return kActivations[size_t(a)]; }
}  // namespace

const char* activation_name(Activation a) { return activation_info(a).name; }
bool activation_takes_integers(Activation a) { return activation_info(a).integers; }

// A conv's epilogue takes the first five (what its kernels fuse); the activation op any of them.
bool activation_reads_alpha(Activation a) { return activation_info(a).alpha; }
bool activation_reads_beta(Activation a) { return activation_info(a).beta; }

}  // namespace hios
