// `hios run --trace FILE`: one measured pass as a Chrome/Perfetto timeline, in the layout of
// `hios trace` (one process per GPU with a thread per stream, one process "links" with a
// thread per directed GPU pair), so a prediction and a measurement open side by side.
//
// The pass is issued eagerly with a timing marker before and after every launch, send and
// receive, on the instruction's own stream; times are relative to a marker on stream 0 when
// the pass starts, on every rank after a barrier. Markers cost a few microseconds each, so the
// traced pass is a little slower than the timed ones; its purpose is where time goes.
#pragma once

#include <string>

#include "executor/session.hpp"

namespace hios::exec {

// Collective. Returns the trace JSON on rank 0 and "" elsewhere.
std::string trace_one_pass(RankSession& session);

}  // namespace hios::exec
