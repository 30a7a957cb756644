// A node's attributes by name, with ONNX's defaults.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace hios::importer {

class NodeAttrs {
 public:
  explicit NodeAttrs(const onnx::NodeProto& n) : n_(n) {}
  const onnx::AttributeProto* find(const std::string& name) const {
    for (const auto& a : n_.attribute()) {
      if (a.name() == name) return &a;
    }
    return nullptr;
  }
  bool has(const std::string& name) const { return find(name) != nullptr; }
  int64_t i(const std::string& name, int64_t def) const {
    const auto* a = find(name);
    return a ? a->i() : def;
  }
  float f(const std::string& name, float def) const {
    const auto* a = find(name);
    return a ? a->f() : def;
  }
  std::string s(const std::string& name, const std::string& def) const {
    const auto* a = find(name);
    return a ? a->s() : def;
  }
  std::vector<int64_t> ints(const std::string& name, std::vector<int64_t> def = {}) const {
    const auto* a = find(name);
    return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : def;
  }
  std::vector<float> floats(const std::string& name) const {
    const auto* a = find(name);
    return a ? std::vector<float>(a->floats().begin(), a->floats().end()) : std::vector<float>{};
  }

 private:
  const onnx::NodeProto& n_;
};

}  // namespace hios::importer
