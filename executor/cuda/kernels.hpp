// The few CUDA kernels hios writes itself, for what cuDNN has no call for: term assembly (sums
// within terms, concatenation across terms, products of operands), pooling with PyTorch's
// ceil_mode, a bias + activation epilogue in one pass (cuDNN needs two), a depthwise
// convolution that applies the ReLU before it on the fly, a matrix-vector product for
// linear layers at small batch (cuDNN's 1x1 convolution over a 1x1 map leaves most of the GPU
// idle), row copies for row splits, and a plain direct convolution as the last resort. In half
// precision (--math fp16|bf16) they also stand in for cuDNN's pooling, activation, op-tensor
// and softmax calls, whose support for 16-bit storage varies by cuDNN version: global pools,
// softmax and the conversions at the edges.
//
// Every kernel reads and writes tensors of one element type, the engine's storage type (Elem),
// and computes in fp32 whatever it is. Pointers are untyped for that reason; `elem` says what
// they point to, and "elements" in strides and offsets are elements of that type.
// Internal to executor/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace hios::cuda {

enum class Elem : int { F32 = 0, F16 = 1, BF16 = 2 };
inline size_t elem_bytes(Elem e) { return e == Elem::F32 ? 4 : 2; }
// Whether p may be read 4 elements at a time (16 bytes in fp32, 8 in 16-bit types).
inline bool vec4_aligned(const void* p, Elem e) {
  return (reinterpret_cast<uintptr_t>(p) & (4 * elem_bytes(e) - 1)) == 0;
}

// Term assembly. One launch writes up to kMaxCombineTerms disjoint channel ranges of dst, each
// the sum of its sources (mode Sum), or one range holding the product over terms of each
// term's sum (mode Product, for mul). Offsets and lengths are in elements of one batch item;
// batch items are batch_stride apart. Larger nodes are split into several launches by the
// caller (accumulate = add into / multiply into what dst holds).
//
// A term is `rows` blocks of `len` consecutive elements, block r at r * dst_row_stride in dst
// and r * row_stride in each source: in NCHW a channel range is one block (rows = 1), in NHWC
// it is one block of its channels per pixel (rows = pixels, strides = the tensors' channels).
constexpr int kMaxCombineTerms = 12;
constexpr int kMaxCombineSrcs = 24;

struct CombineSrc {
  const void* ptr = nullptr;  // first element of the slice in batch item 0
  int64_t batch_stride = 0;
  int64_t row_stride = 0;      // elements between blocks (rows > 1)
};
struct CombineTerm {
  int64_t dst_offset = 0;
  int64_t len = 0;  // elements per block
  int64_t rows = 1;  // blocks per batch item
  int64_t dst_row_stride = 0;
  int first = 0;    // index into srcs
  int count = 0;
  // Elements per access (Sum mode): 8 (16-bit types only), 4 or 2 when every address is
  // aligned to that many elements and every stride and length is a multiple of it (AccessWidth
  // in ops.cpp); otherwise 1.
  int vec = 1;
  int relu = 0;     // Sum mode: write relu(result) (graph/relu_fold.hpp)
};
enum class CombineMode : int { Sum = 0, Product = 1 };
struct CombineParams {
  void* dst = nullptr;
  Elem elem = Elem::F32;
  int64_t dst_batch_stride = 0;
  int batch = 1;
  int num_terms = 0;
  CombineMode mode = CombineMode::Sum;
  int accumulate = 0;
  CombineTerm terms[kMaxCombineTerms];
  CombineSrc srcs[kMaxCombineSrcs];
};
void launch_combine(const CombineParams& p, cudaStream_t stream);

// Max or average pooling with PyTorch's window rules (ceil_mode, count_include_pad). Used where
// cuDNN cannot express the op: ceil_mode windows that hang past the padded input, and bands of
// a row split (windows, clipping and divisors follow the whole tensor, not the band).
enum class PoolKernel : int { Auto = 0, General = 1, Rows3x3 = 2, Tiles3x3 = 3, Tiles3x3Wide = 4 };
struct PoolParams {
  const void* x = nullptr;
  void* y = nullptr;
  Elem elem = Elem::F32;
  int n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;  // h: rows x holds (a channel plane is h * w)
  int kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  int is_max = 1;
  int count_include_pad = 1;
  int64_t x_batch_stride = 0;
  // NHWC (launch_pool only): x's pixels are x_pixel_stride elements apart (its buffer's
  // channels: x may be a channel slice), y is packed NHWC; threads run along channels, each
  // computing a few neighbouring outputs of a row.
  int nhwc = 0;
  int64_t x_pixel_stride = 0;
  // A band (graph/ops.hpp, RowWindow): output row y is row r0 + y of the whole output, x's row
  // 0 is row i0 of a whole input full_h rows high. A whole tensor: r0 = i0 = 0, full_h = h.
  int r0 = 0, i0 = 0, full_h = 0;
  // Which NHWC kernel runs (hios-kernel-bench and the GPU tests compare them; all give the same
  // max, and the three 3x3 kernels the same bits). Tiles3x3 / Tiles3x3Wide: the shared-memory
  // tile kernel with 4 / 8 16-byte channel vectors per pixel, where C and the pointers allow
  // 16-byte vectors (else the row kernel); Rows3x3: the kernel that slides down the rows; Auto:
  // the one of these launch_pool's measurements favour for the type, stride and map (other
  // windows: the general kernel).
  PoolKernel kernel = PoolKernel::Auto;
};
void launch_pool(const PoolParams& p, cudaStream_t stream);
// The same function, one block per 32x32 patch of outputs with its input patch staged in shared
// memory: faster than cuDNN's NCHW pooling on large maps (planning times both). Windows up to
// kMaxTiledPoolWindow, strides up to kMaxTiledPoolStride.
constexpr int kMaxTiledPoolWindow = 7;
constexpr int kMaxTiledPoolStride = 2;
void launch_pool_tiled(const PoolParams& p, cudaStream_t stream);

// Activation codes shared by the kernels below: 0 none, 1 relu, 2 sigmoid, 3 tanh (the order of
// hios::Activation).
// y = act(x + bias[c] + z) over packed NCHW (nhwc 0) or NHWC (nhwc 1) tensors (x == y is fine);
// bias and z (a residual convolution's skip connection, of y's shape and layout) may be null.
void launch_bias_act(const void* x, void* y, const void* bias, int act, int64_t n, int64_t c, int64_t hw,
                     int nhwc, Elem elem, cudaStream_t stream, const void* z = nullptr);

// Global max or average pooling (also a partial average, a part of a row split: divisor is
// then the whole tensor's H * W, not the rows x holds): one output per (item, channel). x is
// packed, or in NHWC a channel slice whose pixels are x_pixel_stride elements apart.
struct GlobalPoolParams {
  const void* x = nullptr;
  void* y = nullptr;
  Elem elem = Elem::F32;
  int n = 0, c = 0;
  int64_t hw = 0;  // pixels x holds
  int64_t x_batch_stride = 0, x_pixel_stride = 0;
  int nhwc = 0;
  int is_max = 0;
  float divisor = 1.f;  // averages: sum / divisor
  // NHWC: the pixels in `splits` parts, each part's sums (or maxima) per item and channel into
  // `partial` (fp32, splits * n * c), then a second pass reduces the parts in order (the same
  // bits every run). global_pool_splits says how many; 1 needs no partial.
  int splits = 1;
  float* partial = nullptr;
};
void launch_global_pool(const GlobalPoolParams& p, cudaStream_t stream);
// The parts an NHWC global pool's pixels are split into: enough blocks to keep every SM
// reading (one block per 32 channels of an item reached about a quarter of an H200's
// bandwidth on DeepLab's 2048 x 128 x 128 map), each part at least 512 pixels.
int global_pool_splits(int64_t n, int64_t c, int64_t hw);

// Explicit padding (or cropping, negative pads) of H and W: y is x, packed, shifted by top rows
// and left columns, the rest `fill`. y may be a view with its own batch stride (and, in NHWC,
// pixel stride).
struct PadParams {
  const void* x = nullptr;
  void* y = nullptr;
  Elem elem = Elem::F32;
  int64_t n = 0, c = 0, ih = 0, iw = 0, oh = 0, ow = 0, top = 0, left = 0;
  int nhwc = 0;
  int64_t y_batch_stride = 0, y_pixel_stride = 0;  // elements
  float fill = 0.f;
};
void launch_pad(const PadParams& p, cudaStream_t stream);

// Softmax over the channels of every pixel of a packed tensor.
void launch_softmax(const void* x, void* y, int64_t n, int64_t c, int64_t hw, int nhwc, Elem elem,
                    cudaStream_t stream);

// dst[i] = src[i] converted (round to nearest even); the conversions at the edges of a
// half-precision engine: weights and inputs in, results out.
void launch_cast(const void* src, Elem src_elem, void* dst, Elem dst_elem, int64_t count, cudaStream_t stream);

// Depthwise convolution (groups = in = out channels): y = act(conv(relu?(x), w) + b). ph is
// the padding above x's first row and may be negative (a band whose input holds rows above the
// ones it reads); the output height oh is explicit, and rows outside [0, h) read as zeros.
struct DepthwiseParams {
  const void* x = nullptr;
  const void* w = nullptr;  // [c][kh][kw]
  const void* b = nullptr;  // may be null
  void* y = nullptr;
  Elem elem = Elem::F32;
  int n = 0, c = 0, h = 0, w_in = 0, oh = 0, ow = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  int dh = 1, dw = 1;  // dilation: NHWC only, in the generic kernel (the fixed and tiled ones take 1)
  int input_relu = 0;
  int act = 0;
  int nhwc = 0;  // x and y packed NHWC: a thread per output, threads along channels
  // NHWC square windows of 3, 5 or 7 at stride 1 or 2: 0 = a tile of 4 x 4 outputs per
  // thread, 1 = a run of one row's outputs. The planner times both (conv.cpp).
  int variant = 0;
};
constexpr int kMaxDepthwiseKernel = 7;
constexpr int kMaxDepthwiseStride = 2;
void launch_depthwise(const DepthwiseParams& p, cudaStream_t stream);

// Any 2-D convolution, one thread per output: the fallback when no other implementation takes
// a problem (a band's asymmetric padding that no cuDNN engine accepts). Same conventions as
// DepthwiseParams (ph may be negative, oh explicit, rows outside [0, h) are zeros); weights
// [oc][c / groups][kh][kw] (NCHW) or [oc][kh][kw][c / groups] (NHWC); x packed.
struct DirectConvParams {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* b = nullptr;  // may be null
  void* y = nullptr;
  Elem elem = Elem::F32;
  int n = 0, c = 0, h = 0, w_in = 0, oc = 0, oh = 0, ow = 0, groups = 1;
  int kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int input_relu = 0;
  int act = 0;
  int nhwc = 0;
};
void launch_conv_direct(const DirectConvParams& p, cudaStream_t stream);

// The phase split of a dilated convolution (conv.hpp): with dilation d, NHWC image x[n][h][w]
// becomes the batch of its d x d phases, phase (n, a, b) being batch item (n * d + a) * d + b of
// p x q pixels, its pixel (i, j) the image's (i * d + a, j * d + b) or zeros past the image
// (merge = 0); merge = 1 writes the image's pixels back from such a batch. `channels` elements
// per pixel, both buffers packed NHWC.
struct PhaseParams {
  const void* src = nullptr;
  void* dst = nullptr;
  Elem elem = Elem::F32;
  int64_t n = 0, h = 0, w = 0, channels = 0;
  int64_t dilation = 1, p = 0, q = 0;
  int merge = 0;
};
void launch_phases(const PhaseParams& p, cudaStream_t stream);

// The channel pad of a convolution's input (conv.hpp): `pixels` packed NHWC pixels of
// `channels` elements from src into dst's pixels of `padded` (4 or 8) elements, the rest zero.
void launch_pad_channels(const void* src, void* dst, Elem elem, int64_t pixels, int64_t channels, int64_t padded,
                         cudaStream_t stream);

// Row copies (the rows op of row splits, and cutting the rows a band reads out of a taller
// input). In NHWC a packed tensor's rows hold every channel, so the caller describes it as one
// plane (channels = 1) and a row as w * c elements. Each segment copies `len` consecutive elements of every channel plane of every batch
// item, from a source whose planes are src_plane elements apart into dst, whose planes are
// dst_plane elements apart, dst_offset elements into each plane. Segments write disjoint
// elements, so one launch does them all.
constexpr int kMaxRowSegments = 16;
struct RowSegment {
  const void* src = nullptr;     // first copied element of channel 0 of batch item 0
  int64_t src_batch_stride = 0;  // elements between batch items
  int64_t src_plane = 0;         // elements between channel planes
  int64_t dst_offset = 0;
  int64_t len = 0;
  int vec4 = 0;                  // every address, stride and length is a multiple of 4 elements
};
struct RowsParams {
  void* dst = nullptr;
  Elem elem = Elem::F32;
  int64_t dst_batch_stride = 0;
  int64_t dst_plane = 0;
  int64_t channels = 0;
  int batch = 1;
  int num_segments = 0;
  RowSegment segs[kMaxRowSegments];
};
void launch_rows(const RowsParams& p, cudaStream_t stream);

// y[n][o] = b[o] + sum_i w[o][i] * x[n][i], x flattened, in fp32 (no TF32, as PyTorch's
// default matmul); b may be null.
void launch_linear(const void* x, const void* w, const void* b, void* y, int64_t n, int64_t in, int64_t out,
                   Elem elem, cudaStream_t stream);

// Signals of the cuda-ipc transport: wait until *flag == 1, then set it back to 0; set *flag to
// 1 after everything the stream wrote before is visible (the flag may live on a peer GPU); set
// one flag, then wait on another.
void launch_wait_flag(unsigned int* flag, cudaStream_t stream);
void launch_set_flag(unsigned int* flag, cudaStream_t stream);
void launch_set_then_wait_flag(unsigned int* remote, unsigned int* local, cudaStream_t stream);
// Waits for *ready == 1, copies `bytes` from src to dst (16-byte aligned; dst may be a peer
// GPU's), then re-arms *ready and *blocks_done (0) and sets *done_remote to 1.
void launch_push(const void* src, void* dst, size_t bytes, unsigned int* ready, unsigned int* done_remote,
                 unsigned int* blocks_done, cudaStream_t stream);
// Loads the code of the kernels above on the current device now: loaded at a first launch
// instead (CUDA's lazy loading), one of them could wait for a kernel spinning until a peer
// sends, while the peer waits for it.
cudaError_t load_signal_kernels();

// Holds `stream` until *release (mapped host memory) is non-zero, or for timeout_ns at most,
// when it sets *timed_out to 1 (also mapped) and lets the stream go on.
void launch_hold(const unsigned int* release, unsigned int* timed_out, unsigned long long timeout_ns,
                 cudaStream_t stream);

}  // namespace hios::cuda
