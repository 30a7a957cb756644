// The phase split of a dilated convolution (conv.hpp): the d x d phases of an NHWC image as a
// batch of small images, and back. Each pixel is a run of `channels` consecutive elements, so
// both directions are copies of whole pixels, in the widest word every run and pointer allows.
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

}  // namespace

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
