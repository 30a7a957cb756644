// Buffer sharing for rank programs: tensors whose lives cannot overlap share device memory.
//
// A lowered program gives every resident tensor its own allocation. With several streams that
// costs 3-5x the memory of a sequential run, because nothing says when a tensor is dead. The
// planner works that out from the program itself: two tensors X and Y may overlap in memory
// only when every access to one of them (its write, each Launch that reads it, each Send of it)
// is ordered before the write of the other by stream order and Record/Wait events, i.e. the GPU
// cannot run them at the same time whatever the timing. Program order alone is not enough: two
// streams run in any interleaving the events allow.
//
// Passes follow each other whole (the runner synchronises every stream after an eager pass, and
// graph replays on one stream serialise), so lives never wrap around into the next pass, with
// two exceptions that stay out of sharing: tensors no instruction of the pass writes (the graph
// input, written once by set_input) and the graph output (read after the pass). Every node's
// output is read after the pass only under --verify-nodes, which therefore runs unshared.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "executor/program.hpp"

namespace hios::exec {

// Offsets inside one arena are multiples of this (cuDNN and vectorised kernels like 256 B).
constexpr int64_t kArenaAlignment = 256;

struct MemoryPlanOptions {
  // A band of rows is one run of bytes (NHWC at batch 1), so a `rows` node of a row split may
  // hold its operands in place and a cut of one operand's rows may be a view of it: the
  // planner then puts tensors that are bands of one tensor at the addresses of their rows in
  // it (RankProgram::row_groups), and the rows' copies become no-ops. Only for a backend whose
  // storage has that property (memory_plan_options).
  bool rows_in_place = false;
  // A reshape whose input and output both hold their elements in row-major order is a view of
  // its input: the planner puts both at one address and the copy becomes a no-op. So is a
  // gather of one constant index along an axis after dims of 1 (Q, K and V taken from one
  // packed projection), at that index's bytes (RankProgram::views). A transformer's graph has
  // a dozen such nodes per layer.
  bool views = false;
  // Rank-4 tensors are stored channels-last, which is row-major order only where C or H x W is 1.
  bool nhwc = false;
};
// The options for a backend storing activations in `layout` ("nchw" or "nhwc") for graph g.
MemoryPlanOptions memory_plan_options(const std::string& layout, const Graph& g);

// Assigns every Alloc of p an offset into one arena and sets p.arena_bytes: first fit, with the
// tensors taken in the order they are written and, separately, largest first; the smaller arena
// is kept. Tensors of one row group (rows_in_place) are placed as one. Deterministic; calling it
// again changes nothing.
void share_buffers(const Graph& g, RankProgram& p, const MemoryPlanOptions& opt = {});

// Checks a shared plan: offsets inside the arena and aligned, pinned tensors alone, every
// pair of tensors that overlap in memory ordered as above unless they are bands of one row group
// at the addresses of their rows or a view inside its input at its offset, and in a row group every row written by at most one
// instruction that is not an in-place copy. It derives the ordering by a search
// over the program's stream and event edges, independently of the planner's vector clocks, so
// the tests can hold one against the other. One line per violation; empty when sound.
std::vector<std::string> check_shared_buffers(const Graph& g, const RankProgram& p);

// What a plan's row groups save: of the `rows` nodes the rank launches, how many copy nothing
// (every row already where they write it) and how many bytes the rest copy (float32 bytes).
struct RowsCopies {
  int launched = 0, in_place = 0;
  int64_t bytes_copied = 0;
};
RowsCopies rows_copies(const Graph& g, const RankProgram& p);
// "rows copies: 91 of 95 in place (2.1 MB still copied)", or "" without rows nodes.
std::string rows_copies_summary(const Graph& g, const RankProgram& p);

// "the tensor arena shared by N tensors (largest: tensor 'x' (1x64x56x56), 802816 bytes)": what
// an out-of-memory message names, since the largest tensor is the one a user can shrink.
std::string arena_description(const Graph& g, const RankProgram& p);

// share_buffers, then check_shared_buffers; a failed check is an internal error (thrown), since
// running an unsound plan would be a silent race. What hios run and the in-process runner call.
void plan_and_check_shared_buffers(const Graph& g, RankProgram& p, const MemoryPlanOptions& opt = {});

}  // namespace hios::exec
