// How a backend stores activations in memory, and the host-side conversions between layouts.
//
// Every tensor in the IR, on the host and on the wire to the user is NCHW (graph/shape.hpp).
// The CUDA backend may store activations channels-last (NHWC) instead: cuDNN's tensor-core
// convolutions on Hopper run NHWC natively, and with NCHW storage they transpose each
// convolution's input and output (docs/benchmarks.md, channels-last activations). The layout is one choice per
// backend instance: every node's buffer, on every rank, is stored the same way, so tensors
// move between ranks as bytes, and only the graph input and whatever is read back to the
// host (outputs, --verify, tests) are converted, here.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace hios::exec {

enum class Layout { Nchw, Nhwc };
const char* layout_name(Layout l);               // "nchw", "nhwc"
Layout parse_layout(const std::string& s);       // the names above; otherwise hios::Error naming s

// NCHW values of shape s in NHWC order, and back. Sizes must match s (hios::Error otherwise).
std::vector<float> nchw_to_nhwc(const std::vector<float>& v, const Shape& s);
std::vector<float> nhwc_to_nchw(const std::vector<float>& v, const Shape& s);
// The same, into the layout l (or from it); a copy when l is NCHW.
std::vector<float> to_layout(const std::vector<float>& nchw, const Shape& s, Layout l);
std::vector<float> from_layout(const std::vector<float>& stored, const Shape& s, Layout l);

}  // namespace hios::exec
