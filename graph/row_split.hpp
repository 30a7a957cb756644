// Row splits (docs/row-splits.md): one operator's output rows computed on several
// GPUs. A split is a rewrite of the graph, so every later layer (the searches, the cost model,
// lowering, the transports, the memory plan, the backends) sees ordinary nodes:
//
//  * a region is a run of consecutive blocks whose every node reads a bounded band of rows
//    (convolutions, pools, element-wise ops, concats); it becomes one block;
//  * each node X of a region becomes P parts "X@k", each a band of X's rows (conv and pool
//    carry the band in their RowWindow, so padding and windows stay those of the whole tensor);
//  * a part's input is assembled by a `rows` node from the producer's part and, in halo mode,
//    the boundary rows cut from the neighbouring parts ("X@j>k:a-b", the halo); in recompute
//    mode each part computes the overlap itself, so nothing moves inside the region;
//  * the region's last node keeps its name: a `rows` node gathers its parts into the whole
//    tensor for the blocks after it;
//  * or the region ends in a global average pool (its last block's first global pool): each
//    part is a partial pool (sum of its rows over the whole tensor's size), an `add` keeping
//    the pool's name sums them, and the nodes after it in that block stay whole.
//
// A schedule that splits rows records its SpatialPlan in meta.spatial; `load_schedule` applies
// it to the graph the user passes, so the schedule's node names are those of the split graph.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace hios {

// halo: every node's rows are partitioned, boundary rows are sent; recompute: each part computes
// the overlap its consumers read, nothing moves inside the region; mixed: recompute between sync
// points (block exits, every few blocks) whose rows are partitioned, halos sent only there.
enum class SplitMode { Halo, Recompute, Mixed };
const char* split_mode_name(SplitMode m);

struct SplitRegion {
  std::string first_block, last_block;
  int parts = 2;
  SplitMode mode = SplitMode::Halo;
  // For every split node of the region, the rows each part computes (one range per part). The
  // last node's ranges, and in halo mode every node's, partition the node's rows in part order;
  // in recompute mode an inner node's ranges overlap by what its consumers' windows need. For a
  // global average pool that ends the region: the rows of its input each partial pool sums,
  // always a partition. The nodes after that pool have no entry (they are not split).
  std::map<std::string, std::vector<RowRange>> rows;
  // Halo mode only: every part computes its rows in up to three pieces ("X@k/top", "X@k/mid",
  // "X@k/bottom"). The edges hold the rows whose windows read a neighbour's halo and the rows
  // a neighbour reads as its halo; the middle needs and sends no halo, so it runs while the
  // halos are in flight, and a halo is sent as soon as the edge holding it is computed.
  bool overlap = false;
};

struct SpatialPlan {
  std::vector<SplitRegion> regions;
  bool empty() const { return regions.empty(); }
};

// Whether blocks [first, last] of g can form one region split `parts` ways; `why` gets the
// reason when not (a node that reads every row other than a global average pool in the last
// block, a global max pool there, a node after the pool that reads a split node, a node read
// from after the region other than its last block's exit, a node with fewer rows than parts).
bool region_legal(const Graph& g, int first, int last, int parts, std::string* why = nullptr);
// Maximal runs of consecutive blocks that are legal regions for `parts` parts, in block order;
// a run may end in the block of a global average pool.
std::vector<std::pair<int, int>> splittable_runs(const Graph& g, int parts);
// The rows of every node of blocks [first, last] for `parts` parts: even bands of every node
// (halo), or even bands of the last node and, backwards, the rows each part's consumers read
// (recompute).
// Mixed: the exits of blocks last, last - sync_every, last - 2 * sync_every, ... are the sync
// points (sync_every >= 1; ignored by the other modes).
SplitRegion plan_region(const Graph& g, int first, int last, int parts, SplitMode mode, int sync_every = 1);
// The blocks whose exits sync every `sync_every` blocks, counted back from `last`, in order.
std::vector<int> sync_blocks_every(int first, int last, int sync_every);
// Mixed mode with the sync points at the exits of `sync_blocks` (block indices in [first,
// last]; the region's last node is partitioned whatever they are).
SplitRegion plan_region_synced(const Graph& g, int first, int last, int parts, const std::vector<int>& sync_blocks);

// What the choice of sync points weighs, in ms: a node of g alone on a GPU, and one message of
// `bytes` between neighbouring parts (a link's latency plus bytes over its bandwidth).
struct SyncCosts {
  std::function<double(int node)> node_ms;
  std::function<double(double bytes)> transfer_ms;
};
// The busiest part's time in a mixed split of blocks [first, last] syncing at the exits of
// `sync_blocks`: its share of every split node's time (the rows it computes, overlap included,
// over the node's rows), plus one message per neighbour for each tensor it reads partitioned
// (a sync point, or the region's input, held by part 0) carrying the rows beyond its own.
double mixed_split_estimate_ms(const Graph& g, int first, int last, int parts, const std::vector<int>& sync_blocks,
                               const SyncCosts& costs);
// The sync points where the halos are cheapest: from a sync point at every block exit, drop
// the one whose removal lowers mixed_split_estimate_ms most, while one does. A sync point goes
// where recomputing the overlap through the layers before it costs less than its halo messages
// (a link latency each, plus the rows' bytes); one whose removal would widen the overlap of
// many costly layers stays. Sorted, `last` always included.
std::vector<int> sync_blocks_by_cost(const Graph& g, int first, int last, int parts, const SyncCosts& costs);

// Every violation of `plan` against g, one line each naming the node and the rows: unknown or
// overlapping regions, illegal regions, missing or foreign nodes, rows outside a node, rows
// computed (or, for a global pool's input, summed) by two parts or by none, rows for a node
// after the pool, an overlap too small for a consumer's window (recompute).
std::vector<std::string> check_spatial(const Graph& g, const SpatialPlan& plan);
// The split graph. Throws hios::Error with the first violation of check_spatial.
Graph apply_spatial(const Graph& g, const SpatialPlan& plan);

json spatial_to_json(const SpatialPlan& plan);
SpatialPlan spatial_from_json(const json& j, const std::string& path);
// One line per region, e.g. "rows of Conv2d_1a_3x3 .. maxpool2 (7 nodes) split 2 ways, halo".
std::string describe_spatial(const Graph& g, const SpatialPlan& plan);
// Whether `rows` node v only re-addresses bands of one tensor: at batch 1, every operand a whole
// tensor of v's channels and width. On storage where a band of rows is one run of memory (NHWC)
// the memory plan holds such bands in place (executor/memory_plan.hpp), so v copies nothing and
// the cost models charge it nothing.
bool rows_copy_is_view(const Graph& g, int v);

// What a split graph moves and copies: parts, halo cuts (and their bytes), input assemblies,
// gathers and sums of partial pools, e.g. "38 parts, 12 halo cuts (1.200 MB), 14 input
// assemblies, 1 gathers, 0 sums of partial pools".
std::string split_graph_stats(const Graph& split);

// What a node of a split graph is, read from the name apply_spatial gave it: the one reader of
// those names. "X@k" is part k of node X; "X@k/top", "X@k/mid", "X@k/bottom" the pieces of an
// overlapping part; "X@k:a-b" (or "X@k[cA-B]:a-b", a channel slice) the input assembly of part
// k; "X@j>k:a-b" a halo cut from part j for part k. Anything else is Other.
struct SplitName {
  enum class Kind { Other, Part, Piece, Assembly, HaloCut };
  Kind kind = Kind::Other;
  std::string base;   // X
  int part = -1;      // k; for a halo cut, j (the part it is cut from)
  std::string piece;  // a piece's "/top", "/mid" or "/bottom"
  bool of_part() const { return kind != Kind::Other; }
  std::string part_name() const;  // "X@k"
};
SplitName parse_split_name(const std::string& name);

}  // namespace hios
