// time_on_stream, which the planner's choices between implementations rest on: it must time the
// GPU's work, not the host's submission of it, and never leave a stream held. Skipped on
// machines without a GPU.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>

#include "executor/cuda/device.hpp"
#include "executor/cuda/kernels.hpp"

#include "tests/catch.hpp"
#include "tests/gpu/gpu_util.hpp"

using namespace hios::cuda;

namespace {

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { REQUIRE(cudaStreamCreate(&s) == cudaSuccess); }
  ~Stream() { (void)cudaStreamDestroy(s); }
};

struct Floats {
  void* p = nullptr;
  explicit Floats(size_t n) { REQUIRE(cudaMalloc(&p, n * sizeof(float)) == cudaSuccess); }
  ~Floats() { (void)cudaFree(p); }
};

constexpr int64_t kCount = 1 << 16;  // a cast of 256 KiB: a few microseconds on any GPU

}  // namespace

TEST_CASE("time_on_stream times the GPU's work, not the host's submission", "[gpu][timing]") {
  REQUIRE_GPU();
  Stream st;
  Floats src(kCount), dst(kCount);
  // The host takes 3 ms between queueing the two halves of the work; the GPU needs microseconds.
  const double ms = time_on_stream(st.s, [&] {
    launch_cast(src.p, Elem::F32, dst.p, Elem::F32, kCount, st.s);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    launch_cast(dst.p, Elem::F32, src.p, Elem::F32, kCount, st.s);
  });
  INFO("timed " << ms << " ms");
  CHECK(ms > 0);
  CHECK(ms < 1.0);
}

TEST_CASE("time_on_stream returns when the work waits for its own stream", "[gpu][timing]") {
  REQUIRE_GPU();
  Stream st;
  Floats src(kCount), dst(kCount);
  // The hold blocks the stream the work synchronises with: the hold gives up (20 ms) rather than
  // waiting forever, and the time is still the work's.
  const auto start = std::chrono::steady_clock::now();
  const double ms = time_on_stream(st.s, [&] {
    launch_cast(src.p, Elem::F32, dst.p, Elem::F32, kCount, st.s);
    REQUIRE(cudaStreamSynchronize(st.s) == cudaSuccess);
  });
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("timed " << ms << " ms in " << wall_s << " s");
  CHECK(std::isfinite(ms));
  CHECK(ms > 0);
  CHECK(ms < 1.0);
  CHECK(wall_s < 30);
}

TEST_CASE("time_on_stream passes a failing work's error on and leaves the stream free", "[gpu][timing]") {
  REQUIRE_GPU();
  Stream st;
  Floats src(kCount), dst(kCount);
  int calls = 0;
  auto failing = [&] {
    launch_cast(src.p, Elem::F32, dst.p, Elem::F32, kCount, st.s);
    if (++calls == 2) throw std::runtime_error("refused when it ran");  // the first timed run
  };
  CHECK_THROWS_WITH(time_on_stream(st.s, failing), "refused when it ran");
  // Released: the stream drains, and the next timing works.
  CHECK(cudaStreamSynchronize(st.s) == cudaSuccess);
  const double ms = time_on_stream(st.s, [&] { launch_cast(src.p, Elem::F32, dst.p, Elem::F32, kCount, st.s); });
  CHECK(ms > 0);
  CHECK(ms < 1.0);
}
