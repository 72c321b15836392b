// matmul: activation conversion, work split and the row x token loops; see matmul.h.
//
// Work split: output rows are cut into one contiguous range per thread so each thread streams its
// own part of the weight matrix front to back (decode is bound by that stream). Only when there
// are fewer rows than threads are tokens split as well. Within a range, each weight row is dotted
// with a tile of token rows while it sits in L1, so prefill and MoE expert batches read the weights
// once per tile instead of once per token; types with a multi-row kernel also unpack each weight
// block once per group of kMaxDotRows tokens, types with a dot tile kernel take four weight rows
// per call (short rows: one shared lane sum), and types with a GEMM kernel unpack each tile of
// weight rows once for all the tokens of the part.
#include "ops/matmul.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>

#include "core/aligned.h"
#include "core/error.h"
#include "quant/dequant.h"

namespace sluice {

namespace {

// Token rows per weight-row visit. 64 Q8_K rows of 4096 values are ~300 KB: fits L2 next to the
// thread's weights, so the activation tile is reused from cache across the rows of a range.
constexpr int64_t kTokenTile = 64;
// Below this many tokens the caller converts activations alone: a second pool round trip costs
// more than converting a few rows.
constexpr int64_t kParallelQuantizeTokens = 8;

// Grow-only buffer: steady-state decode reuses it and allocates nothing.
class Scratch {
 public:
  std::byte* get(size_t bytes) {
    if (buf_.size() < bytes) buf_ = AlignedBuffer(std::max(bytes, buf_.size() * 2));
    return buf_.data();
  }

 private:
  AlignedBuffer buf_;
};

// Converted activations of the calling thread, and one dequantized weight row per pool thread for
// types without a dot kernel. Pool threads live as long as the pool, so theirs persists too.
thread_local Scratch t_activations;
// Set by ExactRows on the thread that calls matmul.
thread_local bool t_exact_rows = false;
thread_local Scratch t_dequant_row;

// One matrix of a job: its weights, output, kernels, converted activations and how its rows and
// tokens are cut into parts. A matrix is cut as a call for it alone would cut it, so each output
// comes from the same kernel (GEMM or dot) as it would alone; first_part numbers its parts
// within the job.
struct Mat {
  const MatView* w = nullptr;
  float* y = nullptr;
  DotKernels k;
  const float* x = nullptr;
  const std::byte* xq = nullptr;  // activation rows in k.vec_dot_type (or x itself for F32)
  uint64_t xq_stride = 0;
  bool converts = false;  // converts its activations itself (else reads x or the previous one's)
  int64_t n_tokens = 0;
  int64_t row_parts = 0, token_parts = 0, first_part = 0;
  // Tokens per vec_dot_multi call: 1 under ExactRows unless the kernel's rows are exact.
  int64_t dot_rows = kMaxDotRows;
};

struct Job {
  Mat* mats = nullptr;
  int n_mats = 0;
  int64_t n_parts = 0;
  // Parts are claimed from a shared counter rather than assigned one per thread: a thread that
  // the OS deschedules (an oversubscribed machine, a server's other threads) delays only the
  // part it holds, and the others take the rest. Rows are independent, so results do not depend
  // on which thread computes which part.
  std::atomic<int64_t> next_part{0};

  std::mutex error_mutex;
  std::exception_ptr error;

  void record_error() {
    std::lock_guard<std::mutex> lock(error_mutex);
    if (!error) error = std::current_exception();
  }
};

void run_range(const Mat& mat, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const MatView& w = *mat.w;
  float* const y = mat.y;
  const DotKernels& k = mat.k;
  // Types without a dot kernel take the GEMM at any token count: it is faster than dequantizing,
  // and their activations are then in one format whatever the batch size.
  if (k.gemm && (t1 - t0 >= k.min_gemm_tokens || !k.vec_dot)) {
    k.gemm(w.n_in, w.data + static_cast<uint64_t>(r0) * w.row_stride, w.row_stride, r1 - r0,
           mat.xq + static_cast<uint64_t>(t0) * mat.xq_stride, mat.xq_stride, t1 - t0,
           y + t0 * w.n_out + r0, static_cast<uint64_t>(w.n_out));
    return;
  }
  float* row_buf = nullptr;
  if (!k.vec_dot) {
    row_buf =
        reinterpret_cast<float*>(t_dequant_row.get(static_cast<size_t>(w.n_in) * sizeof(float)));
  }
  for (int64_t tt = t0; tt < t1; tt += kTokenTile) {
    const int64_t te = std::min(t1, tt + kTokenTile);
    int64_t r = r0;
    // Tiles of weight rows first: every output equals vec_dot's, so lone tokens and ExactRows
    // calls take them too; the rows left over take the per-row kernels below.
    if (k.vec_dot_tile) {
      for (; r + kDotTileRows <= r1; r += kDotTileRows) {
        const std::byte* wrow = w.data + static_cast<uint64_t>(r) * w.row_stride;
        for (int64_t t = tt; t < te; t += kMaxDotRows) {
          const int n_x = static_cast<int>(std::min<int64_t>(kMaxDotRows, te - t));
          k.vec_dot_tile(w.n_in, wrow, w.row_stride,
                         mat.xq + static_cast<uint64_t>(t) * mat.xq_stride, mat.xq_stride, n_x,
                         y + t * w.n_out + r, static_cast<uint64_t>(w.n_out));
        }
      }
    }
    for (; r < r1; ++r) {
      const std::byte* wrow = w.data + static_cast<uint64_t>(r) * w.row_stride;
      float* yr = y + r;
      // A lone token takes the single-row kernel, which for some types (Q6_K) is a faster set's;
      // so do ExactRows calls (dot_rows 1), whose rows must equal such lone-token calls, unless
      // the multi-row kernel gives each row the single-row result (multi_rows_exact).
      if (k.vec_dot_multi && (!k.vec_dot || (mat.dot_rows > 1 && te - tt > 1))) {
        for (int64_t t = tt; t < te; t += mat.dot_rows) {
          const int n_x = static_cast<int>(std::min<int64_t>(mat.dot_rows, te - t));
          float out[kMaxDotRows];
          k.vec_dot_multi(w.n_in, wrow, mat.xq + static_cast<uint64_t>(t) * mat.xq_stride,
                          mat.xq_stride, n_x, out);
          for (int j = 0; j < n_x; ++j) yr[(t + j) * w.n_out] = out[j];
        }
      } else if (k.vec_dot) {
        const std::byte* xr = mat.xq + static_cast<uint64_t>(tt) * mat.xq_stride;
        for (int64_t t = tt; t < te; ++t, xr += mat.xq_stride)
          yr[t * w.n_out] = k.vec_dot(w.n_in, wrow, xr);
      } else {
        dequantize_row(w.type, wrow, row_buf, w.n_in);
        for (int64_t t = tt; t < te; ++t)
          yr[t * w.n_out] = k.f32_dot(w.n_in, row_buf, mat.x + t * w.n_in);
      }
    }
  }
}

void run_parts(Job& job) {
  try {
    for (int64_t part;
         (part = job.next_part.fetch_add(1, std::memory_order_relaxed)) < job.n_parts;) {
      int m = 0;
      while (m + 1 < job.n_mats && part >= job.mats[m + 1].first_part) ++m;
      const Mat& mat = job.mats[m];
      const int64_t rps = mat.row_parts, tps = mat.token_parts;
      const int64_t rp = (part - mat.first_part) % rps;
      const int64_t tp = (part - mat.first_part) / rps;
      const int64_t n_out = mat.w->n_out;
      run_range(mat, n_out * rp / rps, n_out * (rp + 1) / rps, mat.n_tokens * tp / tps,
                mat.n_tokens * (tp + 1) / tps);
    }
  } catch (...) {
    job.record_error();
  }
}

// Four parts per thread when there are rows enough (at least kMinPartRows each), so that the
// shared counter can even out a slow thread; fewer rows than threads split the tokens too.
void cut(Mat& mat, int64_t n_threads) {
  constexpr int64_t kMinPartRows = 16;
  const int64_t n_out = mat.w->n_out;
  if (n_out == 0 || mat.n_tokens == 0) {
    mat.row_parts = mat.token_parts = 0;
    return;
  }
  mat.row_parts =
      n_threads == 1
          ? 1
          : std::min(n_out, std::max(n_threads, std::min(4 * n_threads, n_out / kMinPartRows)));
  mat.token_parts = std::min(mat.n_tokens, std::max<int64_t>(1, n_threads / mat.row_parts));
}

// Bytes of a matrix's converted activations (0 when it reads the floats themselves).
uint64_t converted_bytes(const Mat& mat) {
  if (!mat.k.quantize) return 0;
  return row_bytes(mat.k.vec_dot_type, static_cast<uint64_t>(mat.w->n_in)) *
         static_cast<uint64_t>(mat.n_tokens);
}

void check_shape(const MatView& w, int64_t n_tokens) {
  if (n_tokens < 0 || w.n_out < 0 || w.n_in < 0) {
    fail("matmul: negative size (n_in {}, n_out {}, n_tokens {})", w.n_in, w.n_out, n_tokens);
  }
  const uint32_t block = type_traits(w.type).block_elems;
  if (w.n_in % block != 0) {
    fail("matmul: row length {} is not a multiple of the {} block size {}", w.n_in,
         type_name(w.type), block);
  }
  if (w.row_stride < row_bytes(w.type, static_cast<uint64_t>(w.n_in))) {
    fail("matmul: row stride {} is shorter than a {} row of {} values ({} bytes)", w.row_stride,
         type_name(w.type), w.n_in, row_bytes(w.type, static_cast<uint64_t>(w.n_in)));
  }
}

// Runs mats[0..n_mats) in one job: activations converted (a matrix whose input, length and format
// equal the previous one's shares its conversion), then every part claimed from one counter in
// one pool round trip.
void run_mats(ThreadPool& pool, Mat* mats, int n_mats) {
  Job job;
  job.mats = mats;
  job.n_mats = n_mats;
  const bool exact = t_exact_rows;
  // With several matrices per thread the counter balances whole matrices, so each is one part:
  // its tiles are then packed front to back, each prefetching the next, where a part boundary
  // left a tile cold and prepared the activations once more. A row's result does not depend on
  // its part, and a matrix with at least as many rows as threads is never cut by tokens.
  const int64_t cut_threads = n_mats >= 4 * pool.size() ? 1 : pool.size();
  uint64_t scratch = 0;
  for (int m = 0; m < n_mats; ++m) {
    Mat& mat = mats[m];
    check_shape(*mat.w, mat.n_tokens);
    if (exact && mat.k.vec_dot) mat.k.gemm = nullptr;
    if (exact && !mat.k.multi_rows_exact) mat.dot_rows = 1;
    cut(mat, mat.w->n_out >= pool.size() ? cut_threads : pool.size());
    mat.first_part = job.n_parts;
    job.n_parts += mat.row_parts * mat.token_parts;
    scratch += converted_bytes(mat);
  }
  if (job.n_parts == 0) return;

  // Conversion: each matrix's rows into its slice of the calling thread's scratch.
  std::byte* xq = t_activations.get(scratch);
  int64_t to_convert = 0;
  for (int m = 0; m < n_mats; ++m) {
    Mat& mat = mats[m];
    if (!mat.k.quantize) {
      mat.xq = reinterpret_cast<const std::byte*>(mat.x);
      mat.xq_stride = static_cast<uint64_t>(mat.w->n_in) * sizeof(float);
      continue;
    }
    mat.xq_stride = row_bytes(mat.k.vec_dot_type, static_cast<uint64_t>(mat.w->n_in));
    const Mat* prev = m > 0 ? &mats[m - 1] : nullptr;
    if (prev && prev->x == mat.x && prev->n_tokens == mat.n_tokens &&
        prev->w->n_in == mat.w->n_in && prev->k.quantize == mat.k.quantize &&
        prev->k.vec_dot_type == mat.k.vec_dot_type) {
      mat.xq = prev->xq;
      continue;
    }
    mat.xq = xq;
    mat.converts = true;
    xq += converted_bytes(mat);
    to_convert += mat.n_tokens;
  }
  // Rows [r0, r1) of the concatenated rows of the converting matrices.
  auto convert = [&](int64_t r0, int64_t r1) {
    int64_t base = 0;
    for (int m = 0; m < n_mats && base < r1; ++m) {
      const Mat& mat = mats[m];
      if (!mat.converts) continue;
      const int64_t lo = std::max(r0 - base, int64_t{0}), hi = std::min(r1 - base, mat.n_tokens);
      auto* out = const_cast<std::byte*>(mat.xq);
      for (int64_t t = lo; t < hi; ++t)
        mat.k.quantize(mat.x + t * mat.w->n_in, out + t * mat.xq_stride, mat.w->n_in);
      base += mat.n_tokens;
    }
  };
  if (to_convert < kParallelQuantizeTokens || pool.size() == 1) {
    convert(0, to_convert);
  } else {
    pool.parallel_for(to_convert, convert);
  }

  if (job.n_parts == 1) {
    run_parts(job);
  } else {
    pool.run([&job](int, int) { run_parts(job); });
  }
  if (job.error) std::rethrow_exception(job.error);
}

// ys[m] = x · w[m]ᵀ for n_mats (≤ 2) matrices of one input.
void matmul_same_input(ThreadPool& pool, const MatView* w, int n_mats, const float* x,
                       int64_t n_tokens, float* const* ys, Isa isa) {
  Mat mats[2];
  for (int m = 0; m < n_mats; ++m) {
    mats[m].w = &w[m];
    mats[m].y = ys[m];
    mats[m].k = dot_kernels(w[m].type, isa);
    mats[m].x = x;
    mats[m].n_tokens = n_tokens;
  }
  run_mats(pool, mats, n_mats);
}

}  // namespace

ExactRows::ExactRows(bool on) : previous_(t_exact_rows) { t_exact_rows = t_exact_rows || on; }
ExactRows::~ExactRows() { t_exact_rows = previous_; }

void matmul(ThreadPool& pool, const MatView& w, const float* x, int64_t n_tokens, float* y,
            Isa isa) {
  matmul_same_input(pool, &w, 1, x, n_tokens, &y, isa);
}

void matmul_pair(ThreadPool& pool, const MatView& w0, const MatView& w1, const float* x,
                 int64_t n_tokens, float* y0, float* y1) {
  if (w0.type != w1.type || w0.n_in != w1.n_in) {
    matmul(pool, w0, x, n_tokens, y0);
    matmul(pool, w1, x, n_tokens, y1);
    return;
  }
  const MatView w[2] = {w0, w1};
  float* const ys[2] = {y0, y1};
  matmul_same_input(pool, w, 2, x, n_tokens, ys, active_isa());
}

void matmul(ThreadPool& pool, const MatView& w, const float* x, int64_t n_tokens, float* y) {
  matmul(pool, w, x, n_tokens, y, active_isa());
}

void matmul_tasks(ThreadPool& pool, std::span<const MatmulTask> tasks) {
  thread_local std::vector<Mat> t_mats;
  t_mats.assign(tasks.size(), Mat{});
  for (size_t i = 0; i < tasks.size(); ++i) {
    Mat& mat = t_mats[i];
    mat.w = &tasks[i].w;
    mat.y = tasks[i].y;
    mat.k = dot_kernels(tasks[i].w.type);
    mat.x = tasks[i].x;
    mat.n_tokens = tasks[i].n_tokens;
  }
  run_mats(pool, t_mats.data(), static_cast<int>(t_mats.size()));
}

}  // namespace sluice
