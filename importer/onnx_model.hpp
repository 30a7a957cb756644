// Reading an ONNX file: the protobuf message, the default domain's opset, and constant tensors
// (initializers and Constant nodes) with their data, external data included. The importer
// (importer/onnx_import.hpp) works on these; nothing here knows hios's ops.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "graph/ops.hpp"

namespace hios::importer {

// A constant tensor. Floating-point data (float, double, float16, bfloat16) is held as float,
// integer and boolean data as int64: what weights and shape arithmetic need.
struct ConstTensor {
  std::vector<int64_t> dims;
  bool integer = false;
  std::vector<float> f;    // when !integer
  std::vector<int64_t> i;  // when integer
  int onnx_type = 0;       // the TensorProto data type it was read as; 0: float or int64 by `integer`
  int64_t numel() const;
  double at(int64_t k) const { return integer ? double(i[size_t(k)]) : double(f[size_t(k)]); }
  static ConstTensor ints(std::vector<int64_t> dims, std::vector<int64_t> values);
  static ConstTensor floats(std::vector<int64_t> dims, std::vector<float> values);
};

struct OnnxModel {
  std::string file;
  std::string folder;  // external data is found relative to it
  onnx::ModelProto proto;
  int opset = 0;  // of the default domain
};

// Parses `file`; errors name it. Refuses files over 2 GiB (protobuf's limit: such models keep
// their weights as external data).
OnnxModel read_onnx_model(const std::string& file);

// The data of a TensorProto, reading external data from the model's folder. `what` names the
// tensor in errors.
ConstTensor read_tensor(const OnnxModel& m, const onnx::TensorProto& t, const std::string& what);

// The hios element type of an ONNX TensorProto data type; false for types hios has not (string,
// complex).
bool dtype_of_onnx(int onnx_type, DType* out);
// A constant's element type: its onnx_type's, or float32 / int64 where it came from arithmetic.
DType const_dtype(const ConstTensor& c);

}  // namespace hios::importer
