// hios's CUDA kernels that come in several variants computing the same function: every
// variant must give the same bits (the planner times them and keeps the fastest, so the one a
// model runs depends on the shape and the GPU; the op tests check whichever won against the
// CPU reference). Skipped on machines without a GPU.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "executor/cuda/api.hpp"
#include "executor/cuda/kernels.hpp"
#include "executor/cuda/tensor_kernels.hpp"
#include "graph/error.hpp"

#include "tests/catch.hpp"
#include "tests/gpu/gpu_util.hpp"

using namespace hios;
using namespace hios::cuda;

namespace {

// A device buffer of random bits that are finite values of the storage type.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  DeviceBuffer(int64_t count, Elem elem, std::mt19937& rng) : bytes(size_t(count) * elem_bytes(elem)) {
    REQUIRE(cudaMalloc(&p, bytes) == cudaSuccess);
    const std::vector<float> host = gputest::random_values(count, rng);
    void* tmp = nullptr;
    REQUIRE(cudaMalloc(&tmp, host.size() * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMemcpy(tmp, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
    launch_cast(tmp, Elem::F32, p, elem, count, nullptr);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    cudaFree(tmp);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<unsigned char> bits() const {
    std::vector<unsigned char> out(bytes);
    REQUIRE(cudaMemcpy(out.data(), p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  }
};

}  // namespace

TEST_CASE("NHWC depthwise variants (4x4 tiles, row runs) give the same bits", "[gpu][kernels]") {
  REQUIRE_GPU();
  std::mt19937 rng(5);
  for (Elem elem : {Elem::F32, Elem::BF16, Elem::F16}) {
    for (int k : {3, 5, 7}) {
      for (int s : {1, 2}) {
        for (int band : {0, 1}) {  // 1: a band's geometry, rows above the input (ph < 0 means skipped rows)
          const int n = 2, c = band ? 13 : 96;
          const int h = std::uniform_int_distribution<int>(k + 2, 41)(rng), w = std::uniform_int_distribution<int>(k, 37)(rng);
          DepthwiseParams p;
          p.elem = elem;
          p.n = n;
          p.c = c;
          p.h = h;
          p.w_in = w;
          p.kh = p.kw = k;
          p.sh = p.sw = s;
          p.ph = band ? -1 : k / 2;
          p.pw = k / 2;
          p.oh = (h + 2 * p.ph - k) / s + 1 + (band ? 1 : 0);  // a band may run past the rows it holds
          p.ow = (w + 2 * p.pw - k) / s + 1;
          p.input_relu = 1;
          p.act = 1;
          p.nhwc = 1;
          DeviceBuffer x(int64_t(n) * h * w * c, elem, rng), wt(int64_t(c) * k * k, elem, rng), b(c, elem, rng);
          DeviceBuffer y0(int64_t(n) * p.oh * p.ow * c, elem, rng), y1(int64_t(n) * p.oh * p.ow * c, elem, rng);
          p.x = x.p;
          p.w = wt.p;
          p.b = b.p;
          p.variant = 0;
          p.y = y0.p;
          launch_depthwise(p, nullptr);
          p.variant = 1;
          p.y = y1.p;
          launch_depthwise(p, nullptr);
          REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
          INFO("depthwise " << k << "x" << k << "/" << s << " c" << c << " " << h << "x" << w << " band " << band
                            << " elem " << int(elem));
          CHECK(y0.bits() == y1.bits());
        }
      }
    }
  }
}

TEST_CASE("NHWC 3x3 pools: the tile and row-sliding kernels match the general one", "[gpu][kernels]") {
  REQUIRE_GPU();
  std::mt19937 rng(6);
  // The values of a device buffer of `elem`, as floats.
  auto values = [&](const DeviceBuffer& d, Elem elem) {
    std::vector<float> out(d.bytes / elem_bytes(elem));
    DeviceBuffer f(int64_t(out.size()), Elem::F32, rng);
    launch_cast(d.p, elem, f.p, Elem::F32, int64_t(out.size()), nullptr);
    REQUIRE(cudaMemcpy(out.data(), f.p, f.bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  };
  for (Elem elem : {Elem::F32, Elem::BF16, Elem::F16}) {
    for (int s : {1, 2}) {
      for (int is_max : {1, 0}) {
        // 12 and 13: no 16-byte vectors in 16-bit storage (tiles fall back to rows); 48 and 72:
        // whole and partial channel chunks of the tile kernel; band: rows of a larger tensor,
        // and a channel slice of a wider buffer.
        for (int c : {12, 42, 13, 48, 72}) {
          for (int band : {0, 1}) {
            const int n = 2, h = std::uniform_int_distribution<int>(band ? 6 : 3, 40)(rng),
                      w = std::uniform_int_distribution<int>(3, 40)(rng);
            const int stride = band ? c + 8 : c;  // x's pixel stride: a slice of a wider buffer
            PoolParams p;
            p.elem = elem;
            p.n = n;
            p.c = c;
            p.h = h;
            p.w = w;
            p.kh = p.kw = 3;
            p.sh = p.sw = s;
            p.ph = p.pw = 1;
            p.ow = (w + 2 - 3) / s + 1;
            if (band) {
              // x holds rows 2.. of a tensor h + 4 rows high; the band's outputs are rows r0..
              // whose windows stay inside what x holds.
              p.full_h = h + 4;
              p.i0 = 2;
              p.r0 = s == 1 ? 3 : 2;
              p.oh = std::max(1, (h - 2) / s - 1);
            } else {
              p.full_h = h;
              p.oh = (h + 2 - 3) / s + 1;
            }
            p.is_max = is_max;
            p.count_include_pad = c == 42 ? 1 : 0;
            p.nhwc = 1;
            p.x_pixel_stride = stride;
            p.x_batch_stride = int64_t(h) * w * stride;
            DeviceBuffer x(int64_t(n) * h * w * stride + 8, elem, rng);
            p.x = x.p;
            std::vector<std::vector<unsigned char>> bits;
            std::vector<std::vector<float>> vals;
            for (PoolKernel k : {PoolKernel::General, PoolKernel::Rows3x3, PoolKernel::Tiles3x3, PoolKernel::Tiles3x3Wide}) {
              DeviceBuffer y(int64_t(n) * p.oh * p.ow * c, elem, rng);
              p.kernel = k;
              p.y = y.p;
              launch_pool(p, nullptr);
              REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
              bits.push_back(y.bits());
              vals.push_back(values(y, elem));
            }
            INFO("pool 3x3/" << s << (is_max ? " max" : " avg") << " c" << c << " " << h << "x" << w << " band " << band
                             << " elem " << int(elem));
            // The tile and row kernels combine the same sums in the same order.
            for (size_t k = 2; k < bits.size(); ++k) {
              INFO("kernel " << k);
              CHECK(bits[1] == bits[k]);
            }
            if (is_max) {
              CHECK(bits[0] == bits[1]);  // max is exact in any order
            } else {
              // The general kernel associates the sums differently: within a few ulps.
              double worst = 0;
              for (size_t i = 0; i < vals[0].size(); ++i) worst = std::max(worst, double(std::fabs(vals[0][i] - vals[1][i])));
              CHECK(worst <= (elem == Elem::F32 ? 1e-6 : 1e-2));
            }
          }
        }
      }
    }
  }
}

// A band's pool reads only the rows its input holds, though the tensor has more: here the input
// ends exactly where mapped memory ends (the next page is reserved, never mapped), so a read past
// it is an illegal address. The tile kernel's last row group once staged its whole patch there.
TEST_CASE("NHWC 3x3 pools read no row past a band's input", "[gpu][kernels]") {
  REQUIRE_GPU();
  int dev = 0;
  REQUIRE(cudaGetDevice(&dev) == cudaSuccess);
  REQUIRE(cudaFree(nullptr) == cudaSuccess);  // a context for the driver calls
  // The driver's virtual memory calls, through the runtime: test_gpu does not link libcuda, so
  // that it starts (and skips) on machines without a driver.
  auto entry = [](const char* name, auto* fn) {
    cudaDriverEntryPointQueryResult found{};
    void* p = nullptr;
    REQUIRE(cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found) == cudaSuccess);
    REQUIRE(found == cudaDriverEntryPointSuccess);
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(p);
  };
  decltype(&cuMemGetAllocationGranularity) mem_granularity = nullptr;
  decltype(&cuMemCreate) mem_create = nullptr;
  decltype(&cuMemAddressReserve) mem_reserve = nullptr;
  decltype(&cuMemMap) mem_map = nullptr;
  decltype(&cuMemSetAccess) mem_set_access = nullptr;
  decltype(&cuMemUnmap) mem_unmap = nullptr;
  decltype(&cuMemAddressFree) mem_free_address = nullptr;
  decltype(&cuMemRelease) mem_release = nullptr;
  entry("cuMemGetAllocationGranularity", &mem_granularity);
  entry("cuMemCreate", &mem_create);
  entry("cuMemAddressReserve", &mem_reserve);
  entry("cuMemMap", &mem_map);
  entry("cuMemSetAccess", &mem_set_access);
  entry("cuMemUnmap", &mem_unmap);
  entry("cuMemAddressFree", &mem_free_address);
  entry("cuMemRelease", &mem_release);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t gran = 0;
  REQUIRE(mem_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS);
  CUmemGenericAllocationHandle mem{};
  REQUIRE(mem_create(&mem, gran, &prop, 0) == CUDA_SUCCESS);
  CUdeviceptr base = 0;
  REQUIRE(mem_reserve(&base, 2 * gran, 0, 0, 0) == CUDA_SUCCESS);
  REQUIRE(mem_map(base, gran, 0, mem, 0) == CUDA_SUCCESS);
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  REQUIRE(mem_set_access(base, gran, &access, 1) == CUDA_SUCCESS);
  for (Elem elem : {Elem::F32, Elem::BF16}) {
    for (int s : {1, 2}) {
      // 10 rows: the tile kernels' 4-row groups overhang the band's last output row at both strides.
      const int c = 32, w = 64, h = 10;
      const size_t x_bytes = size_t(h) * w * c * elem_bytes(elem);
      REQUIRE(x_bytes <= gran);
      void* x = reinterpret_cast<void*>(base + gran - x_bytes);
      REQUIRE(cudaMemset(x, 0, x_bytes) == cudaSuccess);
      PoolParams p;
      p.elem = elem;
      p.n = 1;
      p.c = c;
      p.h = h;
      p.w = w;
      p.kh = p.kw = 3;
      p.sh = p.sw = s;
      p.ph = p.pw = 1;
      p.full_h = h + 40;            // the tensor goes on below what x holds
      p.oh = s == 1 ? h - 1 : h / 2;  // windows inside rows 0..h-1 (padding above row 0)
      p.ow = (w + 2 - 3) / s + 1;
      p.is_max = 1;
      p.nhwc = 1;
      p.x_pixel_stride = c;
      p.x_batch_stride = int64_t(h) * w * c;
      p.x = x;
      void* y = nullptr;
      REQUIRE(cudaMalloc(&y, size_t(p.oh) * p.ow * c * elem_bytes(elem)) == cudaSuccess);
      p.y = y;
      for (PoolKernel k : {PoolKernel::General, PoolKernel::Rows3x3, PoolKernel::Tiles3x3, PoolKernel::Tiles3x3Wide}) {
        INFO("stride " << s << ", elem " << int(elem) << ", kernel " << int(k));
        p.kernel = k;
        launch_pool(p, nullptr);
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
      }
      cudaFree(y);
    }
  }
  CHECK(mem_unmap(base, gran) == CUDA_SUCCESS);
  CHECK(mem_free_address(base, 2 * gran) == CUDA_SUCCESS);
  CHECK(mem_release(mem) == CUDA_SUCCESS);
}

// The image kernels of an NHWC resize (one thread per element; a stretch of a row per block)
// and the general walk (runs of channels) sum the same taps in the same order: the same bits,
// for linear and cubic taps, channel counts that are and are not multiples of the run or
// divisors of a block, rows of one stretch and of several with a partial last one.
TEST_CASE("NHWC resize: the image kernels and the general walk give the same bits", "[gpu][kernels]") {
  REQUIRE_GPU();
  std::mt19937 rng(17);
  for (Elem elem : {Elem::F32, Elem::BF16}) {
    for (int taps : {2, 4}) {
      const std::pair<int64_t, int64_t> channels_and_widths[] = {{21, 7}, {8, 20}, {3, 7}, {21, 37}, {300, 5}};
      for (const auto& [c, w] : channels_and_widths) {
        const int64_t n = 2, h = 9, oh = 8 * h, ow = 8 * w;
        DeviceBuffer x(n * h * w * c, elem, rng), y0(n * oh * ow * c, elem, rng), y1(n * oh * ow * c, elem, rng),
            y2(n * oh * ow * c, elem, rng);
        // Each axis: `taps` source indices clamped to the input and weights summing to 1.
        auto table = [&](int64_t out, int64_t in, std::vector<int>& index, std::vector<float>& weight) {
          for (int64_t o = 0; o < out; ++o) {
            const int64_t base = o * in / out;
            for (int t = 0; t < taps; ++t) {
              index.push_back(int(std::clamp<int64_t>(base + t - taps / 2 + 1, 0, in - 1)));
              weight.push_back(t == 0 ? 0.625f : 0.375f / float(taps - 1));
            }
          }
        };
        std::vector<int> iy, ix;
        std::vector<float> wy, wx;
        table(oh, h, iy, wy);
        table(ow, w, ix, wx);
        void* dev[4] = {};
        const void* host[4] = {iy.data(), wy.data(), ix.data(), wx.data()};
        const size_t bytes[4] = {iy.size() * 4, wy.size() * 4, ix.size() * 4, wx.size() * 4};
        for (int i = 0; i < 4; ++i) {
          REQUIRE(cudaMalloc(&dev[i], bytes[i]) == cudaSuccess);
          REQUIRE(cudaMemcpy(dev[i], host[i], bytes[i], cudaMemcpyHostToDevice) == cudaSuccess);
        }
        ResizeParams p;
        p.elem = elem;
        p.rank = 4;
        const int64_t xd[4] = {n, h, w, c}, yd[4] = {n, oh, ow, c};
        const int64_t xs[4] = {h * w * c, w * c, c, 1}, ys[4] = {oh * ow * c, ow * c, c, 1};
        for (int d = 0; d < 4; ++d) {
          p.x_dims[d] = xd[d];
          p.dims[d] = yd[d];
          p.x_stride[d] = xs[d];
          p.y_stride[d] = ys[d];
        }
        p.taps[1] = p.taps[2] = taps;
        p.tap_index[1] = static_cast<const int*>(dev[0]);
        p.tap_weight[1] = static_cast<const float*>(dev[1]);
        p.tap_index[2] = static_cast<const int*>(dev[2]);
        p.tap_weight[2] = static_cast<const float*>(dev[3]);
        p.x = x.p;
        REQUIRE(resize_image_fits(p));
        p.y = y0.p;
        p.image_kernel = 0;
        launch_resize(p, nullptr);
        p.y = y1.p;
        p.image_kernel = 1;
        launch_resize(p, nullptr);
        REQUIRE(resize_image_rows_fit(p));
        p.y = y2.p;
        p.image_kernel = 2;
        launch_resize(p, nullptr);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        INFO("resize " << taps << " taps, c" << c << ", w" << w << ", elem " << int(elem));
        CHECK(y0.bits() == y1.bits());
        CHECK(y0.bits() == y2.bits());
        for (void* d : dev) cudaFree(d);
      }
    }
  }
}

// Plain copies (a transpose that keeps the last dim, [A, B, n] to [B, A, n]) run in words where
// the run and strides allow 16, 8 or 4 bytes, element by element otherwise: the same bits
// either way.
TEST_CASE("copies in words and by element give the bits of a host transpose", "[gpu][kernels]") {
  REQUIRE_GPU();
  std::mt19937 rng(41);
  for (Elem elem : {Elem::F32, Elem::BF16}) {
    for (int64_t n : {64, 6, 3, 1}) {
      const int64_t A = 5, B = 7;
      DeviceBuffer x(A * B * n, elem, rng), y(A * B * n, elem, rng);
      MapParams p;
      p.elem = elem;
      p.rank = 3;
      const int64_t dims[3] = {B, A, n}, ys[3] = {A * n, n, 1}, xs[3] = {n, B * n, 1};
      for (int d = 0; d < 3; ++d) {
        p.dims[d] = dims[d];
        p.y_stride[d] = ys[d];
        p.in[0].stride[d] = xs[d];
      }
      p.y = y.p;
      p.in[0].ptr = x.p;
      launch_map(p, nullptr);
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      const std::vector<unsigned char> xb = x.bits(), yb = y.bits();
      const size_t eb = elem_bytes(elem);
      std::vector<unsigned char> want(yb.size());
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t a = 0; a < A; ++a) {
          std::copy_n(xb.begin() + ((a * B + b) * n) * int64_t(eb), n * int64_t(eb), want.begin() + ((b * A + a) * n) * int64_t(eb));
        }
      }
      INFO("transpose of runs of " << n << ", elem " << int(elem));
      CHECK(yb == want);
    }
  }
}

// The fused attention kernel against attention in double on the host, from the same (rounded)
// operands: head sizes 64 and 128, query and key counts that are not multiples of the 64-row
// tiles, an additive mask broadcast over the heads with -infinity in it, causal, and a row
// masked away entirely (NaN, as the CPU reference gives).
TEST_CASE("fused attention kernel matches attention in double", "[gpu][kernels]") {
  REQUIRE_GPU();
  std::mt19937 rng(43);
  int major = 0;
  REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess);
  struct Case {
    Elem elem;
    int64_t d, sq, sk;
    bool mask, causal;
  };
  for (const Case& cs : {Case{Elem::F32, 64, 77, 130, false, false}, Case{Elem::BF16, 64, 197, 197, true, false},
                         Case{Elem::F16, 128, 65, 64, false, true}, Case{Elem::F32, 128, 40, 150, true, true},
                         Case{Elem::BF16, 64, 128, 63, true, true}}) {
    const int64_t heads = 3, d = cs.d, sq = cs.sq, sk = cs.sk;
    // Values in the storage type, and the same values back as floats for the host.
    auto upload = [&](const std::vector<float>& host, void** dev) {
      void* tmp = nullptr;
      REQUIRE(cudaMalloc(&tmp, host.size() * 4) == cudaSuccess);
      REQUIRE(cudaMalloc(dev, host.size() * elem_bytes(cs.elem)) == cudaSuccess);
      REQUIRE(cudaMemcpy(tmp, host.data(), host.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess);
      launch_cast(tmp, Elem::F32, *dev, cs.elem, int64_t(host.size()), nullptr);
      launch_cast(*dev, cs.elem, tmp, Elem::F32, int64_t(host.size()), nullptr);
      std::vector<float> back(host.size());
      REQUIRE(cudaMemcpy(back.data(), tmp, host.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
      cudaFree(tmp);
      return back;
    };
    std::vector<float> mask_host(size_t(sq * sk), 0.f);
    if (cs.mask) {
      for (size_t k = 0; k < mask_host.size(); ++k) mask_host[k] = (k * 7) % 11 == 0 ? -INFINITY : 0.1f * float(k % 5);
      for (int64_t j = 0; j < sk; ++j) mask_host[size_t(5 * sk + j)] = -INFINITY;  // row 5 masked away
    }
    void *q = nullptr, *k = nullptr, *v = nullptr, *m = nullptr, *y = nullptr;
    const std::vector<float> qh = upload(gputest::random_values(heads * sq * d, rng), &q);
    const std::vector<float> kh = upload(gputest::random_values(heads * sk * d, rng), &k);
    const std::vector<float> vh = upload(gputest::random_values(heads * sk * d, rng), &v);
    const std::vector<float> mh = upload(mask_host, &m);
    REQUIRE(cudaMalloc(&y, size_t(heads * sq * d) * elem_bytes(cs.elem)) == cudaSuccess);
    FlashAttentionParams p;
    p.elem = cs.elem;
    p.q = q;
    p.k = k;
    p.v = v;
    p.y = y;
    p.mask = cs.mask ? m : nullptr;
    p.batch = heads;
    p.sq = sq;
    p.sk = sk;
    p.d = p.dv = d;
    p.q_row = p.k_row = p.v_row = p.y_row = d;
    p.q_batch = p.y_batch = sq * d;
    p.k_batch = p.v_batch = sk * d;
    p.lead_rank = 1;
    p.lead_dims[0] = heads;
    p.mask_lead_stride[0] = 0;  // one mask for every head
    p.mask_row = sk;
    p.mask_col = 1;
    p.scale = float(1 / std::sqrt(double(d)));
    p.causal = cs.causal ? 1 : 0;
    REQUIRE(flash_attention_fits(p, major));
    prepare_flash_attention(p.elem, p.d);
    launch_flash_attention(p, nullptr);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<float> got(size_t(heads * sq * d));
    {
      void* tmp = nullptr;
      REQUIRE(cudaMalloc(&tmp, got.size() * 4) == cudaSuccess);
      launch_cast(y, cs.elem, tmp, Elem::F32, int64_t(got.size()), nullptr);
      REQUIRE(cudaMemcpy(got.data(), tmp, got.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
      cudaFree(tmp);
    }
    double err = 0, norm = 0;
    bool nan_row_ok = true;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < sq; ++i) {
        std::vector<double> s(static_cast<size_t>(sk));
        double most = -INFINITY;
        for (int64_t j = 0; j < sk; ++j) {
          double x = 0;
          for (int64_t e = 0; e < d; ++e) x += double(qh[size_t((h * sq + i) * d + e)]) * double(kh[size_t((h * sk + j) * d + e)]);
          x *= double(p.scale);
          if (cs.mask) x += double(mh[size_t(i * sk + j)]);
          if (cs.causal && j > i) x = -INFINITY;
          s[size_t(j)] = x;
          most = std::max(most, x);
        }
        double sum = 0;
        for (int64_t j = 0; j < sk; ++j) sum += std::exp(s[size_t(j)] - most);
        for (int64_t e = 0; e < d; ++e) {
          double want = 0;
          for (int64_t j = 0; j < sk; ++j) want += std::exp(s[size_t(j)] - most) / sum * double(vh[size_t((h * sk + j) * d + e)]);
          const double g = got[size_t((h * sq + i) * d + e)];
          if (!std::isfinite(most)) {  // every key masked: NaN
            nan_row_ok = nan_row_ok && std::isnan(g);
            continue;
          }
          err += (g - want) * (g - want);
          norm += want * want;
        }
      }
    }
    const double rel = std::sqrt(err / std::max(norm, 1e-30));
    INFO("attention " << int(cs.elem) << " d" << d << " " << sq << "x" << sk << " mask " << cs.mask << " causal "
                      << cs.causal << ": relative error " << rel);
    CHECK(rel < (cs.elem == Elem::BF16 ? 2e-2 : 5e-3));
    CHECK(nan_row_ok);
    for (void* b : {q, k, v, m, y}) cudaFree(b);
  }
}

// The channel pad's copy: each pixel's channels, then zeros, in every element size and width.
TEST_CASE("channel pad copy: each pixel's channels then zeros", "[gpu][kernels]") {
  REQUIRE_GPU();
  std::mt19937 rng(37);
  struct Case {
    Elem elem;
    int64_t c, padded;
  };
  for (const Case& cs : {Case{Elem::F32, 3, 4}, Case{Elem::F32, 1, 4}, Case{Elem::BF16, 3, 4}, Case{Elem::BF16, 3, 8},
                         Case{Elem::F16, 5, 8}}) {
    const int64_t pixels = 3 * 37 * 41;
    DeviceBuffer x(pixels * cs.c, cs.elem, rng), y(pixels * cs.padded, cs.elem, rng);
    launch_pad_channels(x.p, y.p, cs.elem, pixels, cs.c, cs.padded, nullptr);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const std::vector<uint8_t> xb = x.bits(), yb = y.bits();
    const size_t eb = elem_bytes(cs.elem);
    std::vector<uint8_t> want(yb.size(), 0);
    for (int64_t i = 0; i < pixels; ++i) {
      std::copy_n(xb.begin() + i * cs.c * int64_t(eb), cs.c * int64_t(eb), want.begin() + i * cs.padded * int64_t(eb));
    }
    INFO("pad " << cs.c << " to " << cs.padded << ", elem " << int(cs.elem));
    CHECK(yb == want);
  }
}

// The phase split's copies: an image split into its d x d phases and merged back is the image,
// and every padded phase pixel (past the image) is zero.
TEST_CASE("phase split copies: split then merge gives the image back, padding zero", "[gpu][kernels]") {
  REQUIRE_GPU();
  std::mt19937 rng(29);
  for (Elem elem : {Elem::F32, Elem::F16}) {
    for (int d : {2, 3, 12}) {
      for (int64_t c : {8, 3}) {
        const int64_t n = 2, h = 2 * d + 3, w = d + 1, p = (h + d - 1) / d, q = (w + d - 1) / d;
        DeviceBuffer x(n * h * w * c, elem, rng), y(n * h * w * c, elem, rng), phases(n * d * d * p * q * c, elem, rng);
        PhaseParams pp;
        pp.elem = elem;
        pp.n = n;
        pp.h = h;
        pp.w = w;
        pp.channels = c;
        pp.dilation = d;
        pp.p = p;
        pp.q = q;
        pp.src = x.p;
        pp.dst = phases.p;
        launch_phases(pp, nullptr);
        pp.merge = 1;
        pp.src = phases.p;
        pp.dst = y.p;
        launch_phases(pp, nullptr);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        INFO("phases d" << d << " c" << c << " elem " << int(elem));
        CHECK(x.bits() == y.bits());
        // Pixel (i, j) of phase (b, a, a2) is the image's (i * d + a, j * d + a2) or zero.
        const std::vector<unsigned char> img = x.bits(), ph = phases.bits();
        const size_t eb = elem_bytes(elem), px = size_t(c) * eb;
        bool same = true;
        for (int64_t b = 0; b < n; ++b) {
          for (int64_t a = 0; a < d; ++a) {
            for (int64_t a2 = 0; a2 < d; ++a2) {
              for (int64_t i = 0; i < p; ++i) {
                for (int64_t j = 0; j < q; ++j) {
                  const unsigned char* got = ph.data() + size_t((((b * d + a) * d + a2) * p + i) * q + j) * px;
                  const int64_t hh = i * d + a, ww = j * d + a2;
                  if (hh < h && ww < w) {
                    same = same && std::memcmp(got, img.data() + size_t((b * h + hh) * w + ww) * px, px) == 0;
                  } else {
                    same = same && std::all_of(got, got + px, [](unsigned char v) { return v == 0; });
                  }
                }
              }
            }
          }
        }
        CHECK(same);
      }
    }
  }
}
