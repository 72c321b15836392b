// matmul: activation conversion, work split and the row x token loops; see matmul.h.
//
// Work split: output rows are cut into one contiguous range per thread so each thread streams its
// own part of the weight matrix front to back (decode is bound by that stream). Only when there
// are fewer rows than threads are tokens split as well. Within a range, each weight row is dotted
// with a tile of token rows while it sits in L1, so prefill and MoE expert batches read the weights
// once per tile instead of once per token; types with a multi-row kernel also unpack each weight
// block once per group of kMaxDotRows tokens, and types with a GEMM kernel unpack each tile of weight
// rows once for all the tokens of the part.
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

struct Job {
  const MatView* w;  // w[0..n_mats): same type and row length, one input
  float* const* ys;  // ys[m]: the output of w[m]
  int n_mats = 1;
  DotKernels k;
  const std::byte* xq;  // activation rows in k.vec_dot_type (or x itself for F32)
  uint64_t xq_stride;
  const float* x;
  int64_t n_tokens;
  // Per matrix: its rows and tokens cut as a call for it alone would cut them, so each output
  // comes from the same kernel (GEMM or dot) as it would alone; first_part[m] numbers them.
  static constexpr int kMaxMats = 2;
  int64_t row_parts[kMaxMats];
  int64_t token_parts[kMaxMats];
  int64_t first_part[kMaxMats + 1];
  int64_t dot_rows = kMaxDotRows;  // tokens per vec_dot_multi call (1 for ExactRows)
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

void run_range(const Job& job, int m, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const MatView& w = job.w[m];
  float* const y = job.ys[m];
  // Types without a dot kernel take the GEMM at any token count: it is faster than dequantizing,
  // and their activations are then in one format whatever the batch size.
  if (job.k.gemm && (t1 - t0 >= job.k.min_gemm_tokens || !job.k.vec_dot)) {
    job.k.gemm(w.n_in, w.data + static_cast<uint64_t>(r0) * w.row_stride, w.row_stride, r1 - r0,
               job.xq + static_cast<uint64_t>(t0) * job.xq_stride, job.xq_stride, t1 - t0,
               y + t0 * w.n_out + r0, static_cast<uint64_t>(w.n_out));
    return;
  }
  float* row_buf = nullptr;
  if (!job.k.vec_dot) {
    row_buf =
        reinterpret_cast<float*>(t_dequant_row.get(static_cast<size_t>(w.n_in) * sizeof(float)));
  }
  for (int64_t tt = t0; tt < t1; tt += kTokenTile) {
    const int64_t te = std::min(t1, tt + kTokenTile);
    for (int64_t r = r0; r < r1; ++r) {
      const std::byte* wrow = w.data + static_cast<uint64_t>(r) * w.row_stride;
      float* yr = y + r;
      // A lone token takes the single-row kernel, which for some types (Q6_K) is a faster set's;
      // so do ExactRows calls (dot_rows 1), whose rows must equal such lone-token calls.
      if (job.k.vec_dot_multi && (!job.k.vec_dot || (job.dot_rows > 1 && te - tt > 1))) {
        for (int64_t t = tt; t < te; t += job.dot_rows) {
          const int n_x = static_cast<int>(std::min<int64_t>(job.dot_rows, te - t));
          float out[kMaxDotRows];
          job.k.vec_dot_multi(w.n_in, wrow, job.xq + static_cast<uint64_t>(t) * job.xq_stride,
                              job.xq_stride, n_x, out);
          for (int k = 0; k < n_x; ++k) yr[(t + k) * w.n_out] = out[k];
        }
      } else if (job.k.vec_dot) {
        const std::byte* xr = job.xq + static_cast<uint64_t>(tt) * job.xq_stride;
        for (int64_t t = tt; t < te; ++t, xr += job.xq_stride)
          yr[t * w.n_out] = job.k.vec_dot(w.n_in, wrow, xr);
      } else {
        dequantize_row(w.type, wrow, row_buf, w.n_in);
        for (int64_t t = tt; t < te; ++t)
          yr[t * w.n_out] = job.k.f32_dot(w.n_in, row_buf, job.x + t * w.n_in);
      }
    }
  }
}

void run_parts(Job& job) {
  try {
    const int64_t n_parts = job.first_part[job.n_mats];
    for (int64_t part; (part = job.next_part.fetch_add(1, std::memory_order_relaxed)) < n_parts;) {
      int m = 0;
      while (part >= job.first_part[m + 1]) ++m;
      const int64_t rps = job.row_parts[m], tps = job.token_parts[m];
      const int64_t rp = (part - job.first_part[m]) % rps;
      const int64_t tp = (part - job.first_part[m]) / rps;
      const int64_t n_out = job.w[m].n_out;
      run_range(job, m, n_out * rp / rps, n_out * (rp + 1) / rps, job.n_tokens * tp / tps,
                job.n_tokens * (tp + 1) / tps);
    }
  } catch (...) {
    job.record_error();
  }
}

void convert_activations(ThreadPool& pool, Job& job) {
  if (!job.k.quantize) {
    job.xq = reinterpret_cast<const std::byte*>(job.x);
    job.xq_stride = static_cast<uint64_t>(job.w->n_in) * sizeof(float);
    return;
  }
  const int64_t n_in = job.w->n_in;
  job.xq_stride = row_bytes(job.k.vec_dot_type, static_cast<uint64_t>(n_in));
  std::byte* xq = t_activations.get(job.xq_stride * static_cast<uint64_t>(job.n_tokens));
  job.xq = xq;
  if (job.n_tokens < kParallelQuantizeTokens || pool.size() == 1) {
    for (int64_t t = 0; t < job.n_tokens; ++t)
      job.k.quantize(job.x + t * n_in, xq + t * job.xq_stride, n_in);
    return;
  }
  pool.parallel_for(job.n_tokens, [&job, xq](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      job.k.quantize(job.x + t * job.w->n_in, xq + t * job.xq_stride, job.w->n_in);
  });
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

// ys[m] = x · w[m]ᵀ for n_mats matrices of one type and row length: one activation conversion and
// one pool round trip for all of them.
void matmul_same_input(ThreadPool& pool, const MatView* w, int n_mats, const float* x,
                       int64_t n_tokens, float* const* ys, Isa isa) {
  int64_t total_out = 0;
  for (int m = 0; m < n_mats; ++m) {
    check_shape(w[m], n_tokens);
    total_out += w[m].n_out;
  }
  if (n_tokens == 0 || total_out == 0) return;

  Job job;
  job.w = w;
  job.ys = ys;
  job.n_mats = n_mats;
  job.k = dot_kernels(w[0].type, isa);
  job.x = x;
  job.n_tokens = n_tokens;
  if (t_exact_rows && job.k.vec_dot) {
    job.k.gemm = nullptr;
    job.dot_rows = 1;
  }
  const int64_t nt = pool.size();
  // Four parts per thread when there are rows enough (at least kMinPartRows each), so that the
  // shared counter can even out a slow thread; fewer rows than threads split the tokens too.
  constexpr int64_t kMinPartRows = 16;
  job.first_part[0] = 0;
  for (int m = 0; m < n_mats; ++m) {
    const int64_t n_out = w[m].n_out;
    job.row_parts[m] = n_out == 0 ? 0
                       : nt == 1  ? 1
                                  : std::min(n_out, std::max(nt, std::min(4 * nt, n_out / kMinPartRows)));
    job.token_parts[m] =
        n_out == 0 ? 0 : std::min(n_tokens, std::max<int64_t>(1, nt / job.row_parts[m]));
    job.first_part[m + 1] = job.first_part[m] + job.row_parts[m] * job.token_parts[m];
  }

  convert_activations(pool, job);
  if (job.first_part[n_mats] == 1) {
    run_parts(job);
  } else {
    pool.run([&job](int, int) { run_parts(job); });
  }
  if (job.error) std::rethrow_exception(job.error);
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

}  // namespace sluice
