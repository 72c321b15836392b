// Matmul throughput on a 2048 x 768 Q4_K matrix (one Qwen3-30B-A3B expert projection): GB/s of
// weights streamed, scalar (isa:0) vs AVX2 (isa:1) vs AVX-512 (isa:2) in one run, with the
// AVX2/scalar and AVX-512/AVX2 ratios printed at the end.
// Decode is bound by weight bandwidth, so GB/s is the number that predicts tokens per second:
//   VecDot   one thread, dot of every row with one activation row; the matrix stays in L2.
//   Matmul   the op on the pool, 1 token (decode) to 512 (prefill), the counts around the GEMM
//            threshold in between; the matrix (0.84 MiB) stays in cache between iterations.
//   Cold     the op with 1, 2, 4, 8 and 32 tokens (expert batches) over 256 MiB of distinct
//            matrices, so weights come from DRAM.
//   Types    VecDot for the other types with AVX2 kernels (same shape), for comparison.
//   TypesMatmul  the op on one thread with 64 tokens for those types, AVX2 vs AVX-512 GEMM.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/aligned.h"
#include "core/thread_pool.h"
#include "ops/matmul.h"
#include "quant/blocks.h"
#include "quant/dequant.h"

using namespace sluice;

namespace {

constexpr int64_t kIn = 2048;
constexpr int64_t kOut = 768;
const uint64_t kRowBytes = row_bytes(GgmlType::Q4_K, kIn);
const uint64_t kMatBytes = kRowBytes * kOut;
constexpr uint64_t kColdBytes = 256ull << 20;

// Random quant bits with sane half scales, like a real Q4_K tensor as far as the kernel can tell.
void fill_q4k(std::byte* p, uint64_t n_blocks, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  for (uint64_t b = 0; b < n_blocks; ++b) {
    auto* blk = reinterpret_cast<BlockQ4K*>(p + b * sizeof(BlockQ4K));
    for (auto& s : blk->scales) s = static_cast<uint8_t>(byte(rng));
    for (auto& q : blk->qs) q = static_cast<uint8_t>(byte(rng));
    blk->d = fp32_to_fp16(scale(rng));
    blk->dmin = fp32_to_fp16(scale(rng));
  }
}

// The other benchmarked types: random bits, then their half scales (byte offsets within the
// block) overwritten with sane values; MXFP4's exponent byte is set to a mid-range power of two.
struct TypeCase {
  GgmlType type;
  std::vector<int> half_scale_offsets;
};
const TypeCase kTypeCases[] = {
    {GgmlType::Q8_0, {0}},      {GgmlType::Q4_0, {0}},   {GgmlType::MXFP4, {}},
    {GgmlType::Q2_K, {80, 82}}, {GgmlType::Q3_K, {108}}, {GgmlType::Q5_K, {0, 2}},
    {GgmlType::Q6_K, {208}},    {GgmlType::IQ4_XS, {0}},  {GgmlType::IQ2_XXS, {0}},
    {GgmlType::IQ3_XXS, {0}},
};

AlignedBuffer random_matrix(const TypeCase& tc, std::mt19937& rng) {
  const TypeTraits& tt = type_traits(tc.type);
  const uint64_t bytes = row_bytes(tc.type, kIn) * kOut;
  AlignedBuffer b(bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  for (uint64_t i = 0; i < bytes; ++i) b.data()[i] = static_cast<std::byte>(byte(rng));
  for (uint64_t blk = 0; blk < bytes / tt.block_bytes; ++blk) {
    std::byte* p = b.data() + blk * tt.block_bytes;
    if (tc.type == GgmlType::MXFP4) p[0] = static_cast<std::byte>(120);
    for (int off : tc.half_scale_offsets) {
      const uint16_t h = fp32_to_fp16(scale(rng));
      std::memcpy(p + off, &h, 2);
    }
  }
  return b;
}

const AlignedBuffer& hot_matrix() {
  static AlignedBuffer buf = [] {
    AlignedBuffer b(kMatBytes);
    std::mt19937 rng(1);
    fill_q4k(b.data(), kMatBytes / sizeof(BlockQ4K), rng);
    return b;
  }();
  return buf;
}

std::vector<float> activations(int64_t n_tokens) {
  std::mt19937 rng(2);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kIn * n_tokens));
  for (auto& v : x) v = g(rng);
  return x;
}

// Kernel-set argument: 0 scalar, 1 AVX2, 2 AVX-512 (the AVX2 kernels plus the VNNI GEMM).
Isa isa_arg(benchmark::State& st) {
  return st.range(0) == 2 ? Isa::Avx512 : st.range(0) == 1 ? Isa::Avx2 : Isa::Scalar;
}

bool skip_unsupported(benchmark::State& st) {
  if (isa_arg(st) == Isa::Avx2 && !cpu_has_avx2()) {
    st.SkipWithError("CPU lacks AVX2/FMA/F16C");
    return true;
  }
  if (isa_arg(st) == Isa::Avx512 && !cpu_has_avx512()) {
    st.SkipWithError("CPU lacks AVX-512 F/BW/VL/VNNI");
    return true;
  }
  return false;
}

void set_rate(benchmark::State& st, uint64_t bytes_per_iter) {
  st.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(bytes_per_iter) * static_cast<double>(st.iterations()),
                         benchmark::Counter::kIsRate);
}

void BM_VecDot(benchmark::State& st) {
  if (skip_unsupported(st)) return;
  const DotKernels k = dot_kernels(GgmlType::Q4_K, isa_arg(st));
  const auto x = activations(1);
  std::vector<BlockQ8K> xq(kIn / kQKK);
  k.quantize(x.data(), xq.data(), kIn);
  const std::byte* w = hot_matrix().data();
  for (auto _ : st) {
    float sum = 0;
    for (int64_t r = 0; r < kOut; ++r) sum += k.vec_dot(kIn, w + r * kRowBytes, xq.data());
    benchmark::DoNotOptimize(sum);
  }
  set_rate(st, kMatBytes);
}

void BM_Matmul(benchmark::State& st) {
  if (skip_unsupported(st)) return;
  const int64_t n_tokens = st.range(1);
  ThreadPool pool(static_cast<int>(st.range(2)));
  const MatView w{GgmlType::Q4_K, kIn, kOut, hot_matrix().data(), kRowBytes};
  const auto x = activations(n_tokens);
  std::vector<float> y(static_cast<size_t>(kOut * n_tokens));
  for (auto _ : st) {
    matmul(pool, w, x.data(), n_tokens, y.data(), isa_arg(st));
    benchmark::ClobberMemory();
  }
  set_rate(st, kMatBytes);
}

void BM_Cold(benchmark::State& st) {
  if (skip_unsupported(st)) return;
  const uint64_t n_mats = kColdBytes / kMatBytes;
  static AlignedBuffer cold = [&] {
    AlignedBuffer b(n_mats * kMatBytes, 4096);
    std::mt19937 rng(3);
    fill_q4k(b.data(), n_mats * kMatBytes / sizeof(BlockQ4K), rng);
    return b;
  }();
  ThreadPool pool(static_cast<int>(st.range(2)));
  const int64_t n_tokens = st.range(1);
  const auto x = activations(n_tokens);
  std::vector<float> y(static_cast<size_t>(kOut * n_tokens));
  uint64_t m = 0;
  for (auto _ : st) {
    const MatView w{GgmlType::Q4_K, kIn, kOut, cold.data() + m * kMatBytes, kRowBytes};
    matmul(pool, w, x.data(), n_tokens, y.data(), isa_arg(st));
    benchmark::ClobberMemory();
    m = (m + 1) % n_mats;
  }
  set_rate(st, kMatBytes);
}

// Matmul of the other types with 64 tokens on one thread: where the AVX-512 GEMM replaces the
// AVX2 dot kernels (an expert batch or a prefill chunk).
void BM_TypesMatmul(benchmark::State& st) {
  if (skip_unsupported(st)) return;
  const TypeCase& tc = kTypeCases[st.range(1)];
  st.SetLabel(std::string(type_name(tc.type)));
  std::mt19937 rng(5);
  const AlignedBuffer m = random_matrix(tc, rng);
  const uint64_t rb = row_bytes(tc.type, kIn);
  constexpr int64_t kTokens = 64;
  ThreadPool pool(1);
  const MatView w{tc.type, kIn, kOut, m.data(), rb};
  const auto x = activations(kTokens);
  std::vector<float> y(static_cast<size_t>(kOut * kTokens));
  for (auto _ : st) {
    matmul(pool, w, x.data(), kTokens, y.data(), isa_arg(st));
    benchmark::ClobberMemory();
  }
  set_rate(st, rb * kOut);
}

void BM_Types(benchmark::State& st) {
  if (skip_unsupported(st)) return;
  const TypeCase& tc = kTypeCases[st.range(1)];
  st.SetLabel(std::string(type_name(tc.type)));
  std::mt19937 rng(4);
  const AlignedBuffer m = random_matrix(tc, rng);
  const uint64_t rb = row_bytes(tc.type, kIn);
  const DotKernels k = dot_kernels(tc.type, isa_arg(st));
  const auto x = activations(1);
  std::vector<std::byte> xq(row_bytes(k.vec_dot_type, kIn));
  k.quantize(x.data(), xq.data(), kIn);
  for (auto _ : st) {
    float sum = 0;
    for (int64_t r = 0; r < kOut; ++r) sum += k.vec_dot(kIn, m.data() + r * rb, xq.data());
    benchmark::DoNotOptimize(sum);
  }
  set_rate(st, rb * kOut);
}

BENCHMARK(BM_VecDot)->ArgNames({"isa"})->Arg(0)->Arg(1)->Arg(2);
BENCHMARK(BM_Matmul)
    ->ArgNames({"isa", "tokens", "threads"})
    ->ArgsProduct({{0, 1, 2}, {1, 2, 3, 8, 64, 512}, {1, 2}})
    ->UseRealTime();
BENCHMARK(BM_Types)
    ->ArgNames({"isa", "type"})
    ->ArgsProduct({{0, 1, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}});
BENCHMARK(BM_TypesMatmul)
    ->ArgNames({"isa", "type"})
    ->ArgsProduct({{1, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}});
BENCHMARK(BM_Cold)
    ->ArgNames({"isa", "tokens", "threads"})
    ->ArgsProduct({{0, 1, 2}, {1, 2, 4, 8, 32}, {1, 2}})
    ->UseRealTime();

// Console output plus, at the end, the AVX2 / scalar and AVX-512 / AVX2 speed ratios of each
// configuration.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (!r.error_occurred && r.run_type == Run::RT_Iteration)
        times_[r.benchmark_name()] = r.GetAdjustedRealTime();
    }
  }
  void print_ratios() const {
    print_ratio("isa:0", "isa:1", "avx2/scalar");
    print_ratio("isa:1", "isa:2", "avx512/avx2");
  }

 private:
  void print_ratio(const std::string& base, const std::string& fast, const char* what) const {
    for (const auto& [name, t_base] : times_) {
      const auto pos = name.find(base);
      if (pos == std::string::npos) continue;
      std::string other = name;
      other.replace(pos, base.size(), fast);
      const auto it = times_.find(other);
      if (it == times_.end()) continue;
      std::string shown = name;
      shown.erase(pos, base.size() + 1);
      std::printf("%s speedup %-40s %6.2fx\n", what, shown.c_str(), t_base / it->second);
    }
  }

  std::map<std::string, double> times_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios();
  benchmark::Shutdown();
  return 0;
}
