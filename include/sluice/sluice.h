// sluice public API: everything the CLI and the server use. An Engine owns a loaded model (its
// resident weights, tokenizer, expert store and thread pool); Sessions hold one conversation's
// KV cache each and generate tokens through a callback.
//
//   auto engine = sluice::Engine::load({.model_path = "model.gguf"});
//   auto session = engine->new_session();
//   sluice::GenerateOptions opt;
//   session->generate(engine->tokenize("Hello", true), opt,
//                     [](int32_t, std::string_view text) { fputs(...); return true; });
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/grammar.h"  // IWYU pragma: export
#include "sluice/types.h"    // IWYU pragma: export

namespace sluice {

class StageLink;  // runtime/stage_link.h: the channel between pipeline stages
class ExpertShard;  // experts/expert_shard.h: which experts this process computes
class HeadShard;    // model/head_shard.h: which rows of the output head this process computes

struct EngineOptions {
  std::string model_path;
  int n_threads = 0;          // 0: one per physical core available to the process
  int n_ctx = 0;              // per-session context; 0: the training context, at most 4096 (larger: a warning)
  int kv_slots = 1;           // sequences the memory plan reserves a full KV cache for (serve: --parallel)
  // Memory the front end needs beside the engine (serve: its HTTP worker threads), which the
  // memory plan sets aside before it sizes the expert cache.
  uint64_t overhead_bytes = 0;
  ExpertMode experts = ExpertMode::kAuto;
  uint64_t cache_bytes = 0;      // expert cache for stream mode; 0: sized from the memory budget
  uint64_t mem_limit = 0;        // memory budget; 0: detected (cgroup limit, MemAvailable)
  EvictionPolicy cache_policy = EvictionPolicy::kNextUse;
  bool cold = false;             // no warm-start preload of the expert cache
  int64_t preload_experts = -1;  // most experts to preload (−1: fill the cache)
  bool prefetch = true;          // router-lookahead prefetch of the next layer's experts
  bool lock_memory = true;       // mlock the expert cache
  bool debug = false;            // log every expert hit and miss
  KvType kv_type_k = KvType::kF32;  // storage of cached keys (MLA: the latent and rope key)
  KvType kv_type_v = KvType::kF32;  // storage of cached values
  // The drafts sessions will use. kMtp loads the file's MTP (nextn) block (an error when it has
  // none): its weights, a KV cache beside each session's, its routed experts streamed through the
  // same store. kAuto loads it when the file has one. kNone/kNgram never read it.
  DraftMode draft = DraftMode::kNone;
  // A separate MTP GGUF (DeepSeek V4's converter writes the block to its own file): with draft
  // kMtp or kAuto its block is loaded instead of one in the model file; other modes refuse it.
  std::string mtp_path{};
  // Pipeline stage: the layers [layer_begin, layer_end) this engine runs (−1: to the last), and
  // the link to the neighbouring stages; none: the whole model in this process.
  int layer_begin = 0;
  int layer_end = -1;
  std::shared_ptr<StageLink> link = nullptr;
  // Expert parallel (--split-mode experts): every process runs all layers and computes the routed
  // experts this shard owns, trading slot outputs with the other processes; null: all here.
  std::shared_ptr<ExpertShard> expert_shard = nullptr;
  // With it, the output head split by vocabulary: this process multiplies only its rows of the
  // head, and the process that samples gathers every process's logits; null: the whole head here.
  std::shared_ptr<HeadShard> head_shard = nullptr;
  // Routing traces (format: src/experts/routing_trace.h). routing_trace: every evaluated row's
  // chosen experts and lookahead prediction per layer are written to this file, complete when the
  // engine is destroyed. replay_routing: the model routes as this trace says (ids mapped into its
  // range, routed layers cycled), so streaming follows learned routing; its text is then not the
  // model's (ModelInfo::routing says so). Neither in a pipeline stage.
  std::string routing_trace{};
  std::string replay_routing{};
  // A Jinja chat template to use instead of the file's tokenizer.chat_template (--chat-template,
  // --chat-template-file); empty: the file's.
  std::string chat_template{};
};

struct SamplingOptions {
  float temperature = 0.8f;  // ≤ 0: greedy
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int penalty_last_n = 64;
  uint64_t seed = 0xC0FFEE;
  // Added to the named tokens' logits before the penalties and every filter, greedy included
  // (OpenAI's logit_bias); −infinity bans a token.
  std::vector<std::pair<int32_t, float>> logit_bias{};
};

// Speculative decoding. Each step drafts up to `max` tokens, verifies them with the pending token
// in one forward pass and keeps the longest prefix the sampler agrees with (greedy: the tokens
// are those of plain decoding; temperature: the same distribution, by the standard rejection rule).
// Adaptive (the default): drafts only as many tokens, between `min` and `max`, as the measured
// cost of a wider verify pass and the running acceptance say will pay (runtime/draft.h).
struct DraftOptions {
  DraftMode mode = DraftMode::kAuto;
  int max = 16;          // most tokens drafted per step (llama.cpp's default too)
  int min = 1;           // fewer candidates than this: decode one token
  // false (`--draft-fixed`): every step with at least `min` candidates drafts all of them up to
  // `max`, from the MTP block when it offers (the file's own drafter), whatever the measured cost
  // (measurements and tests that must see drafts; DraftPolicy::choose).
  bool adaptive = true;
};

struct GenerateOptions {
  int max_tokens = 128;
  // ≥ 0: record each generated token's log-probability and this many most likely alternatives
  // (at most 20) in GenerateResult::logprobs; < 0: off.
  int logprobs = -1;
  SamplingOptions sampling;
  DraftOptions draft;
  std::vector<std::string> stop;  // generation ends before any of these strings
  bool stop_at_eog = true;        // end at the model's end-of-generation tokens
  // A GBNF grammar (llama.cpp's syntax, see sluice/grammar.h) the generated text must match;
  // empty: unconstrained. Tokens it does not allow are masked before sampling; the generation
  // ends with kGrammar once the text is complete and nothing can follow (or with kEog at an
  // end-of-generation token, allowed only where the text may end). kLength means unfinished.
  std::string grammar;
};

// Why a generation ended: max_tokens or the context (or a grammar no token can continue), a stop
// string, an end-of-generation token, the caller, or a grammar whose text is complete.
enum class FinishReason { kLength, kStop, kEog, kCancelled, kGrammar };

// A generated token under the model's distribution: log-softmax of its logits at temperature 1,
// before penalties and top-k/top-p/min-p truncation (what OpenAI's logprobs report).
struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>>
      top;  // the most likely tokens and their logprobs, best first
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (a matched stop string's tokens included)
  std::string text;             // generated text, stop string excluded
  std::vector<TokenLogprob>
      logprobs;  // per generated token with text, when GenerateOptions::logprobs ≥ 0
  FinishReason finish = FinishReason::kLength;
  int n_prompt = 0;             // prompt tokens evaluated (after prefix reuse)
  int n_reused = 0;             // prompt tokens served from the cache
  double prefill_seconds = 0;
  double decode_seconds = 0;
  int n_drafted = 0;   // draft tokens verified
  int n_accepted = 0;  // of them, accepted (each one a token without a forward pass of its own)
  int n_steps = 0;     // decode forward passes (with drafting, fewer than the generated tokens)
  double grammar_seconds = 0;  // spent masking logits and advancing the grammar (with one)
};

// Called with each generated token and its text (UTF-8 complete; may be empty while a
// multi-byte character is incomplete). Return false to stop generation.
using TokenCallback = std::function<bool(int32_t token, std::string_view text)>;

struct ModelInfo {
  std::string architecture;
  std::string name;
  int n_layer = 0, n_embd = 0, n_vocab = 0, n_ctx_train = 0;
  int n_expert = 0, n_expert_used = 0;
  uint64_t file_bytes = 0;
  std::string chat_template;
  std::string bos_token, eos_token;  // their text (chat templates use them); empty when absent
  std::string experts_mode;  // what the store does: "ram", "mmap", "stream"
  std::string experts_detail;  // one line: reader, cache slots and size
  uint64_t resident_bytes = 0;  // non-routed weights
  uint64_t routed_bytes = 0;    // routed experts in the file
  uint64_t expert_cache_bytes = 0;  // stream mode: the expert cache the memory plan chose; else 0
  int n_ctx = 0;                // context of new sessions (the option, or its default from the training context)
  uint64_t kv_bytes = 0;        // KV cache of kv_slots sequences at n_ctx (allocated as it fills)
  uint64_t memlock_limit = 0;   // RLIMIT_MEMLOCK; 0: unlimited
  int stage = 0, n_stages = 1;  // pipeline stage of this process (0 … n_stages−1)
  int layer_begin = 0, layer_end = 0;  // the layers this process runs
  std::string routing;  // a routing trace written or replayed, in words; empty: neither
};

struct ExpertStats {
  uint64_t requests = 0, hits = 0, misses = 0, bytes_read = 0;
  double read_seconds = 0, stall_seconds = 0;
  uint64_t prefetch_issued = 0, prefetch_used = 0;
  uint64_t certain_issued = 0, certain_used = 0;  // of the prefetches: certain ones (hash-routed layers)
  uint64_t cache_bytes = 0;  // the expert cache's memory (stream mode)
};

class Session;

class Engine {
 public:
  static std::unique_ptr<Engine> load(const EngineOptions& options);  // throws sluice::Error
  ~Engine();

  const ModelInfo& info() const;
  std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special = false) const;
  // Compiles a GBNF grammar for this vocabulary (GenerateOptions::grammar); throws sluice::Error
  // with the line, column and reason when it does not parse or compile, and when no token can
  // begin the text it allows. Compiled grammars are kept (the most recent 16), so generating
  // with the same text again does not compile it again.
  void check_grammar(std::string_view grammar) const;
  std::string detokenize(std::span<const int32_t> tokens) const;
  bool is_eog(int32_t token) const;
  // Pipeline stages: the last stage (the only one with logits) passes the token it chose and
  // every stage gets it back; without a pipeline, returns `token`.
  int32_t share_token(int32_t token);
  // A session with its own KV cache of n_ctx tokens (0: the engine's n_ctx; not capped at the
  // training context). The expert-cache budget was planned for EngineOptions::n_ctx, so a much
  // larger n_ctx takes memory the plan did not count.
  std::unique_ptr<Session> new_session(int n_ctx = 0);
  ExpertStats expert_stats() const;
  // Rows written so far to the routing trace (EngineOptions::routing_trace; 0 without one): a
  // measurement's rows start here, for `route-stats --rows`.
  uint64_t routing_trace_rows() const;
  // Every routed expert's place in the cache and its counts. Not while a Scheduler serves (its
  // thread runs the store): Scheduler::expert_cache() then.
  ExpertCacheMap expert_cache_map() const;
  double load_seconds() const;

  struct Impl;

 private:
  friend Impl& engine_impl(Engine& engine);  // the runtime's own access (runtime/engine_impl.h)
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Session {
 public:
  ~Session();
  // Makes `tokens` the session's context: reuses the longest cached common prefix and evaluates
  // the rest. Returns the logits after the last token (n_vocab values).
  std::span<const float> evaluate(std::span<const int32_t> tokens);
  // Logits at every position of the evaluated suffix (for perplexity / reference checks):
  // evaluates `tokens` from scratch and returns n_tokens × n_vocab values.
  std::vector<float> evaluate_all(std::span<const int32_t> tokens);
  // Evaluates the prompt (with prefix reuse) then samples up to max_tokens.
  GenerateResult generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                          const TokenCallback& on_token);
  const std::vector<int32_t>& tokens() const;  // the context held in the KV cache
  void clear();
  // Prompt tokens the last evaluate() or generate() took from the cache instead of computing.
  int reused() const;
  // Writes the context (tokens, the logits after the last one, the KV rows) to `path` atomically.
  // Throws sluice::Error when the context is empty or on I/O failure.
  // `app_data` travels with it (chat keeps its conversation there).
  void save(const std::string& path, const std::string& app_data = "") const;
  // Restores what save() wrote. Returns "" when restored; otherwise why the file does not fit this
  // engine (another model or model file, another KV type or layout, a longer context), leaving the
  // session unchanged. Throws sluice::Error for a file that is not a valid state (foreign,
  // truncated or damaged), naming what is wrong.
  std::string load(const std::string& path, std::string* app_data = nullptr);
  int n_ctx() const;

 private:
  friend class Engine;
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice

// Continuous-batching scheduler and chat prompts for servers.
#include "sluice/serving.h"  // IWYU pragma: export
