// The operator table: the one place that says what every op is.
//
// Each OpKind has exactly one OpDef entry holding its JSON name, a one-line summary, its
// attribute codec, its shape inference and its cost counts. Layers that need per-op behaviour
// (backends, cost models) index their own tables by OpKind and check completeness against
// kNumOpKinds, instead of growing a second switch over the enum (the ggml pitfall).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "graph/json_reader.hpp"

namespace hios {

// Element types. Float tensors are computed in the backend's math mode (--math); a node typed
// float16 or bfloat16 holds values of that precision. The integer and bool types carry indices,
// masks and shapes. F32 stays first: it is every node's default.
enum class DType { F32, F16, BF16, F64, I64, I32, I16, I8, U8, U16, U32, U64, Bool };
constexpr int kNumDTypes = 13;
size_t dtype_size(DType t);
const char* dtype_name(DType t);                      // "float32", "int64", "bool", ...
bool parse_dtype(std::string_view name, DType* out);  // false when unknown
bool is_float(DType t);                               // F32, F16, BF16, F64
bool is_signed_int(DType t);                          // I64, I32, I16, I8

// A tensor shape of rank 0 to kMaxRank. Dims 0-3 are the fields n, c, h and w, so an image
// tensor (rank 4, what the convolution-network ops take) reads as N x C x H x W, and dims 4-7
// are `more`. Every dim past the rank is 1: a rank-2 [N, K] is also the image [N, K, 1, 1],
// which is what a fully connected layer gives, and a rank-0 scalar has one element. Batch is part
// of the shape: the models take it as a parameter.
constexpr int kMaxRank = 8;
struct Shape {
  int64_t n = 0, c = 0, h = 0, w = 0;
  std::array<int64_t, 4> more{1, 1, 1, 1};
  int rank = 4;

  static Shape of(const std::vector<int64_t>& dims);  // throws hios::Error past kMaxRank
  int64_t dim(int i) const { return const_cast<Shape*>(this)->dim(i); }
  int64_t& dim(int i) {
    switch (i) {
      case 0: return n;
      case 1: return c;
      case 2: return h;
      case 3: return w;
      default: return more[size_t(i - 4)];
    }
  }
  std::vector<int64_t> dims() const;
  int64_t numel() const { return n * c * h * w * more[0] * more[1] * more[2] * more[3]; }
  bool operator==(const Shape& o) const {
    return rank == o.rank && n == o.n && c == o.c && h == o.h && w == o.w && more == o.more;
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  // "1x64x147x147"; "scalar" for rank 0
};

// The first twelve kinds are the convolution-network forms (image tensors, sum-of-concat terms,
// fused epilogues, row windows); the rest are the general tensor ops of any rank and element
// type (graph/ops_tensor.cpp), onto which an imported model's long tail lowers.
enum class OpKind {
  Input, Conv, Pool, Activation, Add, Mul, Identity, Sequential, Linear, Softmax, Rows, Pad,
  Join, Binary, Where, Reduce, MatMul, Transpose, Reshape, Concat, Slice, Gather, Cast, Expand, Resize,
  ConvTranspose, Norm, Attention
};
constexpr int kNumOpKinds = 28;

// The element-wise functions of one operand: the activation op's, and a conv's fused epilogue
// (None to Relu6, and HardSwish: conv_epilogue_activation). Relu6 is min(max(x, 0), 6)
// (MobileNet's). alpha and beta are the function's ONNX attributes where it has them (LeakyRelu's
// slope, Clip's bounds, HardSigmoid's alpha and beta, ...). The CUDA kernels take the epilogue's
// functions as integer codes in this order (executor/cuda/kernel_util.cuh, activate).
enum class Activation {
  None, Relu, Sigmoid, Tanh, Relu6,
  LeakyRelu, Elu, Selu, Celu, HardSigmoid, HardSwish, Softplus, Softsign, Gelu, GeluTanh, Erf, Mish,
  Clip, Exp, Log, Sqrt, Reciprocal, Abs, Neg, Floor, Ceil, Round, Sign, Sin, Cos, Tan, Asin, Acos,
  Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Not, IsNan, IsInf, ThresholdedRelu, Shrink
};
constexpr int kNumActivations = 44;
const char* activation_name(Activation a);
// Whether a convolution's epilogue computes `a`: none, relu, sigmoid, tanh, relu6 and
// hard_swish (x * relu6(x + 3) / 6, MobileNetV3's), the functions without attributes its
// kernels know.
inline bool conv_epilogue_activation(Activation a) { return int(a) <= int(Activation::Relu6) || a == Activation::HardSwish; }
// Whether f maps an operand of integer type onto itself exactly (abs, neg, sign, relu, ...).
bool activation_takes_integers(Activation a);
bool activation_reads_alpha(Activation a);  // written in JSON with alpha / beta
bool activation_reads_beta(Activation a);

enum class PoolKind { Max, Avg, GlobalMax, GlobalAvg };
const char* pool_kind_name(PoolKind p);

// Placeholder for the network input; its spatial size and batch come from the Graph.
struct InputAttrs {
  int64_t channels = 3;
};

// A window op (conv, pool) that computes only a band of its output rows: one part of a row
// split (docs/row-splits.md). The op keeps the geometry of the whole tensor: output
// row out_first + y reads the global input rows under its window, a row is padding exactly
// when it falls outside [0, in_full), and the node's input tensor holds the global rows
// starting at in_first. So a band computes bit for bit what the unsplit op computes there,
// padding, ceil_mode and count_include_pad included. in_full == 0: not a band.
//
// A global average pool with a window is a *partial* pool (the reduction that ends a split
// region): out_first = 0, out_count = 1, and its input holds the global rows [in_first,
// in_first + its height) of a tensor in_full rows high. It sums those rows and divides by the
// whole tensor's in_full x W, so the partial pools of a partition of the rows add up to the
// mean (docs/row-splits.md). A global max pool has no partial form.
struct RowWindow {
  int64_t out_first = 0;
  int64_t out_count = 0;
  int64_t in_first = 0;
  int64_t in_full = 0;
  bool banded() const { return in_full > 0; }
  bool operator==(const RowWindow& o) const {
    return out_first == o.out_first && out_count == o.out_count && in_first == o.in_first && in_full == o.in_full;
  }
};

// 2-D convolution. Batch norm is folded into the weights and bias when a model is built, so
// convs that were followed by BN carry bias = true.
struct ConvAttrs {
  int64_t out_channels = 0;
  std::array<int, 2> kernel{1, 1};
  std::array<int, 2> stride{1, 1};
  std::array<int, 2> padding{0, 0};
  std::array<int, 2> dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
  Activation activation = Activation::None;  // fused into the conv
  // The node's last input term is added to the convolution's output, after the bias and before
  // the activation: a skip connection (ResNet's, MobileNet's) fused into the convolution that
  // ends the branch, so the sum is not a pass of its own. The other terms are the input.
  bool residual = false;
  RowWindow rows;                            // a band of a row split, or the whole tensor
};

struct PoolAttrs {
  PoolKind kind = PoolKind::Max;
  std::array<int, 2> kernel{1, 1};  // ignored by the global kinds
  std::array<int, 2> stride{1, 1};
  std::array<int, 2> padding{0, 0};
  bool ceil_mode = false;           // PyTorch's ceil_mode (SqueezeNet uses it)
  bool count_include_pad = true;    // avg only: divide by the full window, padding included
  RowWindow rows;                   // a band of a row split; global avg: a partial pool
};

// Rows [first, first + count) of a tensor `full` rows high, copied from operands that each hold
// a band of it: operand k (input term k) holds the rows starting at held[k]. A row held by
// several operands is taken from the first. Row splits use it to cut a halo from a part, to
// assemble a part's input from its own rows and its neighbours' halos, and to gather the parts
// of a region's last node into the whole tensor.
struct RowsAttrs {
  int64_t first = 0;
  int64_t count = 0;
  int64_t full = 0;
  std::vector<int64_t> held;
};

// Explicit padding of H and W, for padding a conv or pool cannot take in its own (one side
// more than the other: TensorFlow's "same" padding). A negative pad crops. The fill is zero,
// or -inf before a max pool.
enum class PadFill { Zero, NegInf };
struct PadAttrs {
  std::array<int64_t, 4> pads{0, 0, 0, 0};  // top, left, bottom, right
  PadFill fill = PadFill::Zero;
};

struct ActivationAttrs {
  Activation activation = Activation::Relu;
  // leaky_relu, elu, celu, thresholded_relu: alpha; selu: alpha, gamma (in beta); hard_sigmoid:
  // alpha x + beta; clip: [alpha, beta]; shrink: lambd (alpha), bias (beta); is_inf: alpha != 0
  // detects +inf, beta != 0 detects -inf. Written in JSON only for the functions that read them.
  double alpha = 0, beta = 0;
};

// Fully connected layer over the flattened C*H*W input; the output is N x out x 1 x 1.
struct LinearAttrs {
  int64_t out_features = 0;
  bool bias = true;
};

struct Op;
// A chain of single-input ops scheduled as one unit (e.g. a separable conv: depthwise then
// pointwise). The first step consumes the node's assembled input.
struct SequentialAttrs {
  std::vector<Op> steps;
};

// The general tensor ops' attributes (they use the types above).
#include "graph/ops_general.inc"

// Add, Mul, Identity, Join and Where carry no attributes (std::monostate).
// A transposed 2-D convolution (ONNX's ConvTranspose, PyTorch's ConvTranspose2d): every input
// pixel scatters its kernel-sized patch into the output at `stride` apart. The output is
// (in - 1) * stride + dilation * (kernel - 1) + 1 + output_padding - pads before - pads after
// along each axis. Weights are [in][out / groups][kh][kw], as ONNX and PyTorch store them.
struct ConvTransposeAttrs {
  int64_t out_channels = 0;
  std::array<int, 2> kernel{1, 1};
  std::array<int, 2> stride{1, 1};
  std::array<int, 4> pads{0, 0, 0, 0};  // top, left, bottom, right
  std::array<int, 2> output_padding{0, 0};
  std::array<int, 2> dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
};

using Attrs = std::variant<std::monostate, InputAttrs, ConvAttrs, PoolAttrs, ActivationAttrs, LinearAttrs,
                           SequentialAttrs, RowsAttrs, PadAttrs, SoftmaxAttrs, BinaryAttrs, ReduceAttrs, MatMulAttrs,
                           TransposeAttrs, ReshapeAttrs, ConcatAttrs, SliceAttrs, GatherAttrs, CastAttrs, ExpandAttrs,
                           TensorInputAttrs, ResizeAttrs, ConvTransposeAttrs, NormAttrs, AttentionAttrs>;

struct Op {
  OpKind kind = OpKind::Identity;
  Attrs attrs;

  const ConvAttrs& conv() const { return std::get<ConvAttrs>(attrs); }
  const PoolAttrs& pool() const { return std::get<PoolAttrs>(attrs); }
  const ActivationAttrs& act() const { return std::get<ActivationAttrs>(attrs); }
  const LinearAttrs& linear() const { return std::get<LinearAttrs>(attrs); }
  const InputAttrs& input() const { return std::get<InputAttrs>(attrs); }
  const SequentialAttrs& sequential() const { return std::get<SequentialAttrs>(attrs); }
  const RowsAttrs& rows() const { return std::get<RowsAttrs>(attrs); }
  const PadAttrs& pad() const { return std::get<PadAttrs>(attrs); }
  template <class A>
  const A& as() const { return std::get<A>(attrs); }
  // The input op of a tensor input, which says its own shape and type.
  bool tensor_input() const { return std::holds_alternative<TensorInputAttrs>(attrs); }
};

// Work and traffic of one op. FLOPs count a multiply-add as 2 (MACs counts it once); bias,
// activation and pooling work add one FLOP per element touched. Bytes assume each input,
// weight and output is moved through device memory exactly once.
struct OpCost {
  double flops = 0;
  double macs = 0;
  double params = 0;         // weight and bias elements
  double bytes_read = 0;     // inputs plus weights
  double bytes_written = 0;  // output
  OpCost& operator+=(const OpCost& o);
};

// A band of rows (the H dimension) of a tensor, [begin, end). Row splits (one operator's
// output rows computed on several GPUs) reason in these.
struct RowRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end > begin ? end - begin : 0; }
  bool empty() const { return end <= begin; }
  bool operator==(const RowRange& o) const { return begin == o.begin && end == o.end; }
};

// What shape inference needs to know beyond the op itself.
struct InferContext {
  const std::string& node;  // for error messages
  int64_t batch, height, width;
  // The operands' element types, where the caller knows them (the graph does); empty otherwise.
  std::vector<DType> dtypes = {};
};

struct OpDef {
  OpKind kind;
  const char* name;     // as written in JSON ("conv", "pool", ...)
  const char* summary;  // one line, for `hios ops` and docs
  bool step_allowed;    // may appear inside a sequential
  bool terms_are_operands;  // add/mul: each input term is one operand; otherwise terms are concatenated
  // Output shape from the input. For ordinary ops `in` holds one shape (the concatenation of
  // the terms); for add/mul it holds one shape per operand. Errors name ctx.node.
  Shape (*infer)(const Op& op, const std::vector<Shape>& in, const InferContext& ctx);
  OpCost (*count)(const Op& op, const std::vector<Shape>& in, const Shape& out, DType dtype);
  void (*write_attrs)(const Op& op, json& out);
  void (*read_attrs)(Op& op, JsonObject& obj);  // also installs the attribute struct
  std::string (*describe)(const Op& op);        // short label for DOT and listings
  // The input rows that output rows `out` read, clipped to [0, in_h) (an empty band reads
  // nothing). A window op reads the rows under its windows, stride, padding, dilation and
  // ceil_mode included; row-wise ops (activations, element-wise ops, softmax over channels)
  // read the same rows; ops whose output reads every input row (linear, global pools) read the
  // whole input and cannot be split by rows without a reduction.
  RowRange (*input_rows)(const Op& op, RowRange out, int64_t in_h);
  int64_t (*output_rows)(const Op& op, int64_t in_h);  // H of the output for an input of in_h rows
  bool row_local;  // input_rows is a bounded band: a row split of this op needs only a halo
  // The output's element type from the operands' (null: operand 0's, F32 without operands).
  DType (*infer_dtype)(const Op& op, const std::vector<DType>& in) = nullptr;
  // A general tensor op: any rank, operands one value each, constants allowed among them.
  bool general = false;
};

const OpDef& op_def(OpKind kind);
const OpDef* find_op(std::string_view name);  // nullptr when unknown
const std::vector<OpDef>& op_table();

Op make_op(OpKind kind);  // an op with default attributes

// Shape and cost of an op given its input shapes; for a sequential these walk the steps.
Shape infer_op(const Op& op, const std::vector<Shape>& in, const InferContext& ctx);
DType infer_dtype_op(const Op& op, const std::vector<DType>& in);
OpCost count_op(const Op& op, const std::vector<Shape>& in, const Shape& out, DType dtype);

// JSON for the op part of a node: {"op": name, ...attributes}. read_op consumes "op" and the
// attribute keys from obj; the caller calls obj.finish().
void write_op(const Op& op, json& out);
Op read_op(JsonObject& obj);

// Input rows that output rows `out` of `op` read, for an input of in_h rows (a sequential walks
// its steps backwards). Whether that band is bounded: row_local_op.
RowRange input_rows_op(const Op& op, RowRange out, int64_t in_h);
bool row_local_op(const Op& op);
// `rows` split into `parts` contiguous bands as even as possible, the first ones a row longer
// (empty bands when parts > rows).
std::vector<RowRange> split_rows(int64_t rows, int parts);

// The band a conv or pool computes (a default RowWindow for every other op).
const RowWindow& row_window(const Op& op);
// `op` computing output rows `out` of a tensor whose full input is in_full rows high, from an
// input holding the rows starting at in_first. A sequential sets every step's window, walking
// its steps backwards; row-wise ops need none. Returns the op and, in `needed`, the input rows
// it reads (clipped to the input).
Op band_op(const Op& op, RowRange out, int64_t in_full, int64_t in_first, RowRange* needed = nullptr);
// The partial form of a global average pool: it sums input rows `in_rows` of a tensor in_full
// rows high (its input holds exactly those rows) and divides by the whole tensor's size.
Op partial_pool_op(const Op& op, RowRange in_rows, int64_t in_full);

// A band's window as JSON ({"out_first", "out_count", "in_first", "in_full"}), and read back
// from an op's "rows" key (a default window when it has none).
json row_window_json(const RowWindow& r);
RowWindow read_row_window(JsonObject& o);

// A short human description, e.g. "conv 3x3/2 64 relu".
std::string describe_op(const Op& op);

}  // namespace hios
