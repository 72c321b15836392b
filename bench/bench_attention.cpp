// Attention at depth on the shapes of Qwen3-30B-A3B (32 query heads over 4 KV heads of 128), one
// layer, 2 threads: the op alone, so that its cost per layer can be compared between builds and
// cache types without the rest of the forward pass (a 16-layer model pays it 16 times a token).
//   Decode/KV/DEPTH    one token at position DEPTH (all earlier positions cached)
//   Prefill/KV/DEPTH   512 tokens at positions DEPTH .. DEPTH + 511 (a pp512@dDEPTH chunk)
// KV: 0 f32, 1 f16, 2 bf16, 3 q8_0. Reported with the minimum over repetitions ("_min"), which is
// the number least disturbed by other processes on a shared machine.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "ops/attention.h"

using namespace sluice;

namespace {

constexpr int kHeads = 32, kKvHeads = 4, kDim = 128, kChunk = 512;
constexpr KvType kTypes[] = {KvType::kF32, KvType::kF16, KvType::kBF16, KvType::kQ8_0};

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// One cache per (type, depth), holding depth + kChunk random positions.
KvCache& cache(KvType t, int depth) {
  static std::map<std::pair<int, int>, std::unique_ptr<KvCache>> caches;
  auto& c = caches[{static_cast<int>(t), depth}];
  if (!c) {
    const int n = depth + kChunk;
    c = std::make_unique<KvCache>(std::vector<KvLayerShape>{{kKvHeads, kDim, kDim, 0}}, n,
                                  KvCacheConfig{t, t, 0});
    c->reserve(0, n);
    const auto k = randn(static_cast<size_t>(kKvHeads) * kDim, 1);
    auto v = randn(static_cast<size_t>(kKvHeads) * kDim, 2);
    for (int p = 0; p < n; ++p) {
      v[p % v.size()] += 0.01f;  // rows differ without generating n random rows
      c->store(0, 0, p, k.data(), v.data());
    }
    c->set_length(0, n);
  }
  return *c;
}

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

void run(benchmark::State& state, int n_tok) {
  const KvType t = kTypes[state.range(0)];
  const auto depth = static_cast<int>(state.range(1));
  KvCache& kv = cache(t, depth);
  const auto q = randn(static_cast<size_t>(n_tok) * kHeads * kDim, 3);
  std::vector<int32_t> seq(n_tok, 0), pos(n_tok);
  for (int i = 0; i < n_tok; ++i) pos[i] = depth + i;
  std::vector<float> out(q.size());
  AttentionParams ap{kHeads, kKvHeads, kDim, kDim, 0.088f, 0, nullptr};
  for (auto _ : state) {
    attention(pool(), ap, kv, 0, q.data(), seq.data(), pos.data(), n_tok, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(kv_type_name(t));
}

void Decode(benchmark::State& state) { run(state, 1); }
void Prefill(benchmark::State& state) { run(state, kChunk); }

double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

BENCHMARK(Decode)
    ->ArgsProduct({{0, 1, 3}, {0, 4096, 16384}})
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(5)
    ->ComputeStatistics("min", min_of)
    ->ReportAggregatesOnly(true);
BENCHMARK(Prefill)
    ->ArgsProduct({{0, 1}, {0, 4096, 16384}})
    ->Unit(benchmark::kMillisecond)
    ->Repetitions(3)
    ->ComputeStatistics("min", min_of)
    ->ReportAggregatesOnly(true);

BENCHMARK_MAIN();
