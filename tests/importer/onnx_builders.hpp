// Building ONNX graphs in the importer's tests with the protobuf API.
#pragma once

#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace hios::test {

// Adds a node of `op` reading `in` and writing `out` (also its name) to g.
inline onnx::NodeProto* onnx_node(onnx::GraphProto& g, const std::string& op, std::vector<std::string> in,
                                  const std::string& out) {
  onnx::NodeProto* n = g.add_node();
  n->set_op_type(op);
  n->set_name(out);
  for (const auto& i : in) n->add_input(i);
  n->add_output(out);
  return n;
}

}  // namespace hios::test
