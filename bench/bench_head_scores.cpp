// Gated multi-head key scores (quant/head_scores.h) on the shapes of DeepSeek V4's lightning
// indexer (64 heads × 128, one key per 4 positions), one query, one thread: the kernel on stored
// rows against what the indexer did before it, converting every stored key to floats and then
// one f32 dot per (key, head).
//   Kernel/KV/KEYS     gated_head_scores on KEYS stored rows
//   Widened/KV/KEYS    dequantize every row, then a vec_dot per (key, head)
// KV: 0 f32, 1 f16, 2 q8_0. KEYS 2048, 8192, 16384 are depths 8k, 32k and 64k.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "kv/kv_cache.h"
#include "quant/dispatch.h"
#include "quant/head_scores.h"

using namespace sluice;

namespace {

constexpr int kHeads = 64, kDim = 128;
constexpr KvType kTypes[] = {KvType::kF32, KvType::kF16, KvType::kQ8_0};

struct Rows {
  std::vector<std::byte> bytes;
  std::vector<const std::byte*> rows;
};

const Rows& rows(KvType t, int n) {
  static std::map<std::pair<int, int>, Rows> all;
  Rows& r = all[{static_cast<int>(t), n}];
  if (r.rows.empty()) {
    std::mt19937 g(3);
    std::normal_distribution<float> d;
    std::vector<float> x(kDim);
    const uint64_t rb = kv_head_bytes(t, kDim);
    r.bytes.resize(rb * n);
    for (int i = 0; i < n; ++i) {
      for (float& v : x) v = d(g);
      kv_store_head(t, x.data(), kDim, r.bytes.data() + rb * i);
      r.rows.push_back(r.bytes.data() + rb * i);
    }
  }
  return r;
}

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

void Kernel(benchmark::State& st) {
  const KvType t = kTypes[st.range(0)];
  const int n = static_cast<int>(st.range(1));
  const Rows& r = rows(t, n);
  const std::vector<float> q = randn(kHeads * kDim, 1), w = randn(kHeads, 2);
  std::vector<float> s(n);
  const HeadScoresFn f = gated_head_scores(kv_storage_type(t));
  for (auto _ : st) {
    f(kDim, r.rows.data(), n, q.data(), kHeads, w.data(), s.data());
    benchmark::DoNotOptimize(s.data());
  }
}

void Widened(benchmark::State& st) {
  const KvType t = kTypes[st.range(0)];
  const int n = static_cast<int>(st.range(1));
  const Rows& r = rows(t, n);
  const std::vector<float> q = randn(kHeads * kDim, 1), w = randn(kHeads, 2);
  std::vector<float> s(n), keys(static_cast<size_t>(n) * kDim);
  const VecDotFn dot = dot_kernels(GgmlType::F32).vec_dot;
  std::vector<const float*> k(n);
  for (int b = 0; b < n; ++b)
    k[b] = t == KvType::kF32 ? reinterpret_cast<const float*>(r.rows[b]) : keys.data() + b * kDim;
  for (auto _ : st) {
    if (t != KvType::kF32)  // f32 rows were read in place
      for (int b = 0; b < n; ++b) kv_load_head(t, r.rows[b], kDim, keys.data() + b * kDim);
    for (int b = 0; b < n; ++b) {
      float acc = 0.0f;
      for (int h = 0; h < kHeads; ++h)
        acc += w[h] * std::max(0.0f, dot(kDim, k[b], q.data() + h * kDim));
      s[b] = acc;
    }
    benchmark::DoNotOptimize(s.data());
  }
}

void args(benchmark::internal::Benchmark* b) {
  for (int t = 0; t < 3; ++t)
    for (int n : {2048, 8192, 16384}) b->Args({t, n});
  b->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(Kernel)->Apply(args);
BENCHMARK(Widened)->Apply(args);
BENCHMARK_MAIN();
