// Absorbed multi-head latent attention; see mla.h. The same path serves prefill and decode:
// per head, the query's nope part is mapped into latent space by one matmul over all tokens,
// attention runs over cached latent+rope rows in fp32 through the shared kernel (ops/attention),
// and W_vb maps each head's attended latent back to head_dim_v.
#include "model/archs/mla.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/attention.h"
#include "ops/elementwise.h"

namespace sluice {

void mla_attention_block(ForwardContext& ctx, int il, const MlaWeights& w, const MlaConfig& c, float* x) {
  const int64_t n_tok = ctx.n_tok;
  const int64_t n_embd = w.norm.ne[0];
  const int hd_q = c.nope + c.n_rot;
  const int width = mla_cache_width(c);
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * hd_q;

  std::vector<float> xn(n_tok * n_embd), q(n_tok * q_dim), kv_a(n_tok * width);
  for (int64_t t = 0; t < n_tok; ++t) rmsnorm(x + t * n_embd, w.norm.f32(), xn.data() + t * n_embd, n_embd, c.eps);
  ctx.dump("attn_norm", il, xn.data(), n_embd);
  if (w.wq_a) {
    const int64_t q_lora = w.wq_a.ne[1];
    std::vector<float> qa(n_tok * q_lora);
    linear(ctx, w.wq_a, Tensor{}, xn.data(), qa.data());
    for (int64_t t = 0; t < n_tok; ++t) rmsnorm(qa.data() + t * q_lora, w.q_a_norm.f32(), qa.data() + t * q_lora, q_lora, c.eps);
    linear(ctx, w.wq_b, Tensor{}, qa.data(), q.data());
  } else {
    linear(ctx, w.wq, Tensor{}, xn.data(), q.data());
  }
  linear(ctx, w.wkv_a, Tensor{}, xn.data(), kv_a.data());

  // Cache rows: normalised latent, then the rotated rope key.
  for (int64_t t = 0; t < n_tok; ++t) {
    float* row = kv_a.data() + t * width;
    rmsnorm(row, w.kv_a_norm.f32(), row, c.kv_lora, c.eps);
    c.rope->apply(row + c.kv_lora, 1, c.n_rot, ctx.batch.pos[t]);
    ctx.kv.store(ctx.batch.seq[t], il, ctx.batch.pos[t], row, nullptr);
  }
  ctx.dump("kv_cmpr_pe", il, kv_a.data(), width);

  // Absorbed queries (n_tok, n_head, kv_lora+n_rot): W_kb,h·q_nope,h then the rotated q_pe.
  std::vector<float> qa(n_tok * c.n_head * width);
  std::vector<float> gather(n_tok * std::max(c.nope, c.kv_lora)), mapped(n_tok * std::max(c.kv_lora, c.head_dim_v));
  for (int h = 0; h < c.n_head; ++h) {
    for (int64_t t = 0; t < n_tok; ++t) std::copy_n(q.data() + t * q_dim + h * hd_q, c.nope, gather.data() + t * c.nope);
    matmul(ctx.pool, w.wk_b.slice(h), gather.data(), n_tok, mapped.data());
    for (int64_t t = 0; t < n_tok; ++t) {
      float* dst = qa.data() + (t * c.n_head + h) * width;
      std::copy_n(mapped.data() + t * c.kv_lora, c.kv_lora, dst);
      std::copy_n(q.data() + t * q_dim + h * hd_q + c.nope, c.n_rot, dst + c.kv_lora);
    }
  }
  for (int64_t t = 0; t < n_tok; ++t)
    c.rope->apply(qa.data() + t * c.n_head * width + c.kv_lora, c.n_head, width, ctx.batch.pos[t]);

  // Every head attends over the same cached rows (one KV head): keys are latent+rope, values the
  // latent prefix of each row.
  if (ctx.kv.shape(il).head_dim_k != width)
    fail("internal: layer {} KV cache holds {} floats per position, MLA needs {}", il, ctx.kv.shape(il).head_dim_k, width);
  std::vector<float> lat(n_tok * c.n_head * c.kv_lora);
  AttentionParams ap;
  ap.n_head = c.n_head;
  ap.n_head_kv = 1;
  ap.head_dim_k = width;
  ap.head_dim_v = c.kv_lora;
  ap.scale = c.scale;
  ap.values_in_keys = true;
  attention(ctx.pool, ap, ctx.kv, il, qa.data(), ctx.batch.seq.data(), ctx.batch.pos.data(), n_tok, lat.data());

  const int64_t o_dim = static_cast<int64_t>(c.n_head) * c.head_dim_v;
  std::vector<float> attn(n_tok * o_dim), out(n_tok * n_embd);
  for (int h = 0; h < c.n_head; ++h) {
    for (int64_t t = 0; t < n_tok; ++t)
      std::copy_n(lat.data() + (t * c.n_head + h) * c.kv_lora, c.kv_lora, gather.data() + t * c.kv_lora);
    matmul(ctx.pool, w.wv_b.slice(h), gather.data(), n_tok, mapped.data());
    for (int64_t t = 0; t < n_tok; ++t)
      std::copy_n(mapped.data() + t * c.head_dim_v, c.head_dim_v, attn.data() + t * o_dim + h * c.head_dim_v);
  }
  ctx.dump("kqv_out", il, attn.data(), o_dim);
  linear(ctx, w.wo, Tensor{}, attn.data(), out.data());
  ctx.dump("attn_out", il, out.data(), n_embd);
  add_inplace(x, out.data(), n_tok * n_embd);
}

}  // namespace sluice
