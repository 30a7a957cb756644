// The op table's rows past the convolution-network ops (graph/ops.cpp appends them to its own):
// the general tensor ops and the transposed convolution, and the shape rules the general ops
// share with the backends: NumPy broadcasting and the matmul shape.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "graph/ops.hpp"

namespace hios {

// The table rows of OpKind::Join .. OpKind::Resize, in OpKind order.
std::vector<OpDef> tensor_op_rows();
// The row of OpKind::ConvTranspose (graph/ops_conv_transpose.cpp).
OpDef conv_transpose_op_row();

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

}  // namespace hios
