// Chunked (WY / UT-transform) gated delta rule, MODEL.md 3.1-3.2, the CPU twin of the GPU
// prefill kernel (kernels/gdn/gdn_prefill.cu). Per value head, chunks of up to kGdnChunkRows
// rows whose edges sit at multiples of kGdnChunkRows from the sequence start (first_position);
// with Gamma the in-chunk cumulative log decay, A_ic = beta_i e^(Gamma_i - Gamma_c) k_i.k_c (c < i):
//   U = (I + A)^-1 (beta V),  W = (I + A)^-1 (beta e^Gamma K)        forward substitution
//   D = U - W S;  O = (e^Gamma Q) S + P D,  P_ic = q_i.k_c e^(Gamma_i - Gamma_c) (c <= i)
//   S <- e^Gamma_n S + (e^(Gamma_n - Gamma) K)^T D
// Exponents are only ever formed as Gamma_i - Gamma_c with c <= i (<= 0): no overflow.
//
// Agreement with the recurrent form: both are f32 chains of the same algebra; they differ by
// the rounding of different summation orders. Each output and state entry is a sum of O(dk + C)
// products of O(1) terms (|k| = 1, |q| = dk^-1/2, |A_ic| <= beta_i <= 1; the solve's growth is
// bounded in practice by the decays, MODEL.md 3.4), so the difference is a few hundred ulps of
// the largest term at most: the tests hold both to a relative error (max |diff| / max |value|)
// of 1e-4 on random inputs, and a real bug (a wrong decay, a missed row, a chunk edge off by
// one) gives errors of order 1.
//
// Order of work per chunk: rows are taken in blocks of kRowBlock so that each state row is
// read once per block (the state, dk x dv f32, is 64 KB at dk = dv = 128: it streams from L2).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/gdn/gated_delta_rule.h"

namespace deltaserve::kernels {
namespace {

constexpr int64_t kC = kGdnChunkRows;
constexpr int64_t kRowBlock = 8;

// One value head's scratch for one chunk, reused across chunks.
struct ChunkScratch {
  std::vector<float> gam, a, p, u, w, kd, kt;
  ChunkScratch(int64_t dk, int64_t dv)
      : gam(kC), a(kC * kC), p(kC * kC), u(static_cast<size_t>(kC * dv)), w(static_cast<size_t>(kC * dk)),
        kd(static_cast<size_t>(kC * dk)), kt(static_cast<size_t>(dk * kC)) {}
};

// dst -= coef * src over n floats.
void sub_scaled(float* dst, float coef, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] -= coef * src[i];
}

// One chunk of rows [t0, t0 + n) for value head j: outputs written, state S updated in place.
void run_chunk(const GatedDeltaRuleArgs& a, int64_t j, int64_t t0, int64_t n, float* S, ChunkScratch& x) {
  const int64_t dk = a.head_dim_k, dv = a.head_dim_v, hv = a.num_v_heads, kh = j % a.num_k_heads;
  auto q_row = [&](int64_t i) { return a.q + (t0 + i) * a.qk_stride + kh * dk; };
  auto k_row = [&](int64_t i) { return a.k + (t0 + i) * a.qk_stride + kh * dk; };
  auto beta = [&](int64_t i) { return a.beta[(t0 + i) * hv + j]; };
  float* gam = x.gam.data();
  float run = 0.0f;
  for (int64_t i = 0; i < n; ++i) run += a.g[(t0 + i) * hv + j], gam[i] = run;

  // K K^T and Q K^T, row i over all columns c at once (the keys transposed, so the inner
  // loop runs over contiguous c), then A (strictly lower) and P (lower, diagonal included)
  // with the decays, formed only for c <= i.
  for (int64_t c = 0; c < kC; ++c) {
    for (int64_t e = 0; e < dk; ++e) x.kt[static_cast<size_t>(e * kC + c)] = c < n ? k_row(c)[e] : 0.0f;
  }
  for (int64_t i = 0; i < n; ++i) {
    float* a_row = x.a.data() + i * kC;
    float* p_row = x.p.data() + i * kC;
    std::fill(a_row, a_row + kC, 0.0f);
    std::fill(p_row, p_row + kC, 0.0f);
    const float* k = k_row(i);
    const float* q = q_row(i);
    for (int64_t e = 0; e < dk; ++e) {
      const float* kt = x.kt.data() + e * kC;
      const float ke = k[e], qe = q[e];
      for (int64_t c = 0; c < kC; ++c) a_row[c] += ke * kt[c], p_row[c] += qe * kt[c];
    }
    for (int64_t c = 0; c <= i; ++c) {
      const float decay = std::exp(gam[i] - gam[c]);
      a_row[c] = c < i ? beta(i) * decay * a_row[c] : 0.0f;
      p_row[c] *= decay;
    }
    std::fill(a_row + i, a_row + kC, 0.0f);  // above the diagonal: never read, kept zero
    std::fill(p_row + i + 1, p_row + kC, 0.0f);
  }
  // Forward substitution: row i of U and W from the rows before it.
  for (int64_t i = 0; i < n; ++i) {
    float* u = x.u.data() + i * dv;
    float* w = x.w.data() + i * dk;
    const float* v = a.v + (t0 + i) * a.v_stride + j * dv;
    const float* k = k_row(i);
    const float bi = beta(i), bw = beta(i) * std::exp(gam[i]);
    for (int64_t c = 0; c < dv; ++c) u[c] = bi * v[c];
    for (int64_t e = 0; e < dk; ++e) w[e] = bw * k[e];
    for (int64_t c = 0; c < i; ++c) {
      const float aic = x.a[i * kC + c];
      sub_scaled(u, aic, x.u.data() + c * dv, dv);
      sub_scaled(w, aic, x.w.data() + c * dk, dk);
    }
  }

  // D = U - W S (into u) and O = (e^Gamma Q) S, a block of rows per pass over S.
  for (int64_t i0 = 0; i0 < n; i0 += kRowBlock) {
    const int64_t rows = std::min(kRowBlock, n - i0);
    float eq[kRowBlock];
    for (int64_t r = 0; r < rows; ++r) {
      eq[r] = std::exp(gam[i0 + r]);
      float* o = a.out + (t0 + i0 + r) * a.out_stride + j * dv;
      std::fill(o, o + dv, 0.0f);
    }
    for (int64_t e = 0; e < dk; ++e) {
      const float* s_row = S + e * dv;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        float* d = x.u.data() + i * dv;
        float* o = a.out + (t0 + i) * a.out_stride + j * dv;
        const float wi = x.w[static_cast<size_t>(i * dk + e)], qi = eq[r] * q_row(i)[e];
        for (int64_t c = 0; c < dv; ++c) d[c] -= wi * s_row[c], o[c] += qi * s_row[c];
      }
    }
  }
  // O += P D, P lower triangular.
  for (int64_t i = 0; i < n; ++i) {
    float* o = a.out + (t0 + i) * a.out_stride + j * dv;
    for (int64_t c = 0; c <= i; ++c) sub_scaled(o, -x.p[i * kC + c], x.u.data() + c * dv, dv);
  }
  // S = e^Gamma_n S + (e^(Gamma_n - Gamma) K)^T D.
  const float gam_n = gam[n - 1], decay_n = std::exp(gam_n);
  for (int64_t i = 0; i < n; ++i) {
    const float scale = std::exp(gam_n - gam[i]);
    const float* k = k_row(i);
    for (int64_t e = 0; e < dk; ++e) x.kd[static_cast<size_t>(i * dk + e)] = scale * k[e];
  }
  for (int64_t e = 0; e < dk; ++e) {
    float* s_row = S + e * dv;
    for (int64_t c = 0; c < dv; ++c) s_row[c] *= decay_n;
    for (int64_t i = 0; i < n; ++i) sub_scaled(s_row, -x.kd[static_cast<size_t>(i * dk + e)], x.u.data() + i * dv, dv);
  }
}

}  // namespace

void gated_delta_rule_chunked(const GatedDeltaRuleArgs& a, const ParallelFor& pf) {
  const int64_t dk = a.head_dim_k, dv = a.head_dim_v;
  // The first chunk ends at the next multiple of kC from the sequence start.
  const int64_t first_len = kC - a.first_position % kC;
  pf.run(a.num_v_heads, [&](int64_t begin, int64_t end) {
    ChunkScratch scratch(dk, dv);
    for (int64_t j = begin; j < end; ++j) {
      float* S = a.state + j * dk * dv;
      for (int64_t t0 = 0; t0 < a.num_tokens;) {
        const int64_t n = std::min(t0 == 0 ? first_len : kC, a.num_tokens - t0);
        run_chunk(a, j, t0, n, S, scratch);
        t0 += n;
      }
    }
  });
}

}  // namespace deltaserve::kernels
