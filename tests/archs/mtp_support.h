// Helpers of the MTP tests (mtp_test.cpp, mtp_v4_test.cpp): editing generated files in place,
// reading tensors as floats for recomputation, and greedy options that draft at every step.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "quant/dequant.h"
#include "sluice/sluice.h"

namespace sluice::mtp_test {

// Zeroes the named tensors' bytes in the file at `path`.
inline void zero_tensors(const std::string& path, const std::vector<std::string>& names) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  {
    auto f = gguf::File::open(path);
    for (const std::string& n : names)
      ranges.emplace_back(f->tensor(n).file_offset, f->tensor(n).nbytes);
  }
  std::fstream out(path, std::ios::in | std::ios::out | std::ios::binary);
  for (const auto& [offset, n] : ranges) {
    const std::vector<char> zeros(n, 0);
    out.seekp(static_cast<std::streamoff>(offset));
    out.write(zeros.data(), static_cast<std::streamsize>(n));
  }
  ASSERT_TRUE(out.good()) << path;
}

// A tensor dequantized row by row, in GGML order.
inline std::vector<float> tensor_f32(const gguf::File& f, const std::string& name) {
  const gguf::TensorInfo& t = f.tensor(name);
  std::vector<float> out(t.n_elements());
  for (int64_t r = 0; r < t.n_rows(); ++r)
    dequantize_row(t.type, t.data + r * t.row_bytes(), out.data() + r * t.ne[0], t.ne[0]);
  return out;
}

// RMS norm in double, times w (null: no weight).
inline std::vector<double> rms_norm(const float* x, const float* w, int64_t n, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double s = 1.0 / std::sqrt(ss / n + eps);
  std::vector<double> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s * (w ? w[i] : 1.0f);
  return y;
}

inline int32_t argmax(const float* row, int n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// The prompt both suites use: 40 tokens below 200.
inline std::vector<int32_t> prompt40() {
  std::vector<int32_t> p;
  for (int i = 0; i < 40; ++i) p.push_back((i * 37 + 11) % 200);
  return p;
}

// Greedy decoding of n tokens drafting up to 4 tokens at every step (not adaptive, so the tests
// see drafts verified whatever the timings).
inline GenerateOptions greedy(int n, DraftMode mode) {
  GenerateOptions o;
  o.max_tokens = n;
  o.sampling.temperature = 0;
  o.stop_at_eog = false;
  o.draft.mode = mode;
  o.draft.max = 4;
  o.draft.adaptive = false;
  return o;
}

}  // namespace sluice::mtp_test
