// Inception v3 as torchvision builds it (Szegedy et al. 2016, "Rethinking the Inception
// Architecture"), inference path only: the auxiliary classifier runs only in training and the
// dropout before fc is the identity at inference, so neither appears. Node names follow the
// torchvision module names so that weights and profiles can be matched by name.
//
// Every BasicConv2d is conv (no bias) + BN + ReLU; with BN folded each conv carries a bias and
// a fused ReLU, which is the GraphBuilder::conv default.
#include "models/models.hpp"

namespace hios {

namespace {

using K = std::array<int, 2>;

// The avg-pool branches pool 3x3/1 with padding 1 and count the padding in the divisor
// (F.avg_pool2d's default), so spatial size is kept and the border values are diluted.
Value avg_pool_3x3(GraphBuilder& b, const std::string& name, Value x) {
  return b.pool(name, x, PoolKind::Avg, 3, 1, 1, false, true);
}

// InceptionA (Mixed_5b/c/d, 35x35): 1x1 | 1x1 -> 5x5 | 1x1 -> 3x3 -> 3x3 | avgpool -> 1x1.
Value inception_a(GraphBuilder& b, const std::string& m, Value x, int64_t pool_features) {
  b.begin_block(m);
  Value b1 = b.conv(m + ".branch1x1", {x}, 64, 1, 1, 0);
  Value b5 = b.conv(m + ".branch5x5_1", {x}, 48, 1, 1, 0);
  b5 = b.conv(m + ".branch5x5_2", {b5}, 64, 5, 1, 2);
  Value b3 = b.conv(m + ".branch3x3dbl_1", {x}, 64, 1, 1, 0);
  b3 = b.conv(m + ".branch3x3dbl_2", {b3}, 96, 3, 1, 1);
  b3 = b.conv(m + ".branch3x3dbl_3", {b3}, 96, 3, 1, 1);
  Value bp = avg_pool_3x3(b, m + ".avg_pool", x);
  bp = b.conv(m + ".branch_pool", {bp}, pool_features, 1, 1, 0);
  Value out = b.concat(m + ".concat", {b1, b5, b3, bp});
  b.end_block(out);
  return out;
}

// InceptionB (Mixed_6a): grid reduction 35 -> 17 by strided convs beside a max pool.
Value inception_b(GraphBuilder& b, const std::string& m, Value x) {
  b.begin_block(m);
  Value b3 = b.conv(m + ".branch3x3", {x}, 384, 3, 2, 0);
  Value bd = b.conv(m + ".branch3x3dbl_1", {x}, 64, 1, 1, 0);
  bd = b.conv(m + ".branch3x3dbl_2", {bd}, 96, 3, 1, 1);
  bd = b.conv(m + ".branch3x3dbl_3", {bd}, 96, 3, 2, 0);
  Value bp = b.pool(m + ".max_pool", x, PoolKind::Max, 3, 2, 0);
  Value out = b.concat(m + ".concat", {b3, bd, bp});
  b.end_block(out);
  return out;
}

// InceptionC (Mixed_6b..6e, 17x17): 7x7 convs factorised into 1x7 and 7x1.
Value inception_c(GraphBuilder& b, const std::string& m, Value x, int64_t c7) {
  b.begin_block(m);
  Value b1 = b.conv(m + ".branch1x1", {x}, 192, 1, 1, 0);
  Value b7 = b.conv(m + ".branch7x7_1", {x}, c7, 1, 1, 0);
  b7 = b.conv(m + ".branch7x7_2", {b7}, c7, K{1, 7}, K{1, 1}, K{0, 3});
  b7 = b.conv(m + ".branch7x7_3", {b7}, 192, K{7, 1}, K{1, 1}, K{3, 0});
  Value bd = b.conv(m + ".branch7x7dbl_1", {x}, c7, 1, 1, 0);
  bd = b.conv(m + ".branch7x7dbl_2", {bd}, c7, K{7, 1}, K{1, 1}, K{3, 0});
  bd = b.conv(m + ".branch7x7dbl_3", {bd}, c7, K{1, 7}, K{1, 1}, K{0, 3});
  bd = b.conv(m + ".branch7x7dbl_4", {bd}, c7, K{7, 1}, K{1, 1}, K{3, 0});
  bd = b.conv(m + ".branch7x7dbl_5", {bd}, 192, K{1, 7}, K{1, 1}, K{0, 3});
  Value bp = avg_pool_3x3(b, m + ".avg_pool", x);
  bp = b.conv(m + ".branch_pool", {bp}, 192, 1, 1, 0);
  Value out = b.concat(m + ".concat", {b1, b7, bd, bp});
  b.end_block(out);
  return out;
}

// InceptionD (Mixed_7a): grid reduction 17 -> 8.
Value inception_d(GraphBuilder& b, const std::string& m, Value x) {
  b.begin_block(m);
  Value b3 = b.conv(m + ".branch3x3_1", {x}, 192, 1, 1, 0);
  b3 = b.conv(m + ".branch3x3_2", {b3}, 320, 3, 2, 0);
  Value b7 = b.conv(m + ".branch7x7x3_1", {x}, 192, 1, 1, 0);
  b7 = b.conv(m + ".branch7x7x3_2", {b7}, 192, K{1, 7}, K{1, 1}, K{0, 3});
  b7 = b.conv(m + ".branch7x7x3_3", {b7}, 192, K{7, 1}, K{1, 1}, K{3, 0});
  b7 = b.conv(m + ".branch7x7x3_4", {b7}, 192, 3, 2, 0);
  Value bp = b.pool(m + ".max_pool", x, PoolKind::Max, 3, 2, 0);
  Value out = b.concat(m + ".concat", {b3, b7, bp});
  b.end_block(out);
  return out;
}

// InceptionE (Mixed_7b/c, 8x8): the 3x3 branches fan out into parallel 1x3 and 3x1 convs whose
// outputs are concatenated; torchvision's nested cats flatten to one channel order, which the
// single exit concat reproduces.
Value inception_e(GraphBuilder& b, const std::string& m, Value x) {
  b.begin_block(m);
  Value b1 = b.conv(m + ".branch1x1", {x}, 320, 1, 1, 0);
  Value b3 = b.conv(m + ".branch3x3_1", {x}, 384, 1, 1, 0);
  Value b3a = b.conv(m + ".branch3x3_2a", {b3}, 384, K{1, 3}, K{1, 1}, K{0, 1});
  Value b3b = b.conv(m + ".branch3x3_2b", {b3}, 384, K{3, 1}, K{1, 1}, K{1, 0});
  Value bd = b.conv(m + ".branch3x3dbl_1", {x}, 448, 1, 1, 0);
  bd = b.conv(m + ".branch3x3dbl_2", {bd}, 384, 3, 1, 1);
  Value bda = b.conv(m + ".branch3x3dbl_3a", {bd}, 384, K{1, 3}, K{1, 1}, K{0, 1});
  Value bdb = b.conv(m + ".branch3x3dbl_3b", {bd}, 384, K{3, 1}, K{1, 1}, K{1, 0});
  Value bp = avg_pool_3x3(b, m + ".avg_pool", x);
  bp = b.conv(m + ".branch_pool", {bp}, 192, 1, 1, 0);
  Value out = b.concat(m + ".concat", {b1, b3a, b3b, bda, bdb, bp});
  b.end_block(out);
  return out;
}

// The stem is a plain chain; each layer gets its own one-node block so that a pipeline split
// can fall between any two of them.
Value single(GraphBuilder& b, const std::string& name, Value x, int64_t out, int k, int stride, int pad) {
  b.begin_block(name);
  Value y = b.conv(name, {x}, out, k, stride, pad);
  b.end_block(y);
  return y;
}

Value max_pool_block(GraphBuilder& b, const std::string& name, Value x) {
  b.begin_block(name);
  Value y = b.pool(name, x, PoolKind::Max, 3, 2, 0);
  b.end_block(y);
  return y;
}

}  // namespace

Graph build_inception_v3(const ModelParams& p) {
  GraphBuilder b("inception_v3", p.batch, p.height, p.width);
  Value x = b.input(3);

  // 299 -> 149 -> 147 -> 147 -> 73 -> 73 -> 71 -> 35; none of the stem convs pads except 2b.
  x = single(b, "Conv2d_1a_3x3", x, 32, 3, 2, 0);
  x = single(b, "Conv2d_2a_3x3", x, 32, 3, 1, 0);
  x = single(b, "Conv2d_2b_3x3", x, 64, 3, 1, 1);
  x = max_pool_block(b, "maxpool1", x);
  x = single(b, "Conv2d_3b_1x1", x, 80, 1, 1, 0);
  x = single(b, "Conv2d_4a_3x3", x, 192, 3, 1, 0);
  x = max_pool_block(b, "maxpool2", x);

  x = inception_a(b, "Mixed_5b", x, 32);
  x = inception_a(b, "Mixed_5c", x, 64);
  x = inception_a(b, "Mixed_5d", x, 64);
  x = inception_b(b, "Mixed_6a", x);
  x = inception_c(b, "Mixed_6b", x, 128);
  x = inception_c(b, "Mixed_6c", x, 160);
  x = inception_c(b, "Mixed_6d", x, 160);
  x = inception_c(b, "Mixed_6e", x, 192);
  x = inception_d(b, "Mixed_7a", x);
  x = inception_e(b, "Mixed_7b", x);
  x = inception_e(b, "Mixed_7c", x);

  // Adaptive average pooling to 1x1 is what lets the model take any input of at least 75x75
  // (the smallest size at which Mixed_7a still yields a 1x1 grid).
  b.begin_block("head");
  Value pooled = b.pool("avgpool", x, PoolKind::GlobalAvg);
  Value logits = b.linear("fc", pooled, 1000);
  b.end_block(logits);
  return b.finish();
}

}  // namespace hios
