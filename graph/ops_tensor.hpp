// The op table's rows past the convolution-network ops (graph/ops.cpp appends them to its own):
// the general tensor ops and the transposed convolution, and the shape rules the general ops
// share with the backends: NumPy broadcasting and the matmul shape.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/ops.hpp"

namespace hios {

// The table rows of OpKind::Join .. OpKind::Resize, in OpKind order.
std::vector<OpDef> tensor_op_rows();
// The row of OpKind::ConvTranspose (graph/ops_conv_transpose.cpp).
OpDef conv_transpose_op_row();
// The row of OpKind::Norm (graph/ops_tensor.cpp).
OpDef norm_op_row();
// The row of OpKind::Attention (graph/ops_attention.cpp).
OpDef attention_op_row();
// The elements one norm normalises together (the product of x's dims from the axis on).
int64_t norm_length(const NormAttrs& a, const Shape& x);
// Whether a norm's scale or bias `s` fits input x normalised from `axis`: one value, or the
// normalised dims' shape with ones allowed in front.
bool norm_operand_fits(const Shape& s, const Shape& x, int axis);
// The row rules of ops that read the rows they write (graph/ops.cpp): the same rows, clipped to
// the input, and an output as high as the input. Element-wise general ops use them too; row_split.cpp
// splits one only where every operand that is not a constant has the output's rows.
RowRange rows_same(const Op& op, RowRange out, int64_t in_h);
int64_t out_rows_same(const Op& op, int64_t in_h);
// The row rules of the convolution-network ops (graph/ops_rows.cpp), named by the table in
// graph/ops.cpp: the input rows an output band reads, and the output height.
RowRange rows_none(const Op& op, RowRange out, int64_t in_h);
RowRange rows_all(const Op& op, RowRange out, int64_t in_h);
RowRange rows_pad(const Op& op, RowRange out, int64_t in_h);
RowRange rows_conv(const Op& op, RowRange out, int64_t in_h);
RowRange rows_pool(const Op& op, RowRange out, int64_t in_h);
RowRange rows_sequential(const Op& op, RowRange out, int64_t in_h);
int64_t out_rows_one(const Op& op, int64_t in_h);
int64_t out_rows_pad(const Op& op, int64_t in_h);
int64_t out_rows_conv(const Op& op, int64_t in_h);
int64_t out_rows_pool(const Op& op, int64_t in_h);
int64_t out_rows_sequential(const Op& op, int64_t in_h);
// Output extent of a window of k taps, stride s, padding p and dilation d over `in` (PyTorch's
// rule, ceil_mode included); graph/ops.cpp.
int64_t window_out(int64_t in, int k, int s, int p, int d, bool ceil_mode);
RowRange window_input_rows(const Op& op, RowRange out, int64_t in_h);  // a conv's or a pool's

// The table rows of conv, pool and sequential (graph/ops_window.cpp).
OpDef conv_op_row();
OpDef pool_op_row();
OpDef sequential_op_row();

// Helpers the table's files share (graph/ops.cpp): element bytes of shapes, the input checks of
// shape inference, and the activation names a conv's epilogue or the activation op takes.
double value_bytes(const Shape& s, DType t);
double value_bytes(const std::vector<Shape>& in, DType t);
void check_positive(const Shape& s, const InferContext& ctx, const char* what);
const Shape& single_input(const std::vector<Shape>& in, const InferContext& ctx);
const Shape& image_input(const std::vector<Shape>& in, const InferContext& ctx, const char* op);
Activation parse_activation(const std::string& s, const std::string& path, bool allow_none, bool epilogue = true);
inline bool is_global(PoolKind k) { return k == PoolKind::GlobalMax || k == PoolKind::GlobalAvg; }

// The NumPy broadcast of shapes (aligned at their last dim, each dim equal or 1). Returns false
// when they do not broadcast.
bool broadcast_shapes(const std::vector<Shape>& in, Shape* out);
// `s` seen at rank `rank` (ones prepended): the strides of an operand broadcast to an output.
Shape with_rank(const Shape& s, int rank);

// The output shape of matmul(A, B) with the attributes' transposes (ONNX MatMul's rank-1 rules
// included); false with a reason when the shapes do not agree.
bool matmul_shape(const MatMulAttrs& a, const Shape& A, const Shape& B, Shape* out, std::string* why);

// Resize's rules, one copy for every backend: the input coordinate of output coordinate x along
// an axis of `in` elements resized by `scale` to `out`; the nearest input index of a coordinate;
// Keys' cubic weights of the taps floor(x) - 1 .. floor(x) + 2 at fraction t.
double resize_coord(ResizeCoord c, double x, double scale, int64_t in, int64_t out);
int64_t resize_nearest_index(NearestRound r, double x);
std::array<double, 4> resize_cubic_weights(double t, double A);

// One axis of a resize as a kernel computes it: the whole tensor's input and output lengths,
// and the outputs [out_first, out_first + count) computed from an operand that holds the input
// elements from in_first on (all zero but for the rows of a row split's band).
struct ResizeAxis {
  int64_t n_in = 0, n_out = 0, out_first = 0, count = 0, in_first = 0;
};
ResizeAxis resize_axis(const ResizeAttrs& a, int axis, const Shape& in, const Shape& out);
// The taps of every output of `x` along `axis`, taps_per_output (written) per output: the input
// index relative to in_first, its weight, and whether the CPU reference sums it (cubic taps
// outside the input with exclude_outside are not summed; the CUDA tables give them weight 0).
// An axis neither resized nor banded has one tap per output, itself.
struct ResizeTap {
  int64_t index = 0;
  double weight = 0;
  bool used = false;
};
std::vector<ResizeTap> resize_axis_taps(const ResizeAttrs& a, int axis, const ResizeAxis& x, int* taps_per_output);

// A band of a transposed convolution: the same op on input rows [in_first, in_first + in_rows)
// of in_full, its top and bottom pads and output padding chosen so that it computes exactly
// output rows `out` of the whole (graph/ops_conv_transpose.cpp; the rows it reads are its
// table row's input_rows).
Op conv_transpose_band(const Op& op, RowRange out, int64_t in_first, int64_t in_rows);

}  // namespace hios
