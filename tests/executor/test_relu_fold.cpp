// ReLU folding on the CPU reference (graph/relu_fold.hpp): the nodes it names store relu(value),
// every other node and the graph output are bit for bit what an unfolded run computes, and the
// ranks of a two-GPU schedule store the same values as one rank.
#include <algorithm>

#include "executor/weights.hpp"
#include "graph/relu_fold.hpp"
#include "tests/catch.hpp"
#include "tests/executor/helpers.hpp"

using namespace hios;

TEST_CASE("relu fold: folded nodes hold relu(value), everything else is unchanged", "[executor][relu]") {
  const Graph g = build_model("nasnet_large", ModelParams{1, 32, 32});
  const std::vector<bool> stored = nodes_storing_relu(g);
  REQUIRE(std::count(stored.begin(), stored.end(), true) > 0);
  const std::vector<float> input = exec::make_input(g);
  const Schedule seq = test::schedule_with("sequential", g, 1);
  exec::BackendConfig off;
  off.fold_relu = false;
  test::LocalJob plain(g, seq, off), folded(g, seq);
  plain.run(input);
  folded.run(input);
  CHECK(folded.backends[0]->read_tensor(g.output()) == plain.backends[0]->read_tensor(g.output()));
  int negatives = 0;  // values the fold changed, so the check below can fail
  for (int v = 1; v < g.size(); ++v) {
    INFO(g.nodes[size_t(v)].name);
    std::vector<float> want = plain.backends[0]->read_tensor(v);
    if (stored[size_t(v)]) {
      for (float& x : want) {
        negatives += x < 0;
        x = std::max(x, 0.f);
      }
    }
    CHECK(folded.backends[0]->read_tensor(v) == want);
  }
  CHECK(negatives > 0);

  // Two ranks: each stores what one rank stores, for every node it launches.
  const Schedule two = test::schedule_with("hios-lp", g, 2);
  test::LocalJob job(g, two);
  job.run(input);
  CHECK(job.backends[0]->read_tensor(g.output()) == folded.backends[0]->read_tensor(g.output()));
  for (size_t r = 0; r < job.programs.size(); ++r) {
    for (int v : job.programs[r].launched) {
      INFO("rank " << r << ": " << g.nodes[size_t(v)].name);
      CHECK(job.backends[r]->read_tensor(v) == folded.backends[0]->read_tensor(v));
    }
  }
}
