// ResNet-50 as torchvision builds it (resnet50), inference path only. It has almost no
// branching (one shortcut per bottleneck), which makes it the control case for the scheduler:
// inter-operator parallelism should buy little here.
//
// torchvision's Bottleneck is "v1.5": the stride of a downsampling block sits on the 3x3 conv,
// not on the first 1x1 as in the original paper; this changes the MACs (4.09 G rather than
// 3.86 G at 224), so it matters for matching published figures. BN is folded into every conv,
// which therefore carries a bias.
#include "models/models.hpp"

namespace hios {

namespace {

// One bottleneck: 1x1 reduce -> 3x3 (strided) -> 1x1 expand, plus the shortcut, then ReLU.
// The residual add and the ReLU after it are one node: an activation whose single input term
// sums the main path and the shortcut. That is the fused add+ReLU kernel inference libraries
// run, and it keeps the block exit a whole node.
Value bottleneck(GraphBuilder& b, const std::string& m, Value x, int64_t width, int stride) {
  const int64_t out_channels = width * 4;
  b.begin_block(m);
  Value y = b.conv(m + ".conv1", {x}, width, 1, 1, 0);
  y = b.conv(m + ".conv2", {y}, width, 3, stride, 1);
  // No ReLU here: the ReLU comes after the residual sum.
  y = b.conv(m + ".conv3", {y}, out_channels, 1, 1, 0, Activation::None);
  Value shortcut = x;
  if (stride != 1 || b.channels(x) != out_channels) {
    shortcut = b.conv(m + ".downsample.0", {x}, out_channels, 1, stride, 0, Activation::None);
  }
  Value out = b.node(m + ".relu", activation_op(Activation::Relu), {Term{y, shortcut}});
  b.end_block(out);
  return out;
}

}  // namespace

Graph build_resnet50(const ModelParams& p) {
  GraphBuilder b("resnet50", p.batch, p.height, p.width);
  Value x = b.input(3);

  b.begin_block("stem");
  x = b.conv("conv1", {x}, 64, 7, 2, 3);
  x = b.pool("maxpool", x, PoolKind::Max, 3, 2, 1);
  b.end_block(x);

  // Stages of 3, 4, 6 and 3 bottlenecks; each stage after the first halves the grid in its
  // first block, and the bottleneck width doubles per stage.
  const int blocks_per_stage[4] = {3, 4, 6, 3};
  for (int s = 0; s < 4; ++s) {
    const int64_t width = int64_t(64) << s;
    for (int i = 0; i < blocks_per_stage[s]; ++i) {
      int stride = (s > 0 && i == 0) ? 2 : 1;
      x = bottleneck(b, "layer" + std::to_string(s + 1) + "." + std::to_string(i), x, width, stride);
    }
  }

  b.begin_block("head");
  Value pooled = b.pool("avgpool", x, PoolKind::GlobalAvg);
  Value logits = b.linear("fc", pooled, 1000);
  b.end_block(logits);
  return b.finish();
}

}  // namespace hios
