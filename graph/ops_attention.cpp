// The attention op's row of the op table: scaled dot-product attention over the last two dims
// (graph/ops.hpp, AttentionAttrs), its shape and type rules, counts, JSON and label.
#include <cmath>
#include <utility>

#include "graph/error.hpp"
#include "graph/ops_tensor.hpp"

namespace hios {

namespace {

// Whether mask shape m broadcasts (NumPy, from the right) to `scores`.
bool mask_broadcasts(const Shape& m, const Shape& scores) {
  if (m.rank > scores.rank) return false;
  for (int k = 1; k <= m.rank; ++k) {
    const int64_t d = m.dim(m.rank - k), want = scores.dim(scores.rank - k);
    if (d != 1 && d != want) return false;
  }
  return true;
}

// A token-major operand [..., S, H, D] as the head-major [..., H, S, D] it stands for.
Shape head_major(const Shape& s) {
  Shape h = s;
  std::swap(h.dim(s.rank - 3), h.dim(s.rank - 2));
  return h;
}

Shape infer_attention(const Op& op, const std::vector<Shape>& in_shapes, const InferContext& ctx) {
  const AttentionAttrs& a = op.as<AttentionAttrs>();
  const size_t want = a.mask ? 4 : 3;
  HIOS_CHECK(in_shapes.size() == want, "node '%s': attention takes %zu operands (q, k, v%s), got %zu", ctx.node.c_str(),
             want, a.mask ? ", mask" : "", in_shapes.size());
  std::vector<Shape> in = in_shapes;
  if (a.token_major) {
    for (int k = 0; k < 3; ++k) {
      HIOS_CHECK(in[size_t(k)].rank >= 3, "node '%s': token-major attention's operand %d %s is not of rank 3 or more",
                 ctx.node.c_str(), k, in[size_t(k)].str().c_str());
      in[size_t(k)] = head_major(in[size_t(k)]);
    }
  }
  const Shape &q = in[0], &k = in[1], &v = in[2];
  HIOS_CHECK(q.rank >= 2 && k.rank == q.rank && v.rank == q.rank,
             "node '%s': attention's q %s, k %s and v %s are not of one rank of at least 2", ctx.node.c_str(),
             q.str().c_str(), k.str().c_str(), v.str().c_str());
  const int r = q.rank;
  for (int d = 0; d < r - 2; ++d) {
    HIOS_CHECK(k.dim(d) == q.dim(d) && v.dim(d) == q.dim(d),
               "node '%s': attention's q %s, k %s and v %s differ in leading dim %d", ctx.node.c_str(), q.str().c_str(),
               k.str().c_str(), v.str().c_str(), d);
  }
  HIOS_CHECK(k.dim(r - 1) == q.dim(r - 1), "node '%s': attention's k %s has not the head size of q %s", ctx.node.c_str(),
             k.str().c_str(), q.str().c_str());
  HIOS_CHECK(v.dim(r - 2) == k.dim(r - 2), "node '%s': attention's v %s has not the keys of k %s", ctx.node.c_str(),
             v.str().c_str(), k.str().c_str());
  HIOS_CHECK(q.dim(r - 2) > 0 && k.dim(r - 2) > 0 && q.dim(r - 1) > 0 && v.dim(r - 1) > 0,
             "node '%s': attention over an empty dim (q %s, k %s, v %s)", ctx.node.c_str(), q.str().c_str(),
             k.str().c_str(), v.str().c_str());
  HIOS_CHECK(std::isfinite(a.scale), "node '%s': attention scale %g", ctx.node.c_str(), a.scale);
  Shape scores = q;
  scores.dim(r - 1) = k.dim(r - 2);
  if (a.mask) {
    HIOS_CHECK(mask_broadcasts(in[3], scores), "node '%s': attention mask %s does not broadcast to the scores %s",
               ctx.node.c_str(), in[3].str().c_str(), scores.str().c_str());
  }
  if (!ctx.dtypes.empty()) {
    for (size_t i = 0; i < in.size() && i < ctx.dtypes.size(); ++i) {
      HIOS_CHECK(is_float(ctx.dtypes[i]), "node '%s': attention of a %s operand", ctx.node.c_str(),
                 dtype_name(ctx.dtypes[i]));
    }
  }
  Shape out = q;
  out.dim(r - 1) = v.dim(r - 1);
  return a.token_major ? head_major(out) : out;
}

OpCost count_attention(const Op& op, const std::vector<Shape>& in, const Shape& out, DType t) {
  const bool tm = op.as<AttentionAttrs>().token_major;
  const Shape q = tm ? head_major(in[0]) : in[0], k = tm ? head_major(in[1]) : in[1];
  const int r = q.rank;
  const double sq = double(q.dim(r - 2)), sk = double(k.dim(r - 2)), d = double(q.dim(r - 1));
  const double dv = double(out.dim(r - 1));
  const double batch = double(out.numel()) / (sq * dv);
  OpCost c;
  // Two products and the softmax's five passes over the scores (scale and mask, max, exp, sum,
  // divide); a fused kernel reads Q, K, V and the mask once and writes the result once.
  c.flops = batch * sq * sk * (2 * d + 2 * dv + 5);
  c.bytes_read = value_bytes(in, t);
  c.bytes_written = value_bytes(out, t);
  return c;
}

void write_attention(const Op& op, json& j) {
  const AttentionAttrs& a = op.as<AttentionAttrs>();
  j["scale"] = a.scale;
  if (a.causal) j["causal"] = true;
  if (a.mask) j["mask"] = true;
  if (a.token_major) j["token_major"] = true;
}

void read_attention(Op& op, JsonObject& o) {
  AttentionAttrs a;
  a.scale = o.get_number("scale");
  a.causal = o.get_bool("causal", false);
  a.mask = o.get_bool("mask", false);
  a.token_major = o.get_bool("token_major", false);
  HIOS_CHECK(std::fabs(a.scale) < 1e30, "%s: scale %g (its magnitude below 1e30)", o.child_path("scale").c_str(), a.scale);
  op.attrs = a;
}

std::string describe_attention(const Op& op) {
  const AttentionAttrs& a = op.as<AttentionAttrs>();
  return strprintf("attention x%.4g%s%s%s", a.scale, a.causal ? " causal" : "", a.mask ? " masked" : "",
                   a.token_major ? " token-major" : "");
}

RowRange attention_rows(const Op&, RowRange out, int64_t in_h) { return out.empty() ? RowRange{} : RowRange{0, in_h}; }
int64_t attention_out_rows(const Op&, int64_t in_h) { return in_h; }

}  // namespace

OpDef attention_op_row() {
  return {OpKind::Attention, "attention", "softmax(scale * Q K^T + mask) V over the last two dims, optionally causal",
          false, true, infer_attention, count_attention, write_attention, read_attention, describe_attention,
          attention_rows, attention_out_rows, false, nullptr, true};
}

}  // namespace hios
