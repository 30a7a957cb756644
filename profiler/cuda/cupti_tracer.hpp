// GPU busy time per tagged region, from CUPTI's activity API: every kernel, copy and memset
// issued while a tag is pushed is attributed to that tag (CUPTI external correlation), and its
// device-side start and end are summed. CUDA events give a node's wall time on its stream;
// this gives the part of it the GPU was actually running the node's work, without launch gaps.
#pragma once

#include <cstdint>
#include <map>

namespace hios::prof {

struct BusyTime {
  double ms = 0;        // sum of (end - start) of the tag's kernels, copies and memsets
  int64_t records = 0;  // how many there were
};

// One at a time per process (CUPTI's activity callbacks are process-wide). Construction
// enables the activity kinds, destruction disables them and drops what was not collected.
class CuptiTracer {
 public:
  CuptiTracer();
  ~CuptiTracer();
  CuptiTracer(const CuptiTracer&) = delete;
  CuptiTracer& operator=(const CuptiTracer&) = delete;

  void push(uint64_t tag);  // work issued from now on belongs to tag
  void pop();
  // Waits for the device, flushes CUPTI's buffers and returns the busy time per tag since the
  // last collect(); work issued outside any tag is dropped.
  std::map<uint64_t, BusyTime> collect();
};

}  // namespace hios::prof
