// Parameter files in the safetensors format (https://huggingface.co/docs/safetensors): an
// 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and byte
// range, then the raw data. Python reads and writes it with the `safetensors` package
// (safetensors.numpy.load_file / save_file), and its header is plain JSON any tool can show.
//
// A graph whose JSON names such a file ("weights", graph/graph.hpp) takes every parameter from
// it: tensor "<owner>.weight" and "<owner>.bias" for each conv and linear op, the owner being
// the node's name (its params_from for a row split's part) or "<node>.steps[i]" inside a
// sequential node. Weights are stored as PyTorch orders them: conv [out][in/groups][kh][kw],
// linear [out][in].
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hios::exec {

struct TensorEntry {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// The tensors of a safetensors file (F32, F64, F16 and BF16 read as float), loaded once per
// path and process and shared after; errors name the file and the tensor.
std::shared_ptr<const std::map<std::string, TensorEntry>> load_safetensors(const std::string& file);
// The bytes of a safetensors file holding `tensors` as F32.
std::string safetensors_bytes(const std::map<std::string, TensorEntry>& tensors);

}  // namespace hios::exec
