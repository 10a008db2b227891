// Chi-squared tests for sampling tests: Pearson goodness of fit and two-sample homogeneity
// with p-values from the regularised incomplete gamma function (no statistics library).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace deltaserve::runtime::testing {

// Regularised upper incomplete gamma Q(a, x) (series below a + 1, Lentz's continued fraction
// above), so the chi-squared p-value is Q(dof / 2, chi2 / 2).
inline double gamma_q(double a, double x) {
  if (x <= 0.0) return 1.0;
  const double log_prefix = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1.0) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 1000 && std::abs(term) > std::abs(sum) * 1e-15; ++n) sum += term *= x / (a + n);
    return 1.0 - sum * std::exp(log_prefix);
  }
  constexpr double kTiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / kTiny, d = 1.0 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::abs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    h *= d * c;
    if (std::abs(d * c - 1.0) < 1e-15) break;
  }
  return std::exp(log_prefix) * h;
}

struct FitResult {
  double chi2 = 0;
  int dof = 0;
  double p_value = 0;
  int64_t num_impossible = 0;  // draws in cells of expected probability 0
};

// Pearson's goodness of fit of counts against probabilities (same cell order).
inline FitResult fit(const std::vector<int64_t>& counts, const std::vector<double>& expected) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  FitResult r;
  int num_cells = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] <= 0.0) {
      r.num_impossible += counts[i];
      continue;
    }
    const double e = expected[i] * static_cast<double>(n);
    r.chi2 += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
    ++num_cells;
  }
  r.dof = num_cells - 1;
  r.p_value = gamma_q(r.dof / 2.0, r.chi2 / 2.0);
  return r;
}

// Two-sample homogeneity: were both histograms drawn from one distribution? Cells empty in
// both are left out; dof = cells - 1.
inline FitResult homogeneity(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  double n_a = 0, n_b = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    n_a += static_cast<double>(a[i]);
    n_b += static_cast<double>(b[i]);
  }
  FitResult r;
  int num_cells = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double cell = static_cast<double>(a[i] + b[i]);
    if (cell == 0.0) continue;
    const double e_a = cell * n_a / (n_a + n_b), e_b = cell * n_b / (n_a + n_b);
    r.chi2 += (a[i] - e_a) * (a[i] - e_a) / e_a + (b[i] - e_b) * (b[i] - e_b) / e_b;
    ++num_cells;
  }
  r.dof = num_cells - 1;
  r.p_value = gamma_q(r.dof / 2.0, r.chi2 / 2.0);
  return r;
}

}  // namespace deltaserve::runtime::testing
