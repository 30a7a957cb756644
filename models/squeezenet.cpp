// SqueezeNet 1.1 as torchvision builds it (squeezenet1_1), inference path only: the dropout in
// front of the classifier is the identity at inference and is left out. SqueezeNet has no
// batch norm, so every conv keeps its own bias and nothing is folded.
//
// Node names follow torchvision's module paths (features.<i>, classifier.<i>) so that weights
// and profiles can be matched by name; blocks take the paper's names (fire2..fire9).
#include "models/models.hpp"

namespace hios {

namespace {

// torchvision rounds every pool up (ceil_mode), keeping a last partial window. At 224 the grids
// (111 -> 55 -> 27 -> 13) come out the same either way, but at e.g. 225 (112 -> 56 instead of
// 55) they do not, so the flag must be kept for arbitrary sizes.
Value max_pool(GraphBuilder& b, const std::string& name, Value x) {
  return b.pool(name, x, PoolKind::Max, 3, 2, 0, /*ceil_mode=*/true);
}

struct FireSpec {
  int index;       // position in torchvision's `features` Sequential
  int paper_name;  // fire<N> in the paper
  int64_t squeeze, expand1x1, expand3x3;
  bool pool_before;  // a max pool precedes this module in `features`
};

// A Fire module is its own block: the squeeze conv fans out into two parallel expand convs whose
// concatenation is the exit. The max pools between modules are placed at the head of the block
// that consumes them, so that blocks stay one-per-Fire.
Value fire(GraphBuilder& b, const FireSpec& f, Value x) {
  b.begin_block("fire" + std::to_string(f.paper_name));
  if (f.pool_before) x = max_pool(b, "features." + std::to_string(f.index - 1), x);
  std::string m = "features." + std::to_string(f.index);
  Value s = b.conv(m + ".squeeze", {x}, f.squeeze, 1, 1, 0);
  Value e1 = b.conv(m + ".expand1x1", {s}, f.expand1x1, 1, 1, 0);
  Value e3 = b.conv(m + ".expand3x3", {s}, f.expand3x3, 3, 1, 1);
  Value out = b.concat(m + ".concat", {e1, e3});
  b.end_block(out);
  return out;
}

}  // namespace

Graph build_squeezenet(const ModelParams& p) {
  GraphBuilder b("squeezenet", p.batch, p.height, p.width);
  Value x = b.input(3);

  b.begin_block("stem");
  x = b.conv("features.0", {x}, 64, 3, 2, 0);  // ReLU is features.1, fused here
  x = max_pool(b, "features.2", x);
  b.end_block(x);

  static const FireSpec kFires[] = {
      {3, 2, 16, 64, 64, false},   {4, 3, 16, 64, 64, false},   {6, 4, 32, 128, 128, true},
      {7, 5, 32, 128, 128, false}, {9, 6, 48, 192, 192, true},  {10, 7, 48, 192, 192, false},
      {11, 8, 64, 256, 256, false}, {12, 9, 64, 256, 256, false},
  };
  for (const FireSpec& f : kFires) x = fire(b, f, x);

  // The classifier is a 1x1 conv to class scores (ReLU'd, as torchvision does) averaged over the
  // grid; there is no fully connected layer.
  b.begin_block("classifier");
  Value scores = b.conv("classifier.1", {x}, 1000, 1, 1, 0);
  Value out = b.pool("classifier.3", scores, PoolKind::GlobalAvg);
  b.end_block(out);
  return b.finish();
}

}  // namespace hios
