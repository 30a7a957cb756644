#include "executor/tensor_layout.hpp"

#include "graph/error.hpp"

namespace hios::exec {

const char* layout_name(Layout l) { return l == Layout::Nhwc ? "nhwc" : "nchw"; }

Layout parse_layout(const std::string& s) {
  if (s == "nchw") return Layout::Nchw;
  if (s == "nhwc") return Layout::Nhwc;
  throw_error("unknown layout '%s' (nchw or nhwc)", s.c_str());
}

namespace {

// from_nchw: v is NCHW and the result NHWC; otherwise the reverse. One loop for both, so the
// two directions cannot disagree on an index.
std::vector<float> permute(const std::vector<float>& v, const Shape& s, bool from_nchw) {
  HIOS_CHECK(int64_t(v.size()) == s.numel(), "layout conversion: %zu values for a tensor of %s (%lld values)",
             v.size(), s.str().c_str(), (long long)s.numel());
  std::vector<float> out(v.size());
  const int64_t hw = s.h * s.w;
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t c = 0; c < s.c; ++c) {
      for (int64_t p = 0; p < hw; ++p) {
        const int64_t nchw = (n * s.c + c) * hw + p, nhwc = (n * hw + p) * s.c + c;
        if (from_nchw) {
          out[size_t(nhwc)] = v[size_t(nchw)];
        } else {
          out[size_t(nchw)] = v[size_t(nhwc)];
        }
      }
    }
  }
  return out;
}

}  // namespace

std::vector<float> nchw_to_nhwc(const std::vector<float>& v, const Shape& s) { return permute(v, s, true); }
std::vector<float> nhwc_to_nchw(const std::vector<float>& v, const Shape& s) { return permute(v, s, false); }

// Only images (rank 4) are stored channels-last: every other tensor is row-major in both layouts.
std::vector<float> to_layout(const std::vector<float>& nchw, const Shape& s, Layout l) {
  return l == Layout::Nhwc && s.rank == 4 ? nchw_to_nhwc(nchw, s) : nchw;
}
std::vector<float> from_layout(const std::vector<float>& stored, const Shape& s, Layout l) {
  return l == Layout::Nhwc && s.rank == 4 ? nhwc_to_nchw(stored, s) : stored;
}

}  // namespace hios::exec
