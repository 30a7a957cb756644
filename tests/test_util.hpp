// Small helpers every test suite uses: the message of the hios::Error a call throws, and a
// substring check that reads well inside CHECK().
#pragma once

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

}  // namespace hios::test
