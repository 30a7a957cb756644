// One-dimensional minimisation by golden-section search, shared by the fits that tune one
// number at a time (the tuner's calibration, scheduler/preset_fit.cpp).
#pragma once

#include <cmath>

namespace hios {

// The midpoint of the bracket left after `iters` golden-section steps over [lo, hi]: the
// minimiser of f when f is unimodal there. f is called 2 + iters times.
template <class F>
double golden_section_min(F f, double lo, double hi, int iters) {
  const double phi = (std::sqrt(5.0) - 1) / 2;
  double a = hi - phi * (hi - lo), b = lo + phi * (hi - lo);
  double fa = f(a), fb = f(b);
  for (int i = 0; i < iters; ++i) {
    if (fa <= fb) {
      hi = b;
      b = a;
      fb = fa;
      a = hi - phi * (hi - lo);
      fa = f(a);
    } else {
      lo = a;
      a = b;
      fa = fb;
      b = lo + phi * (hi - lo);
      fb = f(b);
    }
  }
  return (lo + hi) / 2;
}

}  // namespace hios
