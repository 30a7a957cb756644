// The CPU reference's first image alone (run/reference_cache.hpp, hios run
// --reference-first-image): it equals the first image of the whole batch's reference, and it is
// cached under the batch-1 graph's key, which a batch-1 run of the same model and size shares.
#include <cstdio>
#include <filesystem>

#include "executor/comm.hpp"
#include "executor/session.hpp"
#include "executor/weights.hpp"
#include "models/models.hpp"
#include "run/reference_cache.hpp"
#include "tests/catch.hpp"

using namespace hios;

TEST_CASE("the CPU reference of a batch's first image alone is the whole batch's first image, cached as batch 1's",
          "[executor][reference]") {
  const Graph g = build_model("squeezenet", ModelParams{3, 33, 33});
  exec::SessionOptions cpu;
  cpu.backend = "cpu";
  const std::vector<float> input = exec::make_input(g, cpu.seed);
  auto self = exec::make_self_comm();
  const std::vector<float> whole = exec::run_reference(g, cpu, *self, input)->backend().read_tensor(g.output());
  const size_t per = whole.size() / 3;
  REQUIRE(per > 0);

  bool cached = true;
  const std::vector<float> first = exec::first_image_reference(g, cpu, input, "", cpu.seed, &cached);
  CHECK_FALSE(cached);
  REQUIRE(first.size() == per);
  double worst = 0, other = 0;
  for (size_t i = 0; i < per; ++i) {
    worst = std::max(worst, double(std::abs(first[i] - whole[i])));
    other = std::max(other, double(std::abs(first[i] - whole[per + i])));  // the second image
  }
  CHECK(worst <= 1e-5);
  CHECK(other > 1e-3);  // the images differ, so the comparison above can fail

  // Cached under the batch-1 graph's key: a batch-1 run of the same model and size finds it.
  const std::string dir = (std::filesystem::temp_directory_path() / "hios-first-image-refs").string();
  std::filesystem::remove_all(dir);
  const std::vector<float> stored = exec::first_image_reference(g, cpu, input, dir, cpu.seed, &cached);
  CHECK_FALSE(cached);
  CHECK(stored == first);
  const Graph one = build_model("squeezenet", ModelParams{1, 33, 33});
  CHECK(std::filesystem::exists(exec::reference_cache_file(dir, one, cpu.seed)));
  const auto kept = exec::load_reference(dir, one, cpu.seed);
  REQUIRE(kept.has_value());
  CHECK(*kept == first);
  CHECK(exec::first_image_reference(g, cpu, input, dir, cpu.seed, &cached) == first);
  CHECK(cached);
  std::filesystem::remove_all(dir);
}
