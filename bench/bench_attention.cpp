// Attention at depth on the shapes of Qwen3-30B-A3B (32 query heads over 4 KV heads of 128), one
// layer, 2 threads: the op alone, so that its cost per layer can be compared between builds and
// cache types without the rest of the forward pass (a 16-layer model pays it 16 times a token).
//   Decode/KV/DEPTH    one token at position DEPTH (all earlier positions cached)
//   DecodeInPass/KV/DEPTH  the same, per layer, for 16 layers each after a 48 MB weight sweep
//   Prefill/KV/DEPTH   512 tokens at positions DEPTH .. DEPTH + 511 (a pp512@dDEPTH chunk)
// KV: 0 f32, 1 f16, 2 bf16, 3 q8_0. Reported with the minimum over repetitions ("_min"), which is
// the number least disturbed by other processes on a shared machine.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
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

// A forward pass's decode attention: each of kPassLayers layers' attention runs after that layer's
// expert and dense weights (kLayerWeights bytes) were read by both threads, so its KV rows come
// from memory behind a cache full of weights, not from the previous repetition's reads. Only the
// attention calls are timed; reported per layer.
constexpr int kPassLayers = 16;
constexpr size_t kLayerWeights = size_t{48} << 20;

void DecodeInPass(benchmark::State& state) {
  const KvType t = kTypes[state.range(0)];
  const auto depth = static_cast<int>(state.range(1));
  const int n = depth + 1;
  KvCache kv(std::vector<KvLayerShape>(kPassLayers, KvLayerShape{kKvHeads, kDim, kDim, 0}), n,
             KvCacheConfig{t, t, 0});
  kv.reserve(0, n);
  const auto k = randn(static_cast<size_t>(kKvHeads) * kDim, 1);
  auto v = randn(static_cast<size_t>(kKvHeads) * kDim, 2);
  for (int l = 0; l < kPassLayers; ++l)
    for (int p = 0; p < n; ++p) {
      v[p % v.size()] += 0.01f;
      kv.store(0, l, p, k.data(), v.data());
    }
  kv.set_length(0, n);
  std::vector<float> weights(kLayerWeights / sizeof(float), 1.0f);
  std::vector<float> sums(2);
  const auto q = randn(static_cast<size_t>(kHeads) * kDim, 3);
  int32_t seq = 0, pos = depth;
  std::vector<float> out(q.size());
  AttentionParams ap{kHeads, kKvHeads, kDim, kDim, 0.088f, 0, nullptr};
  for (auto _ : state) {
    double seconds = 0;
    for (int l = 0; l < kPassLayers; ++l) {
      pool().parallel_for(2, [&](int64_t b, int64_t e) {
        for (int64_t h = b; h < e; ++h) {
          const size_t half = weights.size() / 2;
          float acc = 0;
          for (size_t i = h * half; i < (h + 1) * half; i += 16) acc += weights[i];
          sums[h] = acc;
        }
      });
      benchmark::DoNotOptimize(sums.data());
      const auto t0 = std::chrono::steady_clock::now();
      attention(pool(), ap, kv, l, q.data(), &seq, &pos, 1, out.data());
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      benchmark::DoNotOptimize(out.data());
    }
    state.SetIterationTime(seconds / kPassLayers);
  }
  state.SetLabel(kv_type_name(t));
}
void Prefill(benchmark::State& state) { run(state, kChunk); }

double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

BENCHMARK(Decode)
    ->ArgsProduct({{0, 1, 3}, {0, 4096, 16384}})
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(5)
    ->ComputeStatistics("min", min_of)
    ->ReportAggregatesOnly(true);
BENCHMARK(DecodeInPass)
    ->ArgsProduct({{1, 3}, {4096, 16384}})
    ->UseManualTime()
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
