// The per-device engine behind every CUDA entry point: weights, node output bindings, streams
// with their cuDNN handles and workspaces, one plan per node, and the cuDNN algorithm cache.
// Internal to executor/cuda.
//
// Life cycle: bind every node's output buffer, plan the nodes (each on the stream it will run
// on), then launch nodes in any order the caller's dependencies allow, eagerly or under CUDA
// Graph capture. Planning does everything that synchronises or allocates (weights, descriptors,
// cudnnFind, workspaces, scratch), so launching only enqueues work and can be captured.
#pragma once

#include <cudnn.h>

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "executor/cuda/api.hpp"
#include "executor/cuda/device.hpp"
#include "executor/cuda/kernels.hpp"
#include "graph/graph.hpp"

namespace hios::cuda {

using exec::Layout;

// A tensor in device memory, stored in the engine's layout and element type: a whole buffer or
// a channel slice of one. Batch items sit batch_stride elements apart. In NCHW a slice of a
// batch-1 tensor is contiguous; in NHWC a slice's pixels sit pixel_stride elements apart (the
// channels of the buffer it is cut from), so it is contiguous only when it is the whole buffer.
struct View {
  void* ptr = nullptr;
  Shape shape;
  int64_t batch_stride = 0;
  Layout layout = Layout::Nchw;
  int64_t pixel_stride = 0;  // NHWC only
  Elem elem = Elem::F32;
  bool nhwc() const { return layout == Layout::Nhwc; }
  // The address `elements` elements past ptr (null stays null: dry planning passes).
  void* at(int64_t elements) const {
    return ptr ? static_cast<char*>(ptr) + elements * int64_t(elem_bytes(elem)) : nullptr;
  }
  int64_t item() const { return shape.c * shape.h * shape.w; }
  bool packed() const {
    return (shape.n == 1 || batch_stride == item()) && (!nhwc() || pixel_stride == shape.c || shape.h * shape.w == 1);
  }
};
View whole_view(void* ptr, const Shape& s, Layout layout, Elem elem);
// cuDNN's name for a storage type.
inline cudnnDataType_t cudnn_type(Elem e) {
  return e == Elem::F16 ? CUDNN_DATA_HALF : e == Elem::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}
inline Elem storage_elem(MathMode m) {
  return m == MathMode::Fp16 ? Elem::F16 : m == MathMode::Bf16 ? Elem::BF16 : Elem::F32;
}

using Launch = std::function<void(StreamResources&)>;

// Whether a legacy algorithm may run: on an H200, cuDNN's non-fused Winograd turned NaN inputs
// of a bf16 convolution into zeros where ONNX Runtime (and every other algorithm) kept them.
inline bool legacy_algo_keeps_nan(cudnnConvolutionFwdAlgo_t algo) {
  return algo != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}

// What cudnnFind chose for one convolution signature.
struct ConvChoice {
  cudnnConvolutionFwdAlgo_t algo{};
  cudnnMathType_t math{};
  size_t workspace = 0;
  float find_ms = 0;
  int fused = -1;  // cudnnConvolutionBiasActivationForward accepted (1), refused (0), untried (-1)
  int uses = 0;
};

class Engine;

// State of planning one node. Planning runs twice: a dry pass that only measures the scratch a
// node needs (so each stream's arena can be allocated once, before any pointer is handed out),
// then the real pass that creates weights, descriptors and launches.
struct PlanCtx {
  Engine& eng;
  StreamResources& res;
  bool dry;
  const std::string& node_name;
  std::vector<Launch>* launches;
  size_t scratch_top = 0;
  size_t workspace_need = 0;

  View scratch(const Shape& s);  // bump allocation in the stream's arena
  void* scratch_bytes(size_t bytes);  // the same, untyped (null in the dry pass)
  void emit(Launch l) {
    if (!dry) launches->push_back(std::move(l));
  }
  // A packed copy of v when it is strided (channel slice of a batched tensor), else v.
  View packed(const View& v);
  // Rows [first, first + count) of v, packed: v itself or an offset into it where that is
  // packed, otherwise a copy in scratch.
  View rows_of(const View& v, int64_t first, int64_t count);
  // Writes the node-style assembly of `terms` (sum within, concat across) into dst, through a
  // ReLU when `relu` (a node storing relu(value), graph/relu_fold.hpp).
  void assemble_into(const std::vector<Term>& terms, const View& dst, bool relu = false);
  // v for a single whole or sliced value; otherwise an assembly into dst_hint or scratch.
  View input_of(const std::vector<Term>& terms, const Shape& shape, const View* dst_hint, bool relu = false);
  // The node's single input value is stored through a ReLU already (graph/relu_fold.hpp): a
  // sequential skips a first ReLU step.
  bool input_relu_stored = false;
  int node = -1;  // the node being planned (its constants, its element type)
};

// Plans one op (the node's own op or a sequential's step). `in` holds the assembled input, or
// for ops whose terms are operands one view per operand. `prefix` names the weights.
using PlanFn = void (*)(PlanCtx& c, const Op& op, const std::string& prefix, const std::vector<View>& in,
                        const View& out);
// The general tensor ops (executor/cuda/tensor_ops.cpp), and the refusal of the ops without
// kernels, which names the node and what it lacks.
[[noreturn]] void refuse_general(const PlanCtx& c, const char* what);
// A general node of integer or bool values: refused (no kernels take them yet).
void check_general_node(const Node& nd);
void plan_general(PlanCtx& c, const Op& op, const std::string& prefix, const std::vector<View>& in, const View& y);
void plan_reshape(PlanCtx& c, const Op& op, const std::string& prefix, const std::vector<View>& in, const View& y);
// y[n][outs] = x[n][features] . weight^T + bias as one cuBLAS product (the linear layer of
// more than one row; bias is null in the dry planning pass). x is packed: each row's features
// in the layout's order, the order the weights' columns are stored in (C, H, W or H, W, C).
void plan_linear_gemm(PlanCtx& c, const View& x, const void* weight, bool has_bias, const void* bias,
                      const View& y, int64_t features, int64_t outs);
// An activation past ReLU6, or of a tensor that is not an image; a softmax along any axis.
void plan_tensor_activation(PlanCtx& c, const Op& op, const View& x, const View& y);
void plan_tensor_softmax(PlanCtx& c, const Op& op, const View& x, const View& y);
void plan_pad(PlanCtx& c, const Op& op, const std::string& prefix, const std::vector<View>& in, const View& y);
// A transposed convolution: cuDNN's backward-data convolution and the bias (executor/cuda/conv_transpose.cpp).
void plan_conv_transpose(PlanCtx& c, const Op& op, const std::string& prefix, const std::vector<View>& in,
                         const View& y);

struct CudaOpImpl {
  OpKind kind;
  PlanFn plan;
};
// The CUDA kernel table, indexed by OpKind; complete (checked at compile time in ops.cpp).
const CudaOpImpl& cuda_op_impl(OpKind kind);
void plan_node(PlanCtx& c, int node);

class Engine {
 public:
  struct Options {
    int device = 0;
    MathMode math = MathMode::Tf32;
    uint64_t seed = init::kDefaultSeed;
    ConvImpl conv_impl = ConvImpl::Auto;
    Layout layout = Layout::Nchw;  // of every node's buffer (executor/tensor_layout.hpp)
    int stream_priority = 0;       // of every compute stream (CUDA: lower numbers are higher)
    // graph/relu_fold.hpp: nodes whose readers all start with a ReLU store relu(value), and
    // readers with a ReLU step of their own skip it. Off: every node stores its value.
    bool fold_relu = true;
    // BackendConfig::conv_search == "wide": every engine configuration is timed.
    bool wide_conv_search = false;
    PhaseSplit phase_split = PhaseSplit::Timed;  // of dilated convolutions (conv.hpp)
    ChannelPad channel_pad = ChannelPad::Timed;  // of images of few channels (conv.hpp)
  };
  Engine(const Graph& g, const Options& opts);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Graph& graph() const { return *g_; }
  int device() const { return opts_.device; }
  MathMode math() const { return opts_.math; }
  // What tensors and parameters are stored as: fp16 or bf16 under those math modes, else fp32.
  Elem elem() const { return storage_elem(opts_.math); }
  ConvImpl conv_impl() const { return opts_.conv_impl; }
  bool wide_conv_search() const { return opts_.wide_conv_search; }
  PhaseSplit phase_split() const { return opts_.phase_split; }
  ChannelPad channel_pad() const { return opts_.channel_pad; }
  Layout layout() const { return opts_.layout; }
  uint64_t seed() const { return opts_.seed; }
  // Whether node v stores relu(value) (graph/relu_fold.hpp; never when fold_relu is off).
  bool stores_relu(int v) const { return stores_relu_.at(size_t(v)); }

  void ensure_streams(int n);
  int num_streams() const { return int(streams_.size()); }
  StreamResources& stream(int i) { return *streams_.at(size_t(i)); }

  // Storage of each node's whole output, owned by the caller.
  void bind_output(int node, void* ptr);
  void* output_ptr(int node) const { return outputs_.at(size_t(node)); }
  View node_view(int node) const;
  View value_view(const Value& v) const;

  // Plans the nodes, node_streams[i] = {node, stream}; a node may be planned on several
  // streams (each plan uses its stream's scratch and workspace). Scratch arenas and workspaces
  // are sized for exactly these plans; finishes with the device idle. Planning again first
  // drops every plan (reset_plans): launches hold pointers into the arenas a plan sizes.
  void plan(const std::vector<std::pair<int, int>>& node_streams);
  // Drops every plan and output binding, keeping weights, streams and algorithm choices: the
  // engine is then ready for another program of the same graph (a rank session's next load).
  void reset_plans();
  // Drops every plan and binding, as reset_plans, and from now on plans nodes of `g`, another
  // shape of the engine's model (exec::shape_variant_problem names why not): the weights on
  // the device are the same values, so they stay.
  void retarget(const Graph& g);
  // Changes whenever a stream's scratch arena or workspace moves (grows): a captured pass
  // reads them where they were, so one captured in another epoch must be captured again.
  uint64_t resource_epoch() const;
  // Enqueues a node planned on `stream` there.
  void launch(int node, int stream = 0);
  size_t launch_count(int node, int stream = 0) const;

  // Parameters of a conv or linear op, by prefix ("<node>" or "<node>.steps[i]"), built by
  // executor/weights.hpp (the values every backend and rank uses) and uploaded once.
  struct Params {
    const void* weight = nullptr;  // in the storage type, as every tensor
    const void* bias = nullptr;
    int64_t weight_count = 0, bias_count = 0;
  };
  void load_params(int node);
  const Params& params(const std::string& prefix) const;
  // Constant operand `index` of node v (Node::constants, executor/weights.hpp's values) on the
  // device, uploaded once: floats in the storage type, integers as int64 (gather indices).
  const void* node_constant(int node, size_t index);
  // Device memory holding `bytes` from `src`, owned by the engine until it is destroyed (tables
  // a plan's launches read: gather indices, resize taps). Keyed so that planning a node again
  // finds the same upload.
  const void* table(const std::string& key, const void* src, size_t bytes);
  // The NHWC weights of convolution `prefix` (rows of `channels` inputs: out x kh x kw of them)
  // with each row widened to `padded`, the new inputs zero (the channel pad, conv.hpp); made
  // once per prefix and width.
  const void* padded_weights(const std::string& prefix, int64_t rows, int64_t channels, int64_t padded);
  // Writes the graph input's deterministic values into its bound buffer (in the layout).
  void upload_input();
  const void* zeros(int64_t count, cudaStream_t fill_stream);
  // cudnnFind once per distinct signature (key) and device in this process, on the planning
  // stream; later engines on the same device (another schedule, another test) reuse the answer.
  ConvChoice& find_conv(const std::string& key, StreamResources& res, cudnnTensorDescriptor_t xd, const void* x,
                        cudnnFilterDescriptor_t wd, const void* w, cudnnConvolutionDescriptor_t cd,
                        cudnnTensorDescriptor_t yd, void* y, bool fp32_only);
  // Scratch large enough for cudnnFind and fused-call trials; freed after planning.
  void* find_workspace(size_t* bytes);

  // What plan_convolution chose for a signature, for algorithm_report().
  void note_conv(const std::string& key, const std::string& what);

  size_t weight_bytes() const { return weight_bytes_; }
  std::string algorithm_report() const;

 private:
  struct NodePlan {
    int stream = 0;
    std::vector<Launch> launches;
  };
  const Graph* g_;  // retarget() moves it to another shape of the same model
  Options opts_;
  std::vector<bool> stores_relu_;
  std::vector<std::unique_ptr<StreamResources>> streams_;
  std::vector<void*> outputs_;
  // Key: node * kStreamKeys + stream.
  static constexpr int64_t kStreamKeys = int64_t(1) << 20;
  static int64_t plan_key(int node, int stream) { return int64_t(node) * kStreamKeys + stream; }
  std::unordered_map<int64_t, NodePlan> plans_;
  std::unordered_map<std::string, DeviceBuffer> weights_;
  std::unordered_map<std::string, Params> params_;        // by prefix
  std::unordered_map<std::string, Params> owned_params_;  // by owner (Node::params_name) and sizes
  std::vector<bool> params_loaded_;
  size_t weight_bytes_ = 0;
  std::map<std::string, std::pair<std::string, int>> conv_notes_;  // signature -> (choice, uses)
  DeviceBuffer find_ws_;
};

}  // namespace hios::cuda
