// Shared by the scheduler tests: schedules written by hand, group by group.
#pragma once

#include <initializer_list>

#include "graph/graph.hpp"
#include "scheduler/schedule.hpp"
#include "tests/catch.hpp"

namespace hios::test {

// A group of the named nodes, in that order; an unknown name fails the test.
inline Group grp(const Graph& g, std::initializer_list<const char*> names) {
  Group out;
  for (const char* n : names) {
    int i = g.find(n);
    REQUIRE(i >= 0);
    out.nodes.push_back(i);
  }
  return out;
}

}  // namespace hios::test
