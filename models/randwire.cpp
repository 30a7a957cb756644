// RandWire-WS(N=32, K=4, P=0.75) in the two computation regimes of Xie et al. 2019, "Exploring
// Randomly Wired Neural Networks for Image Recognition" (Table 1):
//
//   stage       small (C=78)            regular (C=109)         output at 224
//   conv1       3x3/2 conv, C/2         3x3/2 conv, C/2         112x112
//   conv2       3x3/2 conv, C           random wiring N/2, C    56x56
//   conv3       random wiring N, C      random wiring N, 2C     28x28
//   conv4       random wiring N, 2C     random wiring N, 4C     14x14
//   conv5       random wiring N, 4C     random wiring N, 8C     7x7
//   classifier  1x1 conv 1280, global average pool, fc 1000, softmax
//
// Every stage halves the resolution with a padded 3x3 stride-2 conv, so any positive input size
// is valid (the output side is ceil(side / 2) per stage, never zero); 224 gives the 7x7 above.
//
// Each random stage is one block whose nodes are the graph's N nodes plus one output node. The
// graphs come from our own Watts-Strogatz generator driven by our own PRNG, so one set of
// parameters gives the same graph on every platform and standard library.
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "graph/error.hpp"
#include "models/models.hpp"

namespace hios {

namespace {

// splitmix64 (Steele, Lea and Flood 2014): a tiny, well-mixed generator whose output depends only
// on integer arithmetic, unlike the std:: distributions whose algorithms are unspecified.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, 1) with 53 random bits: exactly representable, so the comparison with P
  // means the same thing everywhere.
  double uniform01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  // Uniform in [0, n). Plain modulo would favour small values; rejecting the top partial range
  // of 2^64 removes that bias.
  int below(int n) {
    const uint64_t un = static_cast<uint64_t>(n);
    const uint64_t limit = UINT64_MAX - (UINT64_MAX % un + 1) % un;  // last accepted value
    uint64_t x;
    do {
      x = next();
    } while (x > limit);
    return static_cast<int>(x % un);
  }

 private:
  uint64_t state_;
};

// An undirected Watts-Strogatz graph as an adjacency matrix (N is small).
struct UndirectedGraph {
  int n = 0;
  std::vector<std::vector<char>> adj;

  explicit UndirectedGraph(int nodes) : n(nodes), adj(nodes, std::vector<char>(nodes, 0)) {}
  void link(int a, int b) { adj[a][b] = adj[b][a] = 1; }
  void unlink(int a, int b) { adj[a][b] = adj[b][a] = 0; }
  int degree(int a) const {
    int d = 0;
    for (char c : adj[a]) d += c;
    return d;
  }
};

// WS(n, k, p): a ring where every node links to its k/2 nearest neighbours on each side; then,
// going round the ring once per neighbour distance j = 1..k/2, the edge from each node u to its
// j-th clockwise neighbour is rewired with probability p to a uniformly chosen node that is
// neither u nor already linked to u. Rewiring keeps the edge count at n*k/2.
UndirectedGraph watts_strogatz(int n, int k, double p, uint64_t seed) {
  HIOS_CHECK(k >= 2 && k % 2 == 0 && n > k, "randwire: WS needs an even K >= 2 below N (got N=%d, K=%d)", n, k);
  HIOS_CHECK(p >= 0 && p <= 1, "randwire: WS needs 0 <= P <= 1 (got %g)", p);
  SplitMix64 rng(seed);
  UndirectedGraph g(n);
  for (int j = 1; j <= k / 2; ++j) {
    for (int u = 0; u < n; ++u) g.link(u, (u + j) % n);
  }
  for (int j = 1; j <= k / 2; ++j) {
    for (int u = 0; u < n; ++u) {
      const int v = (u + j) % n;
      if (!(rng.uniform01() < p)) continue;
      // A node already linked to every other has no legal target: keep its edge (this also
      // keeps the rejection loop below finite).
      if (g.degree(u) >= n - 1) continue;
      int w;
      do {
        w = rng.below(n);
      } while (w == u || g.adj[u][w]);
      g.unlink(u, v);
      g.link(u, w);
    }
  }
  return g;
}

// Fixed seeds, one per random stage, so every stage gets its own independently drawn graph and
// the same build parameters always give the same network. Small regime: 103, 104, 105 for
// conv3..conv5; regular regime: 202, 203, 204, 205 for conv2..conv5 (100 * regime + stage).
constexpr int kNodes = 32;      // N
constexpr int kNeighbours = 4;  // K
constexpr double kRewire = 0.75;  // P

struct RandomStage {
  const char* name;
  int nodes;         // N or N/2
  int64_t channels;  // output channels of every node of the stage
  uint64_t seed;
};

// A node's transformation is the paper's ReLU -> 3x3 separable conv -> BN triplet, scheduled as
// one unit. BN folds into the pointwise conv, which therefore carries the bias.
Op node_transform(int64_t in_channels, int64_t out_channels, int stride) {
  Op op = make_op(OpKind::Sequential);
  op.attrs = SequentialAttrs{{
      activation_op(Activation::Relu),
      conv_op(in_channels, {3, 3}, {stride, stride}, {1, 1}, Activation::None, in_channels, /*bias=*/false),
      conv_op(out_channels, {1, 1}, {1, 1}, {0, 0}, Activation::None, 1, /*bias=*/true),
  }};
  return op;
}

// Builds one random stage as a block reading `in` and returns its output node.
Value random_stage(GraphBuilder& b, Value in, const RandomStage& st) {
  const UndirectedGraph ws = watts_strogatz(st.nodes, kNeighbours, kRewire, st.seed);
  const std::string pre = std::string(st.name) + ".";
  b.begin_block(st.name);
  // Orienting every edge from the lower to the higher index makes the graph acyclic, and the
  // index order is then a topological order, so each node's inputs exist when it is built.
  std::vector<Value> out(st.nodes);
  std::vector<char> has_successor(st.nodes, 0);
  for (int v = 0; v < st.nodes; ++v) {
    // The paper aggregates sum_i sigmoid(w_i) * x_i with learned w_i; at inference these are
    // positive constants. They fold into conv weights only partly: a weight shared by all inputs
    // passes through the ReLU (positively homogeneous) into the depthwise conv, and a producer
    // with a single consumer can absorb its weight into its own pointwise conv and bias.
    // Otherwise a per-input scale stays, fused into the same pass as the sum. We model a plain
    // sum (one term holding every predecessor): MACs, traffic and kernel count are unchanged,
    // and the few scalar weights (one per edge) and one multiply per element are not counted.
    Term preds;
    for (int u = 0; u < v; ++u) {
      if (ws.adj[u][v]) {
        preds.push_back(out[u]);
        has_successor[u] = 1;
      }
    }
    // Input nodes (no predecessor) read the stage input and do the stage's downsampling with a
    // stride-2 depthwise conv; the others stay at the stage's resolution and width.
    const bool is_input = preds.empty();
    const int64_t in_channels = is_input ? b.channels(in) : st.channels;
    if (is_input) preds.push_back(in);
    out[v] = b.node(pre + strprintf("n%02d", v), node_transform(in_channels, st.channels, is_input ? 2 : 1),
                    {preds});
  }
  // The paper's extra output node averages the output nodes (no successor). A sum differs from
  // the average only by the constant 1/count, which folds into the next conv's weights, and the
  // two cost the same, so the stage ends in a plain sum node.
  std::vector<Value> sinks;
  for (int v = 0; v < st.nodes; ++v) {
    if (!has_successor[v]) sinks.push_back(out[v]);
  }
  Value exit = b.sum(pre + "out", sinks);
  b.end_block(exit);
  return exit;
}

struct Regime {
  const char* graph_name;
  int64_t c;
  bool conv2_is_plain;  // small regime: conv2 is a 3x3 conv, not a random stage
  std::vector<RandomStage> stages;
};

Graph build_randwire(const ModelParams& p, const Regime& r) {
  GraphBuilder b(r.graph_name, p.batch, p.height, p.width);
  Value x = b.input(3);

  // The paper does not say how odd C is halved (C=109); we round down.
  const int64_t half = r.c / 2;
  b.begin_block("conv1");
  // In the small regime conv1 feeds only conv2, whose ReLU-conv-BN triplet starts with a ReLU,
  // so the ReLU fuses into conv1. In the regular regime conv1 feeds the first random stage,
  // whose nodes apply their own ReLU.
  x = b.conv("conv1", {x}, half, 3, 2, 1, r.conv2_is_plain ? Activation::Relu : Activation::None);
  b.end_block(x);

  if (r.conv2_is_plain) {
    b.begin_block("conv2");
    x = b.conv("conv2", {x}, r.c, 3, 2, 1, Activation::None);
    b.end_block(x);
  }

  for (const RandomStage& st : r.stages) x = random_stage(b, x, st);

  b.begin_block("classifier");
  // Stage outputs end in BN without a ReLU, hence the leading ReLU; the 1x1 conv is followed by
  // BN (folded) and ReLU (fused).
  Op head = make_op(OpKind::Sequential);
  head.attrs = SequentialAttrs{{activation_op(Activation::Relu),
                                conv_op(1280, {1, 1}, {1, 1}, {0, 0}, Activation::Relu, 1, /*bias=*/true)}};
  x = b.node("classifier.conv", std::move(head), {Term{x}});
  x = b.pool("classifier.pool", x, PoolKind::GlobalAvg);
  x = b.linear("classifier.fc", x, 1000);
  x = b.softmax("classifier.softmax", x);
  b.end_block(x);
  return b.finish();
}

// The regular regime at width c: four random stages (conv2 at half the nodes), widths c to 8c,
// graph seeds seed_base + 2 to seed_base + 5.
Regime regular_regime(const char* name, int64_t c, uint64_t seed_base) {
  return Regime{name,
                c,
                false,
                {{"conv2", kNodes / 2, c, seed_base + 2},
                 {"conv3", kNodes, 2 * c, seed_base + 3},
                 {"conv4", kNodes, 4 * c, seed_base + 4},
                 {"conv5", kNodes, 8 * c, seed_base + 5}}};
}

}  // namespace

Graph build_randwire_small(const ModelParams& p) {
  constexpr int64_t c = 78;
  static const Regime regime{"randwire_small",
                             c,
                             true,
                             {{"conv3", kNodes, c, 103}, {"conv4", kNodes, 2 * c, 104}, {"conv5", kNodes, 4 * c, 105}}};
  return build_randwire(p, regime);
}

Graph build_randwire_regular(const ModelParams& p) {
  static const Regime regime = regular_regime("randwire_regular", 109, 200);
  return build_randwire(p, regime);
}

// The regular regime at C=154, the paper's larger RandWire (Table 3) and the one IOS and HIOS
// evaluate as "randwire_large". Seeds of its own, so its sampled stages are not C=109's.
Graph build_randwire_large(const ModelParams& p) {
  static const Regime regime = regular_regime("randwire_large", 154, 300);
  return build_randwire(p, regime);
}

}  // namespace hios
