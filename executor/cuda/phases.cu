// Copies that reshape an NHWC image for a convolution candidate (conv.hpp).
// The phase split of a dilated convolution: the d x d phases of an NHWC image as a batch of
// small images, and back. Each pixel is a run of `channels` consecutive elements, so both
// directions are copies of whole pixels, in the widest word every run and pointer allows.
// The channel pad: each pixel widened to 4 or 8 elements, the new ones zero.
#include "executor/cuda/kernels.hpp"

#include <cstdint>

#include "executor/cuda/check.hpp"
#include "executor/cuda/kernel_util.cuh"

namespace hios::cuda {

namespace {

// One thread per word of the batch of phases (split) or of the whole image (merge). Phase
// image (n, a, b) is batch item (n * d + a) * d + b; its pixel (i, j) is the image's pixel
// (i * d + a, j * d + b), zeros where that lies past the image (split only reads the image).
// Index is 32-bit where every index fits (64-bit division costs several times more).
template <class Word, class Index>
__global__ void phases_kernel(PhaseParams p, Index words_per_pixel, Index total) {
  const Index d = Index(p.dilation), H = Index(p.h), W = Index(p.w), P = Index(p.p), Q = Index(p.q);
  for (Index t = blockIdx.x * Index(blockDim.x) + threadIdx.x; t < total; t += Index(gridDim.x) * blockDim.x) {
    const Index word = t % words_per_pixel;
    const Index pixel = t / words_per_pixel;
    Index n, h, w, i, j, a, b;
    if (p.merge) {  // pixel of the image: n, h, w
      w = pixel % W;
      h = (pixel / W) % H;
      n = pixel / (W * H);
      a = h % d, i = h / d;
      b = w % d, j = w / d;
    } else {  // pixel of the phases: (n, a, b), i, j
      j = pixel % Q;
      i = (pixel / Q) % P;
      const Index item = pixel / (Q * P);
      b = item % d;
      a = (item / d) % d;
      n = item / (d * d);
      h = i * d + a;
      w = j * d + b;
    }
    const Index image_pixel = (n * H + h) * W + w;
    const Index phase_pixel = (((n * d + a) * d + b) * P + i) * Q + j;
    const Word* src = static_cast<const Word*>(p.src);
    Word* dst = static_cast<Word*>(p.dst);
    if (p.merge) {
      dst[image_pixel * words_per_pixel + word] = src[phase_pixel * words_per_pixel + word];
    } else if (h < H && w < W) {
      dst[phase_pixel * words_per_pixel + word] = src[image_pixel * words_per_pixel + word];
    } else {
      dst[phase_pixel * words_per_pixel + word] = Word{};
    }
  }
}

template <class Word>
void launch_phases_as(const PhaseParams& p, int64_t pixel_bytes, cudaStream_t stream) {
  const int64_t words = pixel_bytes / int64_t(sizeof(Word));
  const int64_t pixels = p.merge ? p.n * p.h * p.w : p.n * p.dilation * p.dilation * p.p * p.q;
  const int64_t total = pixels * words;
  if (total <= 0) return;
  // The largest index either side touches: the phases hold at least the image's pixels.
  const int64_t phase_words = p.n * p.dilation * p.dilation * p.p * p.q * words;
  if (phase_words < (int64_t(1) << 31)) {  // room for the grid stride past the end
    phases_kernel<Word, uint32_t><<<grid_for(total), kThreads, 0, stream>>>(p, uint32_t(words), uint32_t(total));
  } else {
    phases_kernel<Word, int64_t><<<grid_for(total), kThreads, 0, stream>>>(p, words, total);
  }
}

// One thread per pixel: its `channels` elements (bits, so any element type) and zeros, stored as
// one word of Padded elements (8 or 16 bytes, aligned: dst is packed and 16-byte aligned).
template <class Bits, int Padded, class Index>
__global__ void pad_channels_kernel(const Bits* src, Bits* dst, Index pixels, int channels) {
  struct alignas(sizeof(Bits) * Padded) Pixel {
    Bits v[Padded];
  };
  for (Index t = blockIdx.x * Index(blockDim.x) + threadIdx.x; t < pixels; t += Index(gridDim.x) * blockDim.x) {
    Pixel px;
#pragma unroll
    for (int k = 0; k < Padded; ++k) px.v[k] = k < channels ? src[t * Index(channels) + k] : Bits{};
    reinterpret_cast<Pixel*>(dst)[t] = px;
  }
}

template <class Bits, int Padded>
void launch_pad_channels_as(const void* src, void* dst, int64_t pixels, int channels, cudaStream_t stream) {
  const Bits* s = static_cast<const Bits*>(src);
  Bits* d = static_cast<Bits*>(dst);
  if (pixels * Padded < (int64_t(1) << 31)) {  // room for the grid stride past the end
    pad_channels_kernel<Bits, Padded, uint32_t><<<grid_for(pixels), kThreads, 0, stream>>>(s, d, uint32_t(pixels), channels);
  } else {
    pad_channels_kernel<Bits, Padded, int64_t><<<grid_for(pixels), kThreads, 0, stream>>>(s, d, pixels, channels);
  }
}

}  // namespace

void launch_pad_channels(const void* src, void* dst, Elem elem, int64_t pixels, int64_t channels, int64_t padded,
                         cudaStream_t stream) {
  HIOS_CHECK(channels > 0 && channels < padded && (padded == 4 || padded == 8) &&
                 (reinterpret_cast<uintptr_t>(dst) % 16) == 0,
             "channel pad: %lld channels into %lld", (long long)channels, (long long)padded);
  if (pixels <= 0) return;
  const int c = int(channels);
  if (elem_bytes(elem) == 4) {
    HIOS_CHECK(padded == 4, "channel pad: fp32 pixels are padded to 4 channels, not %lld", (long long)padded);
    launch_pad_channels_as<uint32_t, 4>(src, dst, pixels, c, stream);
  } else if (padded == 4) {
    launch_pad_channels_as<uint16_t, 4>(src, dst, pixels, c, stream);
  } else {
    launch_pad_channels_as<uint16_t, 8>(src, dst, pixels, c, stream);
  }
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_phases(const PhaseParams& p, cudaStream_t stream) {
  const int64_t pixel_bytes = p.channels * int64_t(elem_bytes(p.elem));
  const uintptr_t at = reinterpret_cast<uintptr_t>(p.src) | reinterpret_cast<uintptr_t>(p.dst);
  if (pixel_bytes % 16 == 0 && at % 16 == 0) {
    launch_phases_as<uint4>(p, pixel_bytes, stream);
  } else if (pixel_bytes % 4 == 0 && at % 4 == 0) {
    launch_phases_as<uint32_t>(p, pixel_bytes, stream);
  } else {
    launch_phases_as<uint16_t>(p, pixel_bytes, stream);
  }
  HIOS_CUDA_CHECK_LAUNCH();
}

}  // namespace hios::cuda
