// The sample network from the HIOS/IOS README: two blocks, each with three parallel 3x3 convs
// whose outputs are combined as concat(conv1 + conv2, conv3) through term semantics.
#include "models/models.hpp"

namespace hios {

Graph build_demo(const ModelParams& p) {
  GraphBuilder b("demo", p.batch, p.height, p.width);
  Value x = b.input(375);
  for (int blk = 0; blk < 2; ++blk) {
    std::string pre = "b" + std::to_string(blk + 1) + ".";
    b.begin_block("block" + std::to_string(blk + 1));
    Value v1 = b.conv(pre + "conv1", {x}, 48, 3, 1, 1);
    Value v2 = b.conv(pre + "conv2", {x}, 48, 3, 1, 1);
    Value v3 = b.conv(pre + "conv3", {x}, 48, 3, 1, 1);
    // [[v1, v2], [v3]]: the first term sums v1 and v2, the second is v3; the terms concat.
    x = b.node(pre + "out", make_op(OpKind::Identity), {Term{v1, v2}, Term{v3}});
    b.end_block(x);
  }
  return b.finish();
}

}  // namespace hios
