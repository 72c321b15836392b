// What one forward call hands every block: the batch of tokens, the KV cache, the expert store,
// the thread pool, the activation hook and the scratch the blocks share. Below Model (model.h)
// and the blocks (blocks.h), which both use it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/huge_pages.h"
#include "core/thread_pool.h"
#include "experts/expert_shard.h"
#include "experts/expert_store.h"
#include "kv/kv_cache.h"
#include "model/routing_tap.h"

namespace sluice {

// Tokens to evaluate in one step. Tokens of one sequence must be in position order and continue
// that sequence's KV cache (pos == current length for the first of them).
struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> pos;
  std::vector<int32_t> seq;
  std::vector<uint8_t> want_logits;
  void add(int32_t token, int32_t p, int32_t s, bool logits) {
    tokens.push_back(token);
    pos.push_back(p);
    seq.push_back(s);
    want_logits.push_back(logits ? 1 : 0);
  }
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  void clear() { tokens.clear(); pos.clear(); seq.clear(); want_logits.clear(); }
};

// Optional observer of named intermediates ("attn_out", layer 3, n_tok × dim values) for
// comparing activations against a reference engine.
using ActivationHook = std::function<void(const char* name, int layer, const float* data, int64_t rows, int64_t cols)>;

// The buffers of ForwardContext::reused, one per use, so that no two blocks of a pass share one
// (the MoE block runs inside every architecture's layers, deepseek4's attention beside it).
enum class PassBuffer : size_t {
  kMoeSlots,         // (n_tok·n_used, n_embd) weighted expert outputs per routing slot
  kDs4Queries,       // (n_tok, n_head, head_dim) deepseek4 attention queries
  kDs4IndexQueries,  // (n_tok, idx_heads, idx_dim) its lightning indexer's queries
  kDs4Outputs,       // (n_tok, n_head, head_dim) its attention outputs
  kCount
};

// Scratch and per-step state shared by the blocks of one forward call.
struct ForwardContext {
  ThreadPool& pool;
  const Batch& batch;
  KvCache& kv;
  ExpertStore& experts;
  int64_t n_tok;
  const ActivationHook* hook;
  void dump(const char* name, int layer, const float* data, int64_t cols) const {
    if (hook && *hook) (*hook)(name, layer, data, n_tok, cols);
  }
  // A router lookahead prediction waits here until the current layer's experts are pinned
  // (right after its ExpertStore::begin, or at the end of a layer without routed experts), so
  // the reads it starts can never evict an expert the current layer is about to use.
  struct Lookahead {
    int il = -1;
    std::vector<int32_t> ids;
    PrefetchHint hint = PrefetchHint::kSet;
  };
  Lookahead lookahead{};
  // Activations a block takes again at every layer of the pass (PassBuffer names each use):
  // the MoE slot outputs are 32 MiB and deepseek4's attention queries and outputs 64 MiB each at a
  // 512-token chunk, which allocated per layer came back from glibc as fresh mapped pages (page
  // faults and zeroing: a fifth of a qwen3 prefill, 47 % of a V4 one). One allocation per buffer
  // and pass, grown when a layer needs more (without keeping the contents), never zero-filled:
  // the caller writes before it reads. Large ones are mapped in 2 MiB pages (a fault per 2 MiB
  // instead of per 4 KiB); small ones (a decode step's) stay on the heap, where a 2 MiB page would
  // be faulted in and cleared for a few KiB.
  float* reused(PassBuffer which, size_t n) {
    Reused& r = reused_[static_cast<size_t>(which)];
    if (r.size < n) {
      r.size = n;
      if (n * sizeof(float) >= 2 * HugePageBuffer::kHugePage) {
        r.heap.reset();
        r.mapped = HugePageBuffer(n * sizeof(float), "a layer's activations");
      } else {
        r.mapped = HugePageBuffer();
        r.heap = std::make_unique_for_overwrite<float[]>(n);
      }
    }
    return r.heap ? r.heap.get() : reinterpret_cast<float*>(r.mapped.data());
  }
  struct Reused {
    size_t size = 0;  // floats
    std::unique_ptr<float[]> heap;
    HugePageBuffer mapped;
  };
  std::array<Reused, static_cast<size_t>(PassBuffer::kCount)> reused_{};
  // Rows whose routed-expert output is read (null: all). forward_mtp sets it to the rows that
  // want logits: its block is a single layer, so the other rows only fill its KV cache, and
  // skipping their experts spares a catch-up over many positions from reading (streaming) nearly
  // every expert of the block. The skipped rows' FFN output is left as the buffer held it.
  const uint8_t* ffn_rows = nullptr;
  // Routing trace writer or replay (Model::set_routing_tap); null: none.
  RoutingTap* routing = nullptr;
  // Expert parallel (--split-mode experts): the experts this process computes and the exchange of
  // slot outputs with the others; null: this process computes every expert.
  ExpertShard* shard = nullptr;
  int64_t n_embd = 0;  // width of a routed expert's input and output
  void issue_lookahead() {
    if (lookahead.il < 0) return;
    // Only the experts this process holds are worth reading here; the others prefetch theirs.
    if (shard)
      std::erase_if(lookahead.ids, [&](int32_t e) { return !shard->holds(lookahead.il, e); });
    experts.prefetch(lookahead.il, lookahead.ids, lookahead.hint);
    lookahead.il = -1;
  }
};

}  // namespace sluice
