// Small helpers every test suite uses: the message of the hios::Error a call throws, and a
// substring check that reads well inside CHECK().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "graph/error.hpp"

namespace hios::test {

// Runs f and returns the hios::Error message ("" if nothing was thrown).
template <typename F>
std::string error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The mutation fuzzers' generator: splitmix64 from a fixed seed, so a failure reproduces.
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n ? size_t(next() % n) : 0; }
};

}  // namespace hios::test
