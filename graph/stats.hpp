// The one median every driver reports (the runner, the in-process bench, the profiler, the
// tuner): the middle value, or the mean of the two middle ones; 0 for no values.
#pragma once

#include <algorithm>
#include <vector>

namespace hios {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace hios
