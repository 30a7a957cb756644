// Catch2 compatibility: Debian 12 (CI) ships Catch2 2.13 with a single header, Ubuntu 24.04
// (the GPU machine) ships Catch2 3 with split headers. Tests include this file only.
#pragma once

#if HIOS_CATCH2_MAJOR == 3
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#endif

#include <string>

// Skipping with a reason: Catch2 3 has SKIP(); 2.13 does not, so there we print the reason and
// return (the test then counts as passed with no assertions, and the reason is in the log).
#if HIOS_CATCH2_MAJOR == 3
#define HIOS_SKIP(reason) SKIP(reason)
#else
#define HIOS_SKIP(reason)                    \
  do {                                       \
    WARN("skipped: " << std::string(reason)); \
    return;                                  \
  } while (0)
#endif
