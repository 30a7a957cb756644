// NASNet-A Large (6 @ 4032), the ImageNet network of Zoph et al., laid out as timm's
// `nasnetalarge` (itself a port of Cadene's pretrainedmodels). It is the most irregular model of
// the zoo: every cell reads the outputs of the two cells before it, so blocks reach back two
// blocks, and each cell holds ten parallel branches.
//
// Layout: one block for conv0, one per cell (2 stem cells, 18 normal cells, 2 reduction cells)
// and one for the classifier head, 24 in all.
//
// Padding. Every strided op in timm uses TF "SAME" padding, which pads asymmetrically (one more
// zero on the bottom/right) when the input size is even; Cadene's port emulates the same thing
// with ZeroPad2d plus a one-pixel crop in reduction_cell_0. Neither is expressible here: conv and
// pool padding is symmetric per axis. An odd kernel k with symmetric padding k/2 and stride s
// gives ceil(in / s) outputs, exactly what SAME gives, so every tensor has timm's shape at every
// input size and the counts, which depend only on shapes, are unchanged. Only the placement of
// the zero border differs, which matters for numerics but not for scheduling.
#include "graph/error.hpp"
#include "models/models.hpp"

namespace hios {

namespace {

constexpr int64_t kDefaultSize = 331;
constexpr int64_t kStemWidth = 96;       // conv0 output channels
constexpr int64_t kPenultimate = 4032;   // channels of the last cell
constexpr int64_t kCellsPerStage = 6;
constexpr int64_t kClasses = 1000;

Op relu_op() { return activation_op(Activation::Relu); }

// ReLU -> 1x1 conv -> BN (folded into the conv's bias): how every cell squeezes its inputs to the
// cell's branch width.
std::vector<Op> relu_conv_bn(int64_t out_channels) {
  return {relu_op(), conv_op(out_channels, {1, 1}, {1, 1}, {0, 0}, Activation::None, 1, true)};
}

// Two stacked (ReLU, depthwise kxk, pointwise 1x1, BN) units; only the first depthwise strides.
// The separable convs have no bias of their own, so the depthwise steps carry none and each
// pointwise step takes the folded BN's bias. Stem branches widen in their first pointwise conv
// (in -> out, then out -> out); all others keep the input width until the last pointwise conv.
std::vector<Op> separable_steps(int64_t in_channels, int64_t out_channels, int kernel, int stride, bool stem) {
  const int64_t mid = stem ? out_channels : in_channels;
  const int pad = kernel / 2;
  return {
      relu_op(),
      conv_op(in_channels, {kernel, kernel}, {stride, stride}, {pad, pad}, Activation::None, in_channels, false),
      conv_op(mid, {1, 1}, {1, 1}, {0, 0}, Activation::None, 1, true),
      relu_op(),
      conv_op(mid, {kernel, kernel}, {1, 1}, {pad, pad}, Activation::None, mid, false),
      conv_op(out_channels, {1, 1}, {1, 1}, {0, 0}, Activation::None, 1, true),
  };
}

class NasNetBuilder {
 public:
  explicit NasNetBuilder(GraphBuilder& b) : b_(b) {}

  Value separable(const std::string& name, Value in, int64_t out_channels, int kernel, int stride,
                  bool stem = false) {
    return b_.sequential(name, {in}, separable_steps(b_.channels(in), out_channels, kernel, stride, stem));
  }

  Value squeeze(const std::string& name, Value in, int64_t out_channels) {
    return b_.sequential(name, {in}, relu_conv_bn(out_channels));
  }

  // Averages exclude the zero border, as in the reference (count_include_pad=False), so border
  // outputs are true means of the pixels they cover.
  Value avg_pool(const std::string& name, Value in, int stride) {
    return b_.pool(name, in, PoolKind::Avg, 3, stride, 1, false, false);
  }
  Value max_pool(const std::string& name, Value in, int stride) {
    return b_.pool(name, in, PoolKind::Max, 3, stride, 1, false);
  }

  // The factorized reduction that brings the previous-previous cell down to the current
  // resolution in the first cell of each stage: ReLU, then two half-width stride-2 1x1 convs
  // concatenated and batch-normed. Each conv takes its half of the BN's bias.
  //
  // The reference reaches stride 2 with AvgPool2d(1, stride=2) before a stride-1 1x1 conv, which
  // is the same function as a stride-2 1x1 conv, so one conv op stands for both. Its second path
  // first shifts the input by one pixel (a crop of the top row and left column plus a zero pad
  // at the bottom/right) so the two halves sample interleaved pixels; a shift is not expressible
  // here, so path_2 samples the same pixels as path_1. Shapes and counts are unchanged.
  Value factorized_reduction(const std::string& pre, Value in, int64_t out_channels) {
    const int64_t half = out_channels / 2;
    Value r = b_.activation(pre + "relu", in, Activation::Relu);
    Value p1 = b_.conv(pre + "path_1", {r}, half, 1, 2, 0, Activation::None, 1, true);
    Value p2 = b_.conv(pre + "path_2", {r}, half, 1, 2, 0, Activation::None, 1, true);
    return b_.concat(pre + "path", {p1, p2});
  }

  // A normal cell on its two squeezed inputs (`left` from the previous-previous cell, `right`
  // from the previous one). The five combinations and the pass-through of `left` are
  // concatenated; the adds fold into the concat's terms, so the exit is a single node that sums
  // pairs and concatenates the pairs.
  Value normal_cell(const std::string& pre, Value left, Value right) {
    const int64_t c = b_.channels(right);
    Value c0l = separable(pre + "comb_iter_0_left", right, c, 5, 1);
    Value c0r = separable(pre + "comb_iter_0_right", left, c, 3, 1);
    Value c1l = separable(pre + "comb_iter_1_left", left, c, 5, 1);
    Value c1r = separable(pre + "comb_iter_1_right", left, c, 3, 1);
    Value c2l = avg_pool(pre + "comb_iter_2_left", right, 1);
    // The reference computes this pooling twice (its two operands are the same op on the same
    // input); both are kept so the work matches what the reference runs.
    Value c3l = avg_pool(pre + "comb_iter_3_left", left, 1);
    Value c3r = avg_pool(pre + "comb_iter_3_right", left, 1);
    Value c4l = separable(pre + "comb_iter_4_left", right, c, 3, 1);
    return b_.node(pre + "out", make_op(OpKind::Identity),
                   {Term{left}, Term{c0l, c0r}, Term{c1l, c1r}, Term{c2l, left}, Term{c3l, c3r}, Term{c4l, right}});
  }

  // A reduction cell (also the shape of both stem cells). `a` feeds the pools and the left
  // separables, `b` the right separables; `stem` selects the widening separables the first stem
  // cell applies to the raw conv0 output. Combinations 0 and 1 are read again inside the cell, so
  // they are nodes of their own; the other adds fold into the exit's terms.
  Value reduction_cell(const std::string& pre, Value a, Value b, int64_t c, bool stem) {
    Value c0l = separable(pre + "comb_iter_0_left", a, c, 5, 2);
    Value c0r = separable(pre + "comb_iter_0_right", b, c, 7, 2, stem);
    Value c0 = b_.sum(pre + "comb_iter_0", {c0l, c0r});
    Value c1l = max_pool(pre + "comb_iter_1_left", a, 2);
    Value c1r = separable(pre + "comb_iter_1_right", b, c, 7, 2, stem);
    Value c1 = b_.sum(pre + "comb_iter_1", {c1l, c1r});
    Value c2l = avg_pool(pre + "comb_iter_2_left", a, 2);
    Value c2r = separable(pre + "comb_iter_2_right", b, c, 5, 2, stem);
    Value c3r = avg_pool(pre + "comb_iter_3_right", c0, 1);
    Value c4l = separable(pre + "comb_iter_4_left", c0, c, 3, 1);
    Value c4r = max_pool(pre + "comb_iter_4_right", a, 2);
    return b_.node(pre + "out", make_op(OpKind::Identity), {Term{c1}, Term{c2l, c2r}, Term{c3r, c1}, Term{c4l, c4r}});
  }

 private:
  GraphBuilder& b_;
};

}  // namespace

Graph build_nasnet_large(const ModelParams& p) {
  const int64_t height = p.height ? p.height : kDefaultSize;
  const int64_t width = p.width ? p.width : kDefaultSize;
  // conv0 is an unpadded 3x3; everything after it pads to SAME and cannot shrink a map below 1x1.
  HIOS_CHECK(height >= 3 && width >= 3, "nasnet_large: input must be at least 3x3 (got %lldx%lld)",
             (long long)height, (long long)width);

  GraphBuilder b("nasnet_large", p.batch, height, width);
  NasNetBuilder nb(b);
  const int64_t filters = kPenultimate / (4 * kCellsPerStage);  // 168: branch width of stage 1

  Value x = b.input(3);

  b.begin_block("stem");
  Value conv0 = b.conv("conv0", {x}, kStemWidth, 3, 2, 0, Activation::None, 1, true);
  b.end_block(conv0);

  b.begin_block("cell_stem_0");
  Value s0_x1 = nb.squeeze("cell_stem_0.conv_1x1", conv0, filters / 4);
  Value stem0 = nb.reduction_cell("cell_stem_0.", s0_x1, conv0, filters / 4, true);
  b.end_block(stem0);

  b.begin_block("cell_stem_1");
  Value s1_left = nb.squeeze("cell_stem_1.conv_1x1", stem0, filters / 2);
  Value s1_right = nb.factorized_reduction("cell_stem_1.", conv0, filters / 2);
  Value stem1 = nb.reduction_cell("cell_stem_1.", s1_left, s1_right, filters / 2, false);
  b.end_block(stem1);

  // prev: the last cell's output; prev_prev: the one before it.
  Value prev_prev = stem0, prev = stem1;
  int cell_index = 0;
  for (int stage = 0; stage < 3; ++stage) {
    const int64_t c = filters << stage;
    if (stage > 0) {
      const std::string name = "reduction_cell_" + std::to_string(stage - 1);
      const std::string pre = name + ".";
      b.begin_block(name);
      Value left = nb.squeeze(pre + "conv_prev_1x1", prev_prev, c);
      Value right = nb.squeeze(pre + "conv_1x1", prev, c);
      Value out = nb.reduction_cell(pre, right, left, c, false);
      b.end_block(out);
      // prev_prev stays the cell before the reduction: the stage's first cell reads it at twice
      // its own resolution, which is why that cell starts with a factorized reduction.
      prev = out;
    }
    for (int i = 0; i < kCellsPerStage; ++i, ++cell_index) {
      const std::string name = "cell_" + std::to_string(cell_index);
      const std::string pre = name + ".";
      b.begin_block(name);
      Value left = i == 0 ? nb.factorized_reduction(pre, prev_prev, c)
                          : nb.squeeze(pre + "conv_prev_1x1", prev_prev, c);
      Value right = nb.squeeze(pre + "conv_1x1", prev, c);
      Value out = nb.normal_cell(pre, left, right);
      b.end_block(out);
      prev_prev = prev;
      prev = out;
    }
  }

  b.begin_block("head");
  Value r = b.activation("relu", prev, Activation::Relu);
  Value pooled = b.pool("global_pool", r, PoolKind::GlobalAvg);
  Value logits = b.linear("last_linear", pooled, kClasses);
  b.end_block(logits);

  return b.finish();
}

}  // namespace hios
