// Absorbed multi-head latent attention (model/archs/mla.h) against the naive formulation on random
// weights: keys and values decompressed per head (k_nope = W_kbᵀ·c, v = W_vb·c), concatenated
// with the rope parts and attended in double precision. Covers a prefill batch holding two
// sequences, then single-token decode steps that read the latent cache written before.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/archs/mla.h"
#include "ops/elementwise.h"
#include "ops/rope.h"

using namespace sluice;

namespace {

class NoExperts final : public ExpertStore {
 public:
  void begin(int, std::span<const int32_t>) override { ADD_FAILURE() << "MLA touched the expert store"; }
  bool next(int*, ExpertWeights*) override { return false; }
  void end() override {}
  std::string describe() const override { return "none"; }
};

struct Dims {
  int n_embd = 24, n_head = 3, q_lora = 20, kv_lora = 16, nope = 8, n_rot = 4, dv = 6;
};

// Owns random F32 weights and hands out tensor views of them.
struct RandomWeights {
  std::mt19937 gen{1234};
  std::vector<std::vector<float>> store;
  Tensor make(int64_t n0, int64_t n1, int64_t n2, float scale, float offset = 0.0f) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float>& v = store.emplace_back(n0 * n1 * n2);
    for (auto& x : v) x = offset + scale * d(gen);
    Tensor t;
    t.type = GgmlType::F32;
    t.ne = {n0, n1, n2, 1};
    t.data = reinterpret_cast<const std::byte*>(v.data());
    return t;
  }
};

float at(const Tensor& t, int64_t i0, int64_t i1, int64_t i2 = 0) {
  return t.f32()[(i2 * t.ne[1] + i1) * t.ne[0] + i0];
}

// y = W·x for a 2-D tensor (n_in, n_out).
std::vector<double> matvec(const Tensor& w, const std::vector<double>& x) {
  std::vector<double> y(w.ne[1], 0.0);
  for (int64_t o = 0; o < w.ne[1]; ++o)
    for (int64_t i = 0; i < w.ne[0]; ++i) y[o] += at(w, i, o) * x[i];
  return y;
}

std::vector<double> rms(const std::vector<double>& x, const Tensor& w, float eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double s = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * w.f32()[i];
  return y;
}

// Rotates `n` values at `v` with the engine's RoPE (a checked op of its own; here it only has to
// be the same rotation on both sides).
void rotate(const RopeCache& rope, double* v, int n, int32_t pos) {
  std::vector<float> f(v, v + n);
  rope.apply(f.data(), 1, n, pos);
  for (int i = 0; i < n; ++i) v[i] = f[i];
}

struct Token {
  std::vector<double> q;     // (n_head, nope+n_rot), rope applied
  std::vector<double> k;     // (n_head, nope+n_rot): decompressed nope part + shared rope key
  std::vector<double> v;     // (n_head, dv)
};

Token naive_token(const Dims& d, const MlaWeights& w, const MlaConfig& c, const float* x, int32_t pos) {
  const int hq = d.nope + d.n_rot;
  Token tk;
  std::vector<double> xd(x, x + d.n_embd);
  std::vector<double> xn = rms(xd, w.norm, c.eps);
  tk.q = w.wq_a ? matvec(w.wq_b, rms(matvec(w.wq_a, xn), w.q_a_norm, c.eps)) : matvec(w.wq, xn);
  std::vector<double> kv = matvec(w.wkv_a, xn);
  std::vector<double> lat(kv.begin(), kv.begin() + d.kv_lora);
  lat = rms(lat, w.kv_a_norm, c.eps);
  std::vector<double> k_pe(kv.begin() + d.kv_lora, kv.end());
  rotate(*c.rope, k_pe.data(), d.n_rot, pos);
  tk.k.assign(d.n_head * hq, 0.0);
  tk.v.assign(d.n_head * d.dv, 0.0);
  for (int h = 0; h < d.n_head; ++h) {
    rotate(*c.rope, tk.q.data() + h * hq + d.nope, d.n_rot, pos);
    for (int i = 0; i < d.nope; ++i)
      for (int r = 0; r < d.kv_lora; ++r) tk.k[h * hq + i] += at(w.wk_b, i, r, h) * lat[r];
    for (int i = 0; i < d.n_rot; ++i) tk.k[h * hq + d.nope + i] = k_pe[i];
    for (int j = 0; j < d.dv; ++j)
      for (int r = 0; r < d.kv_lora; ++r) tk.v[h * d.dv + j] += at(w.wv_b, r, j, h) * lat[r];
  }
  return tk;
}

// x + Wo·attention of the last token over `hist` (all tokens of its sequence so far).
std::vector<double> naive_out(const Dims& d, const MlaWeights& w, const MlaConfig& c, const float* x,
                              const std::vector<Token>& hist) {
  const int hq = d.nope + d.n_rot;
  const Token& cur = hist.back();
  std::vector<double> o(d.n_head * d.dv, 0.0);
  for (int h = 0; h < d.n_head; ++h) {
    std::vector<double> s(hist.size());
    double mx = -INFINITY, sum = 0;
    for (size_t p = 0; p < hist.size(); ++p) {
      double dot = 0;
      for (int i = 0; i < hq; ++i) dot += cur.q[h * hq + i] * hist[p].k[h * hq + i];
      s[p] = dot * c.scale;
      mx = std::max(mx, s[p]);
    }
    for (auto& e : s) sum += (e = std::exp(e - mx));
    for (size_t p = 0; p < hist.size(); ++p)
      for (int j = 0; j < d.dv; ++j) o[h * d.dv + j] += s[p] / sum * hist[p].v[h * d.dv + j];
  }
  std::vector<double> out = matvec(w.wo, o);
  for (int i = 0; i < d.n_embd; ++i) out[i] += x[i];
  return out;
}

// q_lora: the query goes through attn_q_a → norm → attn_q_b (V3), else one attn_q (V2-Lite).
void check_absorbed_equals_decompressed(bool q_lora) {
  const Dims d;
  RandomWeights rw;
  MlaWeights w;
  w.norm = rw.make(d.n_embd, 1, 1, 0.1f, 1.0f);
  if (q_lora) {
    w.wq_a = rw.make(d.n_embd, d.q_lora, 1, 0.3f);
    w.q_a_norm = rw.make(d.q_lora, 1, 1, 0.1f, 1.0f);
    w.wq_b = rw.make(d.q_lora, d.n_head * (d.nope + d.n_rot), 1, 0.3f);
  } else {
    w.wq = rw.make(d.n_embd, d.n_head * (d.nope + d.n_rot), 1, 0.3f);
  }
  w.wkv_a = rw.make(d.n_embd, d.kv_lora + d.n_rot, 1, 0.3f);
  w.kv_a_norm = rw.make(d.kv_lora, 1, 1, 0.1f, 1.0f);
  w.wk_b = rw.make(d.nope, d.kv_lora, d.n_head, 0.3f);
  w.wv_b = rw.make(d.kv_lora, d.dv, d.n_head, 0.3f);
  w.wo = rw.make(d.n_head * d.dv, d.n_embd, 1, 0.3f);

  RopeParams rp;
  rp.n_rot = d.n_rot;
  RopeCache rope(rp, nullptr);
  MlaConfig c;
  c.n_head = d.n_head;
  c.kv_lora = d.kv_lora;
  c.nope = d.nope;
  c.n_rot = d.n_rot;
  c.head_dim_v = d.dv;
  c.scale = 1.0f / std::sqrt(static_cast<float>(d.nope + d.n_rot));
  c.rope = &rope;

  ThreadPool pool(2);
  NoExperts experts;
  KvCache kv({{1, mla_cache_width(c), 0, 0}}, 16);
  std::vector<std::vector<Token>> hist(2);
  std::mt19937 gen(99);
  std::normal_distribution<float> nd;

  // Step 0: seq 0 positions 0..2 and seq 1 positions 0..1 in one batch; then decode steps.
  std::vector<Batch> steps(3);
  for (int p = 0; p < 3; ++p) steps[0].add(0, p, 0, true);
  for (int p = 0; p < 2; ++p) steps[0].add(0, p, 1, true);
  steps[1].add(0, 3, 0, true);
  steps[2].add(0, 2, 1, true);
  steps[2].add(0, 4, 0, true);

  for (const Batch& b : steps) {
    const int64_t n_tok = b.size();
    std::vector<float> x(n_tok * d.n_embd);
    for (auto& v : x) v = nd(gen);
    const std::vector<float> x0 = x;
    for (int64_t t = 0; t < n_tok; ++t) kv.reserve(b.seq[t], b.pos[t] + 1);
    ForwardContext ctx{pool, b, kv, experts, n_tok, nullptr};
    mla_attention_block(ctx, 0, w, c, x.data());
    for (int64_t t = 0; t < n_tok; ++t) {
      const float* xt = x0.data() + t * d.n_embd;
      auto& h = hist[b.seq[t]];
      h.push_back(naive_token(d, w, c, xt, b.pos[t]));
      const std::vector<double> ref = naive_out(d, w, c, xt, h);
      for (int i = 0; i < d.n_embd; ++i) {
        ASSERT_NEAR(x[t * d.n_embd + i], ref[i], 1e-4 * (1.0 + std::abs(ref[i])))
            << "token " << t << " (seq " << b.seq[t] << ", pos " << b.pos[t] << ") dim " << i;
      }
    }
    for (int64_t t = 0; t < n_tok; ++t) kv.set_length(b.seq[t], std::max(kv.length(b.seq[t]), b.pos[t] + 1));
  }
}

TEST(Mla, AbsorbedEqualsDecompressedWithQueryLora) { check_absorbed_equals_decompressed(true); }
TEST(Mla, AbsorbedEqualsDecompressedWithPlainQuery) { check_absorbed_equals_decompressed(false); }

}  // namespace
