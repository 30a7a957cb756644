#include "importer/onnx_fold.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "graph/error.hpp"
#include "importer/onnx_attrs.hpp"

namespace hios::importer {

namespace {

constexpr int64_t kMaxFoldedElements = int64_t(1) << 26;  // a shape computation, not a weight

std::vector<int64_t> values_of(const ConstTensor& t) {
  std::vector<int64_t> v(size_t(t.numel()));
  for (int64_t k = 0; k < t.numel(); ++k) v[size_t(k)] = t.integer ? t.i[size_t(k)] : int64_t(t.f[size_t(k)]);
  return v;
}

int64_t norm_axis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

std::vector<int64_t> strides_of(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int k = int(dims.size()) - 2; k >= 0; --k) s[size_t(k)] = s[size_t(k) + 1] * dims[size_t(k) + 1];
  return s;
}

// Elements of a tensor of these dims, or -1 when a dim is negative or there are too many.
int64_t checked_numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && n > kMaxFoldedElements / d)) return -1;
    n *= d;
  }
  return n;
}

ConstTensor like(const ConstTensor& proto, std::vector<int64_t> dims) {
  if (checked_numel(dims) < 0) throw Error("a result of negative or too large a size");
  ConstTensor t;
  t.dims = std::move(dims);
  t.integer = proto.integer;
  const int64_t n = t.numel();
  if (t.integer) t.i.resize(size_t(n));
  else t.f.resize(size_t(n));
  return t;
}

void copy_element(const ConstTensor& from, int64_t a, ConstTensor& to, int64_t b) {
  if (to.integer) to.i[size_t(b)] = from.i[size_t(a)];
  else to.f[size_t(b)] = from.f[size_t(a)];
}

// NumPy broadcasting of a and b; `op` computes in double, the result is integer when both are.
bool broadcast(const ConstTensor& a, const ConstTensor& b, const std::function<double(double, double)>& op,
               ConstTensor& out, std::string& why, bool boolean = false) {
  const size_t rank = std::max(a.dims.size(), b.dims.size());
  std::vector<int64_t> dims(rank), da(rank, 1), db(rank, 1);
  std::copy(a.dims.begin(), a.dims.end(), da.begin() + long(rank - a.dims.size()));
  std::copy(b.dims.begin(), b.dims.end(), db.begin() + long(rank - b.dims.size()));
  for (size_t k = 0; k < rank; ++k) {
    if (da[k] != db[k] && da[k] != 1 && db[k] != 1) {
      why = "shapes do not broadcast";
      return false;
    }
    dims[k] = (da[k] == 0 || db[k] == 0) ? 0 : std::max(da[k], db[k]);  // 0 with 1 broadcasts to 0
  }
  if (checked_numel(dims) < 0) {
    why = "too large to evaluate";
    return false;
  }
  out = ConstTensor{};
  out.dims = dims;
  out.integer = boolean || (a.integer && b.integer);
  const int64_t n = out.numel();
  if (out.integer) out.i.resize(size_t(n));
  else out.f.resize(size_t(n));
  const auto so = strides_of(dims), sa = strides_of(da), sb = strides_of(db);
  for (int64_t k = 0; k < n; ++k) {
    int64_t ia = 0, ib = 0, rest = k;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t idx = rest / so[d];
      rest %= so[d];
      if (da[d] != 1) ia += idx * sa[d];
      if (db[d] != 1) ib += idx * sb[d];
    }
    const double r = op(a.at(ia), b.at(ib));
    if (out.integer) out.i[size_t(k)] = int64_t(r);
    else out.f[size_t(k)] = float(r);
  }
  return true;
}

bool unary(const ConstTensor& a, const std::function<double(double)>& op, ConstTensor& out) {
  out = like(a, a.dims);
  for (int64_t k = 0; k < a.numel(); ++k) {
    const double r = op(a.at(k));
    if (out.integer) out.i[size_t(k)] = int64_t(r);
    else out.f[size_t(k)] = float(r);
  }
  return true;
}

// Integer division truncates toward zero, as ONNX (and C) define it.
double divide(double x, double y, bool integer) {
  if (!integer) return x / y;
  if (y == 0) throw Error("integer division by zero");
  return double(int64_t(x) / int64_t(y));
}

bool gather(const ConstTensor& data, const ConstTensor& indices, int64_t axis, ConstTensor& out, std::string& why) {
  const int64_t rank = int64_t(data.dims.size());
  axis = norm_axis(axis, rank);
  if (axis < 0 || axis >= rank) {
    why = "axis out of range";
    return false;
  }
  std::vector<int64_t> dims(data.dims.begin(), data.dims.begin() + axis);
  dims.insert(dims.end(), indices.dims.begin(), indices.dims.end());
  dims.insert(dims.end(), data.dims.begin() + axis + 1, data.dims.end());
  out = like(data, dims);
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= data.dims[size_t(k)];
  for (int64_t k = axis + 1; k < rank; ++k) inner *= data.dims[size_t(k)];
  const int64_t len = data.dims[size_t(axis)], ni = indices.numel();
  const auto idx = values_of(indices);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < ni; ++j) {
      int64_t at = idx[size_t(j)] < 0 ? idx[size_t(j)] + len : idx[size_t(j)];
      if (at < 0 || at >= len) {
        why = "index out of range";
        return false;
      }
      for (int64_t r = 0; r < inner; ++r) copy_element(data, (o * len + at) * inner + r, out, (o * ni + j) * inner + r);
    }
  }
  return true;
}

bool slice(const ConstTensor& data, std::vector<int64_t> starts, std::vector<int64_t> ends, std::vector<int64_t> axes,
           std::vector<int64_t> steps, ConstTensor& out, std::string& why) {
  const int64_t rank = int64_t(data.dims.size());
  if (axes.empty()) {
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(int64_t(k));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    why = "starts, ends, axes and steps differ in length";
    return false;
  }
  std::vector<int64_t> first(size_t(rank), 0), step(size_t(rank), 1), dims = data.dims;
  for (size_t k = 0; k < starts.size(); ++k) {
    const int64_t ax = norm_axis(axes[k], rank);
    if (ax < 0 || ax >= rank || steps[k] == 0) {
      why = "axis or step out of range";
      return false;
    }
    const int64_t len = data.dims[size_t(ax)], st = steps[k];
    auto clampi = [&](int64_t v, bool is_end) {
      if (v < 0) v += len;
      if (st > 0) return std::clamp<int64_t>(v, 0, len);
      return std::clamp<int64_t>(v, -1, len - 1) + (is_end ? 0 : 0);
    };
    const int64_t b = clampi(starts[k], false), e = clampi(ends[k], true);
    const int64_t count = st > 0 ? std::max<int64_t>(0, (e - b + st - 1) / st) : std::max<int64_t>(0, (b - e - st - 1) / -st);
    first[size_t(ax)] = b;
    step[size_t(ax)] = st;
    dims[size_t(ax)] = count;
  }
  out = like(data, dims);
  const auto si = strides_of(data.dims), so = strides_of(dims);
  for (int64_t k = 0; k < out.numel(); ++k) {
    int64_t src = 0, rest = k;
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t idx = rest / so[size_t(d)];
      rest %= so[size_t(d)];
      src += (first[size_t(d)] + idx * step[size_t(d)]) * si[size_t(d)];
    }
    copy_element(data, src, out, k);
  }
  return true;
}

}  // namespace

namespace {

// What a folder sees of the node it evaluates.
struct FoldCall {
  const OnnxModel& m;
  const onnx::NodeProto& n;
  const NodeAttrs& at;
  const std::vector<const ConstTensor*>& in;
  const ConstTensor* input(size_t k) const { return k < in.size() ? in[k] : nullptr; }
  const ConstTensor& arg(size_t k) const {
    if (!input(k)) throw Error(strprintf("input %zu is missing", k));
    return *input(k);
  }
};

// A folder writes the node's first output, or says in `why` what it could not evaluate.
using Folder = std::function<bool(const FoldCall&, ConstTensor&, std::string&)>;

constexpr const char* kNotEvaluated = "not evaluated at import time";

bool fold_constant(const FoldCall& c, ConstTensor& r, std::string& why) {
  const NodeAttrs& at = c.at;
  if (const auto* a = at.find("value")) {
    r = read_tensor(c.m, a->t(), c.n.name());
  } else if (at.has("value_float")) {
    r = ConstTensor::floats({}, {at.f("value_float", 0)});
  } else if (at.has("value_floats")) {
    auto v = at.floats("value_floats");
    r = ConstTensor::floats({int64_t(v.size())}, v);
  } else if (at.has("value_int")) {
    r = ConstTensor::ints({}, {at.i("value_int", 0)});
  } else if (at.has("value_ints")) {
    auto v = at.ints("value_ints");
    r = ConstTensor::ints({int64_t(v.size())}, v);
  } else {
    why = "a Constant without a numeric value";
    return false;
  }
  return true;
}

bool fold_identity(const FoldCall& c, ConstTensor& r, std::string&) {
  r = c.arg(0);
  return true;
}

// Dropout is the identity at inference, unless its mask output is wanted.
bool fold_dropout(const FoldCall& c, ConstTensor& r, std::string& why) {
  if (c.n.output_size() > 1) {
    why = kNotEvaluated;
    return false;
  }
  return fold_identity(c, r, why);
}

bool fold_cast(const FoldCall& c, ConstTensor& r, std::string&) {
  const int to = int(c.at.i("to", onnx::TensorProto::FLOAT));
  const bool to_float = to == onnx::TensorProto::FLOAT || to == onnx::TensorProto::DOUBLE ||
                        to == onnx::TensorProto::FLOAT16 || to == onnx::TensorProto::BFLOAT16;
  const ConstTensor& a = c.arg(0);
  r = ConstTensor{};
  r.dims = a.dims;
  r.integer = !to_float;
  for (int64_t k = 0; k < a.numel(); ++k) {
    if (to_float) r.f.push_back(float(a.at(k)));
    else r.i.push_back(to == onnx::TensorProto::BOOL ? int64_t(a.at(k) != 0) : int64_t(a.at(k)));
  }
  return true;
}

bool fold_shape(const FoldCall& c, ConstTensor& r, std::string&) {
  const auto& d = c.arg(0).dims;
  const int64_t rank = int64_t(d.size());
  const int64_t b = std::clamp<int64_t>(norm_axis(c.at.i("start", 0), rank), 0, rank);
  const int64_t e = std::clamp<int64_t>(norm_axis(c.at.i("end", rank), rank), 0, rank);
  r = ConstTensor::ints({std::max<int64_t>(0, e - b)}, std::vector<int64_t>(d.begin() + b, d.begin() + std::max(b, e)));
  return true;
}

bool fold_size(const FoldCall& c, ConstTensor& r, std::string&) {
  r = ConstTensor::ints({}, {c.arg(0).numel()});
  return true;
}

bool fold_gather(const FoldCall& c, ConstTensor& r, std::string& why) {
  return gather(c.arg(0), c.arg(1), c.at.i("axis", 0), r, why);
}

// The axes of Squeeze and Unsqueeze: an input since opset 13, an attribute before.
std::vector<int64_t> squeeze_axes(const FoldCall& c) { return c.input(1) ? values_of(c.arg(1)) : c.at.ints("axes"); }

bool fold_unsqueeze(const FoldCall& c, ConstTensor& r, std::string& why) {
  const ConstTensor& a = c.arg(0);
  std::vector<int64_t> axes = squeeze_axes(c);
  std::vector<int64_t> dims = a.dims;
  const int64_t rank = int64_t(dims.size() + axes.size());
  for (auto& x : axes) x = norm_axis(x, rank);
  std::sort(axes.begin(), axes.end());
  for (int64_t x : axes) {
    if (x < 0 || x > int64_t(dims.size())) {
      why = "axis out of range";
      return false;
    }
    dims.insert(dims.begin() + x, 1);
  }
  r = a;
  r.dims = dims;
  return true;
}

bool fold_squeeze(const FoldCall& c, ConstTensor& r, std::string&) {
  const ConstTensor& a = c.arg(0);
  const std::vector<int64_t> axes = squeeze_axes(c);
  const int64_t rank = int64_t(a.dims.size());
  std::vector<int64_t> keep;
  for (int64_t k = 0; k < rank; ++k) {
    const bool named = axes.empty() ? a.dims[size_t(k)] == 1
                                    : std::any_of(axes.begin(), axes.end(), [&](int64_t x) { return norm_axis(x, rank) == k; });
    if (!named) keep.push_back(a.dims[size_t(k)]);
  }
  r = a;
  r.dims = keep;
  return true;
}

bool fold_reshape(const FoldCall& c, ConstTensor& r, std::string& why) {
  const ConstTensor& a = c.arg(0);
  std::vector<int64_t> shape = values_of(c.arg(1));
  int64_t known = 1, infer = -1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 0 && !c.at.i("allowzero", 0)) shape[k] = k < a.dims.size() ? a.dims[k] : 1;
    if (shape[k] == -1) infer = int64_t(k);
    else known *= shape[k];
  }
  if (infer >= 0) shape[size_t(infer)] = known ? a.numel() / known : 0;
  r = a;
  r.dims = shape;
  if (checked_numel(shape) != a.numel()) {
    why = "the target shape has another size";
    return false;
  }
  return true;
}

bool fold_flatten(const FoldCall& c, ConstTensor& r, std::string& why) {
  const ConstTensor& a = c.arg(0);
  const int64_t axis = norm_axis(c.at.i("axis", 1), int64_t(a.dims.size()));
  if (axis < 0 || axis > int64_t(a.dims.size())) {
    why = "axis out of range";
    return false;
  }
  int64_t outer = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= a.dims[size_t(k)];
  r = a;
  r.dims = {outer, outer ? a.numel() / outer : 0};
  return true;
}

bool fold_concat(const FoldCall& c, ConstTensor& r, std::string& why) {
  const ConstTensor& first = c.arg(0);
  const int64_t rank = int64_t(first.dims.size());
  const int64_t axis = norm_axis(c.at.i("axis", 0), rank);
  for (const ConstTensor* t : c.in) {
    bool same = t && int64_t(t->dims.size()) == rank;
    for (int64_t k = 0; same && k < rank; ++k) same = k == axis || t->dims[size_t(k)] == first.dims[size_t(k)];
    if (!same) {
      why = "inputs missing or of different shapes";
      return false;
    }
  }
  if (axis < 0 || axis >= rank) {
    why = "axis out of range";
    return false;
  }
  std::vector<int64_t> dims = first.dims;
  dims[size_t(axis)] = 0;
  bool integer = true;
  for (const ConstTensor* t : c.in) {
    dims[size_t(axis)] += t->dims[size_t(axis)];
    integer = integer && t->integer;
  }
  r = ConstTensor{};
  r.dims = dims;
  r.integer = integer;
  int64_t outer = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= dims[size_t(k)];
  for (int64_t o = 0; o < outer; ++o) {
    for (const ConstTensor* t : c.in) {
      const int64_t chunk = outer ? t->numel() / outer : 0;
      for (int64_t k = 0; k < chunk; ++k) {
        if (integer) r.i.push_back(int64_t(t->at(o * chunk + k)));
        else r.f.push_back(float(t->at(o * chunk + k)));
      }
    }
  }
  return true;
}

// Starts, ends and axes are attributes before opset 10, inputs since (with steps).
bool fold_slice(const FoldCall& c, ConstTensor& r, std::string& why) {
  if (c.m.opset < 10) return slice(c.arg(0), c.at.ints("starts"), c.at.ints("ends"), c.at.ints("axes"), {}, r, why);
  const auto optional = [&](size_t k) { return c.input(k) ? values_of(c.arg(k)) : std::vector<int64_t>{}; };
  return slice(c.arg(0), values_of(c.arg(1)), values_of(c.arg(2)), optional(3), optional(4), r, why);
}

bool fold_div(const FoldCall& c, ConstTensor& r, std::string& why) {
  const bool integer = c.arg(0).integer && c.arg(1).integer;
  return broadcast(c.arg(0), c.arg(1), [integer](double x, double y) { return divide(x, y, integer); }, r, why);
}

// An element-wise op of two operands; Max and Min of more than two are left to the runtime.
Folder binary_folder(double (*op)(double, double)) {
  return [op](const FoldCall& c, ConstTensor& r, std::string& why) {
    if (c.in.size() != 2) {
      why = kNotEvaluated;
      return false;
    }
    return broadcast(c.arg(0), c.arg(1), op, r, why);
  };
}

// A comparison or logical op: a boolean result.
Folder compare_folder(double (*op)(double, double)) {
  return [op](const FoldCall& c, ConstTensor& r, std::string& why) { return broadcast(c.arg(0), c.arg(1), op, r, why, true); };
}

Folder unary_folder(double (*op)(double)) {
  return [op](const FoldCall& c, ConstTensor& r, std::string&) { return unary(c.arg(0), op, r); };
}

bool fold_where(const FoldCall& c, ConstTensor& r, std::string& why) {  // cond ? x : y, all three broadcast to one shape
  const auto first = [](double v, double) { return v; };
  const auto second = [](double, double v) { return v; };
  ConstTensor cx, cond, xs, ys;
  if (!broadcast(c.arg(0), c.arg(1), first, cx, why, true) || !broadcast(cx, c.arg(2), first, cond, why, true) ||
      !broadcast(cond, c.arg(1), second, xs, why) || !broadcast(cond, c.arg(2), second, ys, why)) {
    return false;
  }
  const bool integer = xs.integer && ys.integer;
  r = ConstTensor{};
  r.dims = cond.dims;
  r.integer = integer;
  for (int64_t k = 0; k < cond.numel(); ++k) {
    const double v = cond.at(k) != 0 ? xs.at(k) : ys.at(k);
    if (integer) r.i.push_back(int64_t(v));
    else r.f.push_back(float(v));
  }
  return true;
}

bool fold_clip(const FoldCall& c, ConstTensor& r, std::string&) {  // bounds from attributes before opset 11, from inputs since
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  if (c.m.opset < 11) {
    lo = c.at.f("min", -std::numeric_limits<float>::infinity());
    hi = c.at.f("max", std::numeric_limits<float>::infinity());
  } else {
    if (c.input(1) && c.arg(1).numel()) lo = c.arg(1).at(0);
    if (c.input(2) && c.arg(2).numel()) hi = c.arg(2).at(0);
  }
  return unary(c.arg(0), [lo, hi](double x) { return std::min(std::max(x, lo), hi); }, r);
}

bool fold_transpose(const FoldCall& c, ConstTensor& r, std::string& why) {
  const ConstTensor& a = c.arg(0);
  const int64_t rank = int64_t(a.dims.size());
  std::vector<int64_t> perm = c.at.ints("perm");
  if (perm.empty()) {
    for (int64_t k = rank - 1; k >= 0; --k) perm.push_back(k);
  }
  std::vector<char> seen(static_cast<size_t>(rank), 0);
  for (int64_t x : perm) {
    if (x < 0 || x >= rank || seen[size_t(x)]) {
      why = "perm is not a permutation of the axes";
      return false;
    }
    seen[size_t(x)] = 1;
  }
  if (int64_t(perm.size()) != rank) {
    why = "perm does not match the rank";
    return false;
  }
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  for (int64_t k = 0; k < rank; ++k) dims[size_t(k)] = a.dims[size_t(perm[size_t(k)])];
  r = like(a, dims);
  const auto si = strides_of(a.dims), so = strides_of(dims);
  for (int64_t k = 0; k < r.numel(); ++k) {
    int64_t src = 0, rest = k;
    for (int64_t d = 0; d < rank; ++d) {
      src += (rest / so[size_t(d)]) * si[size_t(perm[size_t(d)])];
      rest %= so[size_t(d)];
    }
    copy_element(a, src, r, k);
  }
  return true;
}

bool fold_constant_of_shape(const FoldCall& c, ConstTensor& r, std::string& why) {
  const std::vector<int64_t> dims = values_of(c.arg(0));
  ConstTensor value = ConstTensor::floats({1}, {0.f});
  if (const auto* a = c.at.find("value")) value = read_tensor(c.m, a->t(), c.n.name());
  if (value.numel() < 1) {
    why = "an empty value";
    return false;
  }
  r = like(value, dims);
  if (r.numel() > kMaxFoldedElements) {
    why = "too large to evaluate";
    return false;
  }
  for (int64_t k = 0; k < r.numel(); ++k) copy_element(value, 0, r, k);
  return true;
}

bool fold_range(const FoldCall& c, ConstTensor& r, std::string& why) {
  if (c.arg(0).numel() < 1 || c.arg(1).numel() < 1 || c.arg(2).numel() < 1) {
    why = "an empty bound";
    return false;
  }
  const double start = c.arg(0).at(0), limit = c.arg(1).at(0), delta = c.arg(2).at(0);
  if (delta == 0) {
    why = "a zero step";
    return false;
  }
  const int64_t count = std::max<int64_t>(0, int64_t(std::ceil((limit - start) / delta)));
  if (count > kMaxFoldedElements) {
    why = "too large to evaluate";
    return false;
  }
  const bool integer = c.arg(0).integer;
  r = ConstTensor{};
  r.dims = {count};
  r.integer = integer;
  for (int64_t k = 0; k < count; ++k) {
    if (integer) r.i.push_back(int64_t(start + double(k) * delta));
    else r.f.push_back(float(start + double(k) * delta));
  }
  return true;
}

bool fold_expand(const FoldCall& c, ConstTensor& r, std::string& why) {
  ConstTensor shape_ones = ConstTensor::ints(values_of(c.arg(1)), {});
  const int64_t count = checked_numel(shape_ones.dims);
  if (count < 0) {
    why = "too large to evaluate";
    return false;
  }
  shape_ones.i.assign(size_t(count), 0);
  return broadcast(c.arg(0), shape_ones, [](double x, double) { return x; }, r, why);
}

// Every op the importer evaluates when all its inputs are constants.
const std::map<std::string, Folder>& folders() {
  static const std::map<std::string, Folder> table = {
      {"Constant", fold_constant},
      {"Identity", fold_identity},
      {"Dropout", fold_dropout},
      {"Cast", fold_cast},
      {"Shape", fold_shape},
      {"Size", fold_size},
      {"Gather", fold_gather},
      {"Unsqueeze", fold_unsqueeze},
      {"Squeeze", fold_squeeze},
      {"Reshape", fold_reshape},
      {"Flatten", fold_flatten},
      {"Concat", fold_concat},
      {"Slice", fold_slice},
      {"Div", fold_div},
      {"Add", binary_folder([](double x, double y) { return x + y; })},
      {"Sub", binary_folder([](double x, double y) { return x - y; })},
      {"Mul", binary_folder([](double x, double y) { return x * y; })},
      {"Max", binary_folder([](double x, double y) { return std::max(x, y); })},
      {"Min", binary_folder([](double x, double y) { return std::min(x, y); })},
      {"Pow", binary_folder([](double x, double y) { return std::pow(x, y); })},
      {"Mod", binary_folder([](double x, double y) { return y == 0 ? 0 : std::fmod(x, y); })},
      {"Equal", compare_folder([](double x, double y) { return x == y ? 1.0 : 0.0; })},
      {"Less", compare_folder([](double x, double y) { return x < y ? 1.0 : 0.0; })},
      {"Greater", compare_folder([](double x, double y) { return x > y ? 1.0 : 0.0; })},
      {"And", compare_folder([](double x, double y) { return (x != 0 && y != 0) ? 1.0 : 0.0; })},
      {"Or", compare_folder([](double x, double y) { return (x != 0 || y != 0) ? 1.0 : 0.0; })},
      {"Neg", unary_folder([](double x) { return -x; })},
      {"Floor", unary_folder([](double x) { return std::floor(x); })},
      {"Ceil", unary_folder([](double x) { return std::ceil(x); })},
      {"Sqrt", unary_folder([](double x) { return std::sqrt(x); })},
      {"Abs", unary_folder([](double x) { return std::fabs(x); })},
      {"Not", unary_folder([](double x) { return x == 0 ? 1.0 : 0.0; })},
      {"Reciprocal", unary_folder([](double x) { return 1.0 / x; })},
      {"Where", fold_where},
      {"Clip", fold_clip},
      {"Transpose", fold_transpose},
      {"ConstantOfShape", fold_constant_of_shape},
      {"Range", fold_range},
      {"Expand", fold_expand},
  };
  return table;
}

bool evaluate(const OnnxModel& m, const onnx::NodeProto& n, const std::vector<const ConstTensor*>& in,
              std::vector<ConstTensor>& out, std::string& why) {
  out.assign(size_t(std::max(1, n.output_size())), ConstTensor{});
  const auto it = folders().find(n.op_type());
  if (it == folders().end()) {
    why = kNotEvaluated;
    return false;
  }
  const NodeAttrs at(n);
  try {
    return it->second(FoldCall{m, n, at, in}, out[0], why);
  } catch (const Error& e) {
    why = e.what();
    return false;
  }
}

}  // namespace

bool fold_constant_node(const OnnxModel& m, const onnx::NodeProto& n, const std::vector<const ConstTensor*>& in,
                        std::vector<ConstTensor>& out, std::string& why) {
  if (!evaluate(m, n, in, out, why)) return false;
  for (const ConstTensor& t : out) {  // every result a well-formed tensor
    const int64_t numel = checked_numel(t.dims);
    if (numel < 0 || size_t(numel) != (t.integer ? t.i.size() : t.f.size())) {
      why = "a result of an invalid shape";
      return false;
    }
  }
  return true;
}

}  // namespace hios::importer
