// Random tensor data for gen-model, drawn directly in each GGML block format at disk speed.
// Quantized blocks are filled with random bytes and then get their scale fields set, so their
// dequantized values have a chosen RMS without any float → quant search: that is what lets a
// multi-GiB Q4_K file be produced as fast as it can be written. Each type is calibrated once by
// dequantizing sample blocks with dequantize_row, so the RMS holds for every type the same way.
// Output depends only on the seed: data is drawn in fixed-size chunks, each seeded by its index,
// and the chunks are shared among threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "quant/types.h"

namespace sluice {

class ThreadPool;

namespace gen {

// xoshiro256**: fast, 64 bits per call, statistically far better than the sizes we draw need.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  // Approximately N(0, 1): a sum of four uniforms (Irwin–Hall), bounded at ±3.46.
  float normal();

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// splitmix64 of a combination of a and b: derives independent seeds (per tensor, chunk, layer).
uint64_t mix_seed(uint64_t a, uint64_t b);
// FNV-1a, to seed a tensor by its name so adding tensors never changes the others' data.
uint64_t hash_name(std::string_view name);

// Empty when gen-model can draw `type`; otherwise why not (integer types hold no weights).
std::string undrawable_reason(GgmlType type);

// RMS of the dequantized values of random blocks of `type` with scale 1 (the calibration).
double unit_rms(GgmlType type);

// Fills `bytes` bytes (whole blocks) of `type` with random weights whose dequantized values have
// RMS ≈ rms and mean ≈ 0. Float types hold approximately normal values. `pool` may be null.
void fill_random(GgmlType type, double rms, uint64_t seed, std::byte* dst, size_t bytes, ThreadPool* pool);

}  // namespace gen
}  // namespace sluice
