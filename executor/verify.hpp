// Comparing a result with a reference: what `hios run --verify`, `hios tune` (every candidate
// against the sequential run and the CPU reference) and the serving checks share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hios::exec {

// How far a result is from a reference: max |a - r| and that divided by max |r| (the error
// relative to the tensor's scale; per-element relative errors explode near zero).
struct Diff {
  double max_abs = 0;
  double max_rel = 0;
  double ref_max = 0;
  int64_t count = 0;    // elements compared
  std::string where;    // worst node (per-node verification)
};
Diff compare(const std::vector<float>& got, const std::vector<float>& ref);

// Documented tolerance on Diff::max_rel for a math mode ("fp32", "tf32", "fp16", "bf16") when comparing a GPU
// result with another result; the CPU backend against itself must match exactly (0).
double tolerance(const std::string& math);

}  // namespace hios::exec
