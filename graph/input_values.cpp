#include "graph/input_values.hpp"

#include "graph/elements.hpp"
#include "graph/error.hpp"

namespace hios {

namespace {

// What operand k of a node is, for a message: its constant (an embedding table, say), or the
// node its term reads.
std::string operand_name(const Graph& g, const Node& nd, int k) {
  if (nd.constant(k)) return "its constant data";
  const Term& t = nd.inputs.at(size_t(nd.term_of_operand(k)));
  return t.empty() ? "its data" : "'" + g.nodes.at(size_t(t[0].node)).name + "'";
}

}  // namespace

void check_index_input(const Graph& g, int v, const std::vector<uint8_t>& raw, const std::string& source) {
  const Node& in = g.nodes.at(size_t(v));
  if (is_float(in.dtype)) return;
  const int64_t count = in.shape.numel();
  if (int64_t(raw.size()) < count * int64_t(dtype_size(in.dtype))) return;  // the loader's error, not this one's
  for (const Node& nd : g.nodes) {
    if (nd.op.kind != OpKind::Gather || nd.op.as<GatherAttrs>().elements || nd.operands() < 2 || nd.constant(1)) continue;
    const Term& idx = nd.inputs.at(size_t(nd.term_of_operand(1)));
    if (idx.size() != 1 || idx[0].node != v || idx[0].begin != 0 || idx[0].end >= 0) continue;
    const int axis = nd.op.as<GatherAttrs>().axis;
    const Constant* data_const = nd.constant(0);
    const Shape data = data_const ? data_const->shape : g.nodes.at(size_t(nd.inputs.at(0).at(0).node)).shape;
    if (axis < 0 || axis >= data.rank) continue;  // shape inference refuses it
    const int64_t n = data.dim(axis);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t x = load_int(raw.data(), in.dtype, i);
      HIOS_CHECK(x >= -n && x < n, "%s: input '%s' element %lld is %lld, outside the %lld entries of axis %d of %s that node '%s' gathers",
                 source.c_str(), in.name.c_str(), (long long)i, (long long)x, (long long)n, axis,
                 operand_name(g, nd, 0).c_str(), nd.name.c_str());
    }
  }
}

}  // namespace hios
