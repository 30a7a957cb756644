// The general tensor ops on the CUDA backend (graph/ops_tensor.cpp), and the element-wise and
// softmax ops on tensors that are not N x C x H x W images or functions past ReLU6. Every op is
// planned onto the strided kernels of executor/cuda/tensor_kernels.hpp: operand and output
// strides come from their views (row-major, channels-last images, channel slices), broadcast
// operands get stride 0, and dims that are contiguous in every operand are merged first.
//
// What has no kernel yet is refused when the program is prepared, with one line naming the node
// and what it needs (--backend cpu runs every op): where, gather of elements, and tensors of
// integers or bools other than int64 graph inputs (token ids and masks, which gathers and
// casts read). Matrix products and attention are planned in
// executor/cuda/matmul_ops.cpp.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include <cublas_v2.h>

#include "executor/cuda/check.hpp"
#include "executor/cuda/cublas_lazy.hpp"
#include "executor/cuda/engine.hpp"
#include "executor/cuda/tensor_kernels.hpp"
#include "executor/cuda/tensor_plan.hpp"
#include "executor/weights.hpp"
#include "graph/elements.hpp"
#include "graph/error.hpp"
#include "graph/ops_tensor.hpp"

namespace hios::cuda {

// The kernels' copies of graph/ops.hpp's function codes (executor/cuda/tensor.cu) follow these.
static_assert(kNumActivations == 44 && int(Activation::Relu6) == 4 && int(Activation::Gelu) == 13 &&
              int(Activation::Clip) == 17 && int(Activation::Atanh) == 38 && int(Activation::Shrink) == 43);
static_assert(int(BinaryFn::FMod) == 8 && int(BinaryFn::PRelu) == 17);
static_assert(int(ReduceFn::Max) == 2 && int(ReduceFn::SumSquare) == 9);
static_assert(int(SoftmaxFn::Hardmax) == 2);

void refuse_general(const PlanCtx& c, const char* what) {
  throw_error("node '%s': the cuda backend has no kernel for %s yet (--backend cpu runs it)", c.node_name.c_str(), what);
}
void check_general_node(const Node& nd) {
  HIOS_CHECK(is_float(nd.dtype), "node '%s': the cuda backend has no kernel for a %s of %s values yet (--backend cpu runs it)",
             nd.name.c_str(), op_def(nd.op.kind).name, dtype_name(nd.dtype));
}

namespace tensor_plan {

Walk walk_of(const View& v) {
  const Shape& s = v.shape;
  Walk w;
  w.rank = s.rank;
  for (int d = 0; d < s.rank; ++d) w.dims[d] = s.dim(d);
  if (s.rank == 4) {
    w.stride[0] = s.n == 1 ? v.item() : v.batch_stride;
    if (v.nhwc()) {
      w.stride[1] = 1;
      w.stride[3] = v.pixel_stride;
      w.stride[2] = s.w * v.pixel_stride;
    } else {
      w.stride[1] = s.h * s.w;
      w.stride[2] = s.w;
      w.stride[3] = 1;
    }
  } else if (s.rank > 0) {
    w.stride[s.rank - 1] = 1;
    for (int d = s.rank - 2; d >= 0; --d) w.stride[d] = w.stride[d + 1] * s.dim(d + 1);
  }
  return w;
}
bool row_major(const View& v) {
  const Walk w = walk_of(v);
  int64_t expect = 1;
  for (int d = w.rank - 1; d >= 0; --d) {
    if (w.dims[d] != 1 && w.stride[d] != expect) return false;
    expect *= w.dims[d];
  }
  return true;
}
// v's strides broadcast to `rank` dims of `dims` (NumPy: aligned at the right, ones stretched).
void broadcast_strides(const View& v, int rank, const int64_t* dims, int64_t* out) {
  const Walk w = walk_of(v);
  for (int d = 0; d < rank; ++d) {
    const int k = d - (rank - w.rank);
    out[d] = k < 0 || (w.dims[k] == 1 && dims[d] != 1) ? 0 : w.stride[k];
  }
}

// The order of the dims that walks the first stride set (the output's) in memory order: by
// stride, largest first, ties in dim order. A channels-last image walked as N, C, H, W stepped
// a pixel at a time in every warp, and an element-wise op on one reached 140 GB/s.
std::vector<int> memory_order(int rank, const int64_t* stride) {
  std::vector<int> order(size_t(rank), 0);
  for (int d = 0; d < rank; ++d) order[size_t(d)] = d;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return std::abs(stride[a]) > std::abs(stride[b]); });
  return order;
}
template <class T>
void permute_dims(T* values, const std::vector<int>& order) {
  std::vector<T> old(values, values + order.size());
  for (size_t d = 0; d < order.size(); ++d) values[d] = old[size_t(order[d])];
}
// Reorders dims and every stride set so that the first set (the output's) is walked in memory
// order; the walk's coordinates are a permutation of the same index space, so any kernel that
// addresses operands through their strides computes the same elements.
void order_by_output(int rank, int64_t* dims, const std::vector<int64_t*>& strides) {
  const std::vector<int> order = memory_order(rank, strides.at(0));
  permute_dims(dims, order);
  for (int64_t* s : strides) permute_dims(s, order);
}

// Drops dims of size 1 and merges neighbours that are contiguous in every stride set, in place.
void collapse(int& rank, int64_t* dims, const std::vector<int64_t*>& strides) {
  int r = 0;
  for (int d = 0; d < rank; ++d) {
    if (dims[d] == 1) continue;
    if (r > 0) {
      bool merge = true;
      for (int64_t* s : strides) merge = merge && s[r - 1] == s[d] * dims[d];
      if (merge) {
        dims[r - 1] *= dims[d];
        for (int64_t* s : strides) s[r - 1] = s[d];
        continue;
      }
    }
    dims[r] = dims[d];
    for (int64_t* s : strides) s[r] = s[d];
    ++r;
  }
  rank = r;
}

const Node& node_of(const PlanCtx& c) { return c.eng.graph().nodes.at(size_t(c.node)); }

// The node's operands in order: its computed inputs' views (`in`, as plan_node assembled them)
// and its constants, uploaded (floats in the storage type). Integer constants are refused here:
// the ops that read them (gather's indices) take them from the host instead.
std::vector<View> float_operands(PlanCtx& c, const std::vector<View>& in) {
  const Node& nd = node_of(c);
  std::vector<View> out;
  size_t term = 0, constant = 0;
  for (int k = 0; k < nd.operands(); ++k) {
    if (const Constant* cst = nd.constant(k)) {
      if (!is_float(cst->dtype)) refuse_general(c, strprintf("%s with a constant of %s values", op_def(nd.op.kind).name,
                                                             dtype_name(cst->dtype)).c_str());
      void* p = c.dry ? nullptr : const_cast<void*>(c.eng.node_constant(c.node, constant));
      out.push_back(whole_view(p, cst->shape, Layout::Nchw, c.eng.elem()));
      ++constant;
    } else {
      const Node& src = c.eng.graph().nodes.at(size_t(nd.inputs.at(term).at(0).node));
      if (!is_float(src.dtype)) {
        refuse_general(c, strprintf("%s of a %s tensor", op_def(nd.op.kind).name, dtype_name(src.dtype)).c_str());
      }
      out.push_back(in.at(term++));
    }
  }
  return out;
}

// 16-bit node types on fp32 storage: the map rounds to them before it stores, as the CPU
// reference does, so a cast to float16 gives float16's values.
int rounding_of(const PlanCtx& c, const View& y) {
  if (c.node < 0 || y.elem != Elem::F32) return 0;
  const DType t = node_of(c).dtype;
  return t == DType::F16 ? 1 : t == DType::BF16 ? 2 : 0;
}

void emit_map(PlanCtx& c, MapParams p) {
  if (c.dry) return;
  c.emit([p](StreamResources& r) { launch_map(p, r.stream()); });
}

// y = fn(operands) element by element, every operand broadcast to y's shape.
void plan_pointwise(PlanCtx& c, const std::vector<View>& ops, const View& y, MapFn fn, int code, float alpha, float beta) {
  MapParams p;
  p.elem = y.elem;
  const Walk wy = walk_of(y);
  p.rank = wy.rank;
  std::copy(wy.dims, wy.dims + kMaxTensorDims, p.dims);
  std::copy(wy.stride, wy.stride + kMaxTensorDims, p.y_stride);
  p.y = y.ptr;
  p.operands = int(ops.size());
  for (size_t k = 0; k < ops.size(); ++k) {
    p.in[k].ptr = ops[k].ptr;
    broadcast_strides(ops[k], p.rank, p.dims, p.in[k].stride);
  }
  p.fn = fn;
  p.code = code;
  p.alpha = alpha;
  p.beta = beta;
  p.round = rounding_of(c, y);
  std::vector<int64_t*> all{p.y_stride, p.in[0].stride};
  if (ops.size() > 1) all.push_back(p.in[1].stride);
  order_by_output(p.rank, p.dims, all);
  collapse(p.rank, p.dims, all);
  emit_map(c, p);
}

// One operand copied into y through its own strides, walking `dims` (y's region).
void plan_copy(PlanCtx& c, const void* src, const int64_t* src_stride, void* dst, const int64_t* dst_stride, int rank,
               const int64_t* dims, Elem elem, int round) {
  MapParams p;
  p.elem = elem;
  p.rank = rank;
  std::copy(dims, dims + rank, p.dims);
  std::copy(dst_stride, dst_stride + rank, p.y_stride);
  std::copy(src_stride, src_stride + rank, p.in[0].stride);
  p.y = dst;
  p.in[0].ptr = src;
  p.round = round;
  order_by_output(p.rank, p.dims, {p.y_stride, p.in[0].stride});
  collapse(p.rank, p.dims, {p.y_stride, p.in[0].stride});
  emit_map(c, p);
}

void plan_binary_op(PlanCtx& c, const Op& op, const std::vector<View>& in, const View& y) {
  const int code = int(op.as<BinaryAttrs>().fn);
  if (!map_binary_supported(code)) refuse_general(c, binary_fn_name(op.as<BinaryAttrs>().fn));
  const std::vector<View> ops = float_operands(c, in);
  plan_pointwise(c, ops, y, MapFn::Binary, code, 0, 0);
}

void plan_transpose(PlanCtx& c, const Op& op, const std::vector<View>& in, const View& y) {
  const std::vector<View> ops = float_operands(c, in);
  const Walk wx = walk_of(ops.at(0)), wy = walk_of(y);
  const std::vector<int>& perm = op.as<TransposeAttrs>().perm;
  int64_t st[kMaxTensorDims] = {};
  for (int d = 0; d < wy.rank; ++d) st[d] = wx.stride[perm.at(size_t(d))];
  plan_copy(c, ops[0].ptr, st, y.ptr, wy.stride, wy.rank, wy.dims, y.elem, rounding_of(c, y));
}

void plan_slice(PlanCtx& c, const Op& op, const std::vector<View>& in, const View& y) {
  const std::vector<View> ops = float_operands(c, in);
  const SliceAttrs& a = op.as<SliceAttrs>();
  const Walk wx = walk_of(ops.at(0)), wy = walk_of(y);
  int64_t st[kMaxTensorDims] = {}, first = 0;
  for (int d = 0; d < wx.rank; ++d) {
    first += a.starts.at(size_t(d)) * wx.stride[d];
    st[d] = a.steps.at(size_t(d)) * wx.stride[d];
  }
  plan_copy(c, ops[0].at(first), st, y.ptr, wy.stride, wy.rank, wy.dims, y.elem, rounding_of(c, y));
}

void plan_concat(PlanCtx& c, const Op& op, const std::vector<View>& in, const View& y) {
  const std::vector<View> ops = float_operands(c, in);
  const int axis = op.as<ConcatAttrs>().axis;
  const Walk wy = walk_of(y);
  int64_t at = 0;
  for (const View& x : ops) {
    const Walk wx = walk_of(x);
    plan_copy(c, x.ptr, wx.stride, y.at(at * wy.stride[axis]), wy.stride, wx.rank, wx.dims, y.elem, rounding_of(c, y));
    at += wx.dims[axis];
  }
}

void plan_expand(PlanCtx& c, const std::vector<View>& in, const View& y) {
  plan_pointwise(c, float_operands(c, in), y, MapFn::Copy, 0, 0, 0);
}

void plan_cast(PlanCtx& c, const std::vector<View>& in, const View& y) {
  const Node& nd = node_of(c);
  const int src = nd.inputs.at(0).at(0).node;
  const DType from = c.eng.graph().nodes.at(size_t(src)).dtype;
  if (!is_float(from)) {
    // An int64 graph input (a padding mask): read as the row-major values it was given.
    if (from != DType::I64) refuse_general(c, strprintf("a cast of %s values (int64 ones run)", dtype_name(from)).c_str());
    const Walk wy = walk_of(y);
    MapParams p;
    p.elem = y.elem;
    p.rank = wy.rank;
    p.fn = MapFn::FromInt64;
    std::copy(wy.dims, wy.dims + kMaxTensorDims, p.dims);
    std::copy(wy.stride, wy.stride + kMaxTensorDims, p.y_stride);
    if (p.rank > 0) p.in[0].stride[p.rank - 1] = 1;
    for (int d = p.rank - 2; d >= 0; --d) p.in[0].stride[d] = p.in[0].stride[d + 1] * p.dims[d + 1];
    p.in[0].ptr = c.dry ? nullptr : c.eng.output_ptr(src);
    p.y = y.ptr;
    p.round = rounding_of(c, y);
    order_by_output(p.rank, p.dims, {p.y_stride, p.in[0].stride});
    collapse(p.rank, p.dims, {p.y_stride, p.in[0].stride});
    emit_map(c, p);
    return;
  }
  // Float to float: the storage type is one for all, so a cast is a copy (rounded to a 16-bit
  // target type on fp32 storage).
  plan_pointwise(c, float_operands(c, in), y, MapFn::Copy, 0, 0, 0);
}

// Gather along one axis by constant indices: the map reads the data's coordinate on that axis
// from a table of the indices, made non-negative here.
void plan_gather(PlanCtx& c, const Op& op, const std::vector<View>& in, const View& y) {
  const Node& nd = node_of(c);
  const GatherAttrs& a = op.as<GatherAttrs>();
  if (a.elements) refuse_general(c, "gather_elements");
  const Constant* idx = nd.constant(1);
  // The data: a computed tensor, or, by computed indices (token ids), a constant one (an
  // embedding table). Computed indices are an int64 graph input's values, as given.
  View x;
  int ids = -1;
  if (idx) {
    if (nd.constant(0)) refuse_general(c, "a gather of constant data by constant indices");
    x = in.at(0);
  } else {
    ids = nd.inputs.at(size_t(nd.term_of_operand(1))).at(0).node;
    const DType t = c.eng.graph().nodes.at(size_t(ids)).dtype;
    if (t != DType::I64) refuse_general(c, strprintf("a gather by %s indices (int64 ones run)", dtype_name(t)).c_str());
    if (const Constant* data = nd.constant(0)) {
      if (!is_float(data->dtype)) refuse_general(c, "a gather of integer data");
      void* ptr = c.dry ? nullptr : const_cast<void*>(c.eng.node_constant(c.node, 0));
      x = whole_view(ptr, data->shape, Layout::Nchw, c.eng.elem());
    } else {
      x = in.at(size_t(nd.term_of_operand(0)));
    }
  }
  const Walk wx = walk_of(x);
  const int64_t k = idx ? idx->shape.numel() : c.eng.graph().nodes.at(size_t(ids)).shape.numel(), dim = wx.dims[a.axis];
  MapParams p;
  p.elem = y.elem;
  p.rank = wx.rank;
  std::copy(wx.dims, wx.dims + kMaxTensorDims, p.dims);
  p.dims[a.axis] = k;
  // y in the data's index space: the indices' dims flatten into one run where y is row-major.
  const Walk wy = walk_of(y);
  if (wy.rank == wx.rank) {
    std::copy(wy.stride, wy.stride + kMaxTensorDims, p.y_stride);
  } else if (row_major(y)) {
    p.y_stride[p.rank - 1] = 1;
    for (int d = p.rank - 2; d >= 0; --d) p.y_stride[d] = p.y_stride[d + 1] * p.dims[d + 1];
  } else {
    refuse_general(c, "a gather into a channels-last image by indices of rank other than 1");
  }
  std::copy(wx.stride, wx.stride + kMaxTensorDims, p.in[0].stride);
  p.in[0].ptr = x.ptr;
  p.y = y.ptr;
  p.gather_dim = a.axis;
  p.round = rounding_of(c, y);
  if (c.dry) return;
  if (ids >= 0) {  // in range: the inputs were checked when they were read (graph/input_values.hpp)
    p.gather_table = static_cast<const int64_t*>(c.eng.output_ptr(ids));
    p.gather_wrap = dim;
    emit_map(c, p);
    return;
  }
  const std::vector<std::vector<uint8_t>> host = exec::make_node_constants(c.eng.graph(), c.node, c.eng.seed());
  std::vector<int64_t> table(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    int64_t v = load_int(host.at(0).data(), idx->dtype, i);
    if (v < 0) v += dim;
    HIOS_CHECK(v >= 0 && v < dim, "node '%s': gather index %lld is outside a dim of %lld", c.node_name.c_str(),
               (long long)load_int(host.at(0).data(), idx->dtype, i), (long long)dim);
    table[size_t(i)] = v;
  }
  int64_t outer = 1;
  for (int d = 0; d < a.axis; ++d) outer *= wx.dims[d];
  if (k == 1 && outer == 1 && y.ptr == x.at(table[0] * (x.shape.numel() / dim))) {
    // A view of its one index's elements (executor/memory_plan.hpp): the planner makes one only
    // where the dims before the axis are 1 and both tensors are row-major.
    HIOS_CHECK(row_major(x) && row_major(y), "internal error: node '%s': a gather view of a tensor not in row-major order",
               c.node_name.c_str());
    return;
  }
  p.gather_table = static_cast<const int64_t*>(c.eng.table(c.node_name + ".indices", table.data(), table.size() * 8));
  emit_map(c, p);
}

void plan_reduce(PlanCtx& c, const Op& op, const std::vector<View>& in, const View& y) {
  const ReduceAttrs& a = op.as<ReduceAttrs>();
  if (!reduce_supported(int(a.fn))) refuse_general(c, reduce_fn_name(a.fn));
  const std::vector<View> ops = float_operands(c, in);
  const Walk wx = walk_of(ops.at(0)), wy = walk_of(y);
  ReduceParams p;
  p.elem = y.elem;
  p.fn = int(a.fn);
  p.x = ops[0].ptr;
  p.y = y.ptr;
  p.rank = wx.rank;
  int kept = 0;
  for (int d = 0; d < wx.rank; ++d) {
    const bool reduced = a.axes.empty() || std::find(a.axes.begin(), a.axes.end(), d) != a.axes.end();
    p.x_stride[d] = wx.stride[d];
    if (reduced) {
      p.dims[d] = 1;
      p.red_dims[p.red_rank] = wx.dims[d];
      p.red_stride[p.red_rank++] = wx.stride[d];
      p.y_stride[d] = a.keepdims ? wy.stride[d] : 0;
    } else {
      p.dims[d] = wx.dims[d];
      p.y_stride[d] = wy.stride[a.keepdims ? d : kept];
      ++kept;
    }
  }
  collapse(p.rank, p.dims, {p.x_stride, p.y_stride});
  collapse(p.red_rank, p.red_dims, {p.red_stride});
  if (c.dry) return;
  c.emit([p](StreamResources& r) { launch_reduce(p, r.stream()); });
}

void plan_norm(PlanCtx& c, const Op& op, const std::vector<View>& in, const View& y) {
  const NormAttrs& a = op.as<NormAttrs>();
  const std::vector<View> ops = float_operands(c, in);
  // Scale and bias are read by their row-major index: packed copies where they are strided.
  const size_t k = size_t(a.scale_operand());
  const View scale = c.packed(ops.at(k));
  const View bias = ops.size() > k + 1 ? c.packed(ops[k + 1]) : View{};
  const Walk wx = walk_of(ops.at(0)), wy = walk_of(y), wr = a.residual ? walk_of(ops.at(1)) : Walk{};
  NormParams p;
  p.elem = y.elem;
  p.fn = int(a.fn);
  p.epsilon = float(a.epsilon);
  p.x = ops[0].ptr;
  p.y = y.ptr;
  p.rank = wx.rank;
  p.r = a.residual ? ops[1].ptr : nullptr;
  for (int d = 0; d < wx.rank; ++d) {
    p.x_stride[d] = wx.stride[d];
    p.y_stride[d] = wy.stride[d];
    p.r_stride[d] = wr.stride[d];
    if (d >= a.axis) {
      p.dims[d] = 1;
      p.red_dims[p.red_rank] = wx.dims[d];
      p.red_x_stride[p.red_rank] = wx.stride[d];
      p.red_r_stride[p.red_rank] = wr.stride[d];
      p.red_y_stride[p.red_rank++] = wy.stride[d];
    } else {
      p.dims[d] = wx.dims[d];
    }
  }
  collapse(p.rank, p.dims, {p.x_stride, p.y_stride, p.r_stride});
  collapse(p.red_rank, p.red_dims, {p.red_x_stride, p.red_y_stride, p.red_r_stride});
  p.scale = scale.ptr;
  p.scale_count = scale.shape.numel();
  p.bias = bias.ptr;
  p.bias_count = bias.ptr ? bias.shape.numel() : 1;
  if (c.dry) return;
  c.emit([p](StreamResources& r) { launch_norm(p, r.stream()); });
}

void plan_softmax_axis(PlanCtx& c, const Op& op, const View& x, const View& y) {
  const SoftmaxAttrs& a = op.as<SoftmaxAttrs>();
  const Walk wx = walk_of(x), wy = walk_of(y);
  SoftmaxAxisParams p;
  p.elem = y.elem;
  p.fn = int(a.fn);
  p.x = x.ptr;
  p.y = y.ptr;
  p.rank = wx.rank;
  std::copy(wx.dims, wx.dims + kMaxTensorDims, p.dims);
  std::copy(wx.stride, wx.stride + kMaxTensorDims, p.x_stride);
  std::copy(wy.stride, wy.stride + kMaxTensorDims, p.y_stride);
  if (wx.rank > 0) {
    p.len = wx.dims[a.axis];
    p.x_axis_stride = wx.stride[a.axis];
    p.y_axis_stride = wy.stride[a.axis];
    p.dims[a.axis] = 1;
  } else {
    p.len = 1;
  }
  collapse(p.rank, p.dims, {p.x_stride, p.y_stride});
  if (c.dry) return;
  c.emit([p](StreamResources& r) { launch_softmax_axis(p, r.stream()); });
}

// Which kernel (ResizeParams::image_kernel) measured fastest on this resize (all give the same
// bits), per device and problem: shapes, strides, taps and type. The two image kernels are
// timed against each other, then the faster against the general walk.
int resize_kernel_choice(PlanCtx& c, const ResizeParams& p) {
  std::string key = strprintf("resize %d", int(p.elem));
  for (int d = 0; d < p.rank; ++d) {
    key += strprintf(" %lld/%lld:%lld/%lld:%d", (long long)p.x_dims[d], (long long)p.dims[d], (long long)p.x_stride[d],
                     (long long)p.y_stride[d], p.taps[d]);
  }
  const cudaStream_t st = c.res.stream();
  auto time_kernel = [&](int kernel) {
    ResizeParams q = p;
    q.image_kernel = kernel;
    return time_on_stream(st, [&] { launch_resize(q, st); });
  };
  const int image = resize_image_rows_fit(p) && measured_once(c.eng.device(), key + " rows", [&] {
                      return time_kernel(2) < time_kernel(1);
                    }) ? 2 : 1;
  return measured_once(c.eng.device(), key + strprintf(" image %d", image), [&] {
           return time_kernel(image) < time_kernel(0);
         }) ? image : 0;
}

// Tap tables on the host from graph/ops_tensor.hpp's resize rules, the CPU reference's own.
void plan_resize(PlanCtx& c, const Op& op, const std::vector<View>& in, const View& y) {
  const ResizeAttrs& a = op.as<ResizeAttrs>();
  const std::vector<View> ops = float_operands(c, in);
  const Walk wx = walk_of(ops.at(0)), wy = walk_of(y);
  ResizeParams p;
  p.elem = y.elem;
  p.rank = wy.rank;
  p.x = ops[0].ptr;
  p.y = y.ptr;
  std::copy(wy.dims, wy.dims + kMaxTensorDims, p.dims);
  std::copy(wx.dims, wx.dims + kMaxTensorDims, p.x_dims);
  std::copy(wx.stride, wx.stride + kMaxTensorDims, p.x_stride);
  std::copy(wy.stride, wy.stride + kMaxTensorDims, p.y_stride);
  if (c.dry) return;
  for (int d = 0; d < wy.rank; ++d) {
    const ResizeAxis axis = resize_axis(a, d, ops[0].shape, y.shape);
    if (axis.n_in == axis.n_out && a.scales.at(size_t(d)) == 1.0 && axis.out_first == axis.in_first) continue;  // taps 0: not resized
    HIOS_CHECK(axis.n_in < (int64_t(1) << 31) && axis.n_out < (int64_t(1) << 31), "node '%s': resize of a dim of %lld",
               c.node_name.c_str(), (long long)axis.n_in);
    int taps = 0;
    const std::vector<ResizeTap> all = resize_axis_taps(a, d, axis, &taps);
    std::vector<int> index(all.size());
    std::vector<float> weight(all.size());
    for (size_t k = 0; k < all.size(); ++k) {
      index[k] = int(all[k].index);
      weight[k] = float(all[k].weight);
    }
    const std::string key = strprintf("%s.axis%d", c.node_name.c_str(), d);
    p.taps[d] = taps;
    p.tap_index[d] = static_cast<const int*>(c.eng.table(key + ".index", index.data(), index.size() * sizeof(int)));
    p.tap_weight[d] = static_cast<const float*>(c.eng.table(key + ".weight", weight.data(), weight.size() * sizeof(float)));
  }
  // Walk the output in memory order (each dim keeps its taps, so the result is the same).
  const std::vector<int> order = memory_order(p.rank, p.y_stride);
  permute_dims(p.dims, order);
  permute_dims(p.x_dims, order);
  permute_dims(p.x_stride, order);
  permute_dims(p.y_stride, order);
  permute_dims(p.taps, order);
  permute_dims(p.tap_index, order);
  permute_dims(p.tap_weight, order);
  if (resize_image_fits(p)) p.image_kernel = resize_kernel_choice(c, p);
  c.emit([p](StreamResources& r) { launch_resize(p, r.stream()); });
}

void plan_join(PlanCtx& c, const View& y) {
  // The results' join carries no values of its own: one element, written zero as on the CPU.
  if (c.dry) return;
  const size_t bytes = size_t(y.shape.numel()) * elem_bytes(y.elem);
  c.emit([ptr = y.ptr, bytes](StreamResources& r) { HIOS_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, r.stream())); });
}

}  // namespace tensor_plan

using namespace tensor_plan;


void plan_general(PlanCtx& c, const Op& op, const std::string&, const std::vector<View>& in, const View& y) {
  switch (op.kind) {
    case OpKind::Join: return plan_join(c, y);
    case OpKind::Binary: return plan_binary_op(c, op, in, y);
    case OpKind::Reduce: return plan_reduce(c, op, in, y);
    case OpKind::Transpose: return plan_transpose(c, op, in, y);
    case OpKind::Concat: return plan_concat(c, op, in, y);
    case OpKind::Slice: return plan_slice(c, op, in, y);
    case OpKind::Gather: return plan_gather(c, op, in, y);
    case OpKind::Cast: return plan_cast(c, in, y);
    case OpKind::Expand: return plan_expand(c, in, y);
    case OpKind::Resize: return plan_resize(c, op, in, y);
    case OpKind::MatMul: return plan_matmul(c, op, in, y);
    case OpKind::Norm: return plan_norm(c, op, in, y);
    case OpKind::Attention: return plan_attention(c, op, in, y);
    case OpKind::Where: return refuse_general(c, "where (bool tensors)");
    default: return refuse_general(c, op_def(op.kind).name);
  }
}

void plan_tensor_activation(PlanCtx& c, const Op& op, const View& x, const View& y) {
  const ActivationAttrs& a = op.act();
  if (!map_activation_supported(int(a.activation))) refuse_general(c, activation_name(a.activation));
  plan_pointwise(c, {x}, y, MapFn::Activation, int(a.activation), float(a.alpha), float(a.beta));
}

void plan_tensor_softmax(PlanCtx& c, const Op& op, const View& x, const View& y) { plan_softmax_axis(c, op, x, y); }

// Explicit padding or cropping of H and W (hios's pad kernel).
void plan_pad(PlanCtx& c, const Op& op, const std::string&, const std::vector<View>& in, const View& y) {
  const View x = c.packed(in.at(0));  // the kernel reads a packed input (both passes: scratch)
  if (c.dry) return;
  PadParams p;
  p.x = x.ptr;
  p.y = y.ptr;
  p.elem = y.elem;
  p.n = y.shape.n, p.c = y.shape.c, p.ih = x.shape.h, p.iw = x.shape.w, p.oh = y.shape.h, p.ow = y.shape.w;
  p.top = op.pad().pads[0], p.left = op.pad().pads[1];
  p.nhwc = y.nhwc() ? 1 : 0;
  p.y_batch_stride = y.shape.n == 1 ? y.item() : y.batch_stride;
  p.y_pixel_stride = y.nhwc() ? y.pixel_stride : 1;
  p.fill = op.pad().fill == PadFill::NegInf ? -std::numeric_limits<float>::infinity() : 0.f;
  c.emit([p](StreamResources& r) { launch_pad(p, r.stream()); });
}

// A reshape moves no element where both tensors hold theirs in row-major order: a copy of the
// bytes, or nothing where the memory plan shares them. Otherwise (a channels-last image on either
// side) one kernel walks both index spaces.
void plan_reshape(PlanCtx& c, const Op&, const std::string&, const std::vector<View>& in, const View& y) {
  const std::vector<View> ops = float_operands(c, in);
  const View x = ops.at(0);
  if (row_major(x) && row_major(y)) {
    if (c.dry || x.ptr == y.ptr) return;  // a view of its input (executor/memory_plan.hpp)
    const size_t bytes = size_t(y.shape.numel()) * elem_bytes(y.elem);
    c.emit([src = x.ptr, dst = y.ptr, bytes](StreamResources& r) {
      HIOS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, r.stream()));
    });
    return;
  }
  HIOS_CHECK(c.dry || x.ptr != y.ptr, "internal error: node '%s': a reshape view of a tensor not in row-major order",
             c.node_name.c_str());
  const Walk wx = walk_of(x), wy = walk_of(y);
  ReshapeParams p;
  p.elem = y.elem;
  p.x_rank = wx.rank;
  p.y_rank = wy.rank;
  std::copy(wx.dims, wx.dims + kMaxTensorDims, p.x_dims);
  std::copy(wy.dims, wy.dims + kMaxTensorDims, p.y_dims);
  std::copy(wx.stride, wx.stride + kMaxTensorDims, p.x_stride);
  std::copy(wy.stride, wy.stride + kMaxTensorDims, p.y_stride);
  p.x = x.ptr;
  p.y = y.ptr;
  if (c.dry) return;
  c.emit([p](StreamResources& r) { launch_reshape(p, r.stream()); });
}

}  // namespace hios::cuda
