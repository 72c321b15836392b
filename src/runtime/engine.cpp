// Engine and Session: the public API over model, tokenizer, KV cache and sampler. A Session keeps
// its token history next to its KV cache so a new prompt only evaluates what differs from the
// cached prefix; prompts are evaluated in chunks to bound activation memory.
#include <algorithm>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/meminfo.h"
#include "core/progress.h"
#include "core/timer.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "ops/matmul.h"
#include "runtime/engine_impl.h"
#include "runtime/expert_setup.h"
#include "runtime/kv_state.h"
#include "runtime/mtp_draft.h"
#include "runtime/routing_taps.h"
#include "runtime/prefill_chunk.h"
#include "sluice/sluice.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

namespace {
constexpr int kPrefillChunk = kEngineKvStep;
std::atomic<int> g_prefill_chunk{kPrefillChunk};
}  // namespace

void set_session_prefill_chunk(int tokens) {
  if (tokens < 1 || tokens > kPrefillChunk)
    fail("prefill chunk {}: expected 1..{} tokens (the KV cache's step)", tokens, kPrefillChunk);
  g_prefill_chunk = tokens;
}

int session_prefill_chunk() { return g_prefill_chunk; }

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Engine::Impl& engine_impl(Engine& engine) { return *engine.impl_; }

ExpertsLease::ExpertsLease(Engine::Impl& engine, const char* user) : busy_(engine.experts_busy) {
  if (busy_.exchange(true))
    fail("{} cannot run: the engine's expert store is in use (a Scheduler is serving, or another Session is "
         "evaluating on another thread)",
         user);
}

namespace {

// The routing trace writer or replay of EngineOptions, installed on the model; returns what it
// does in words for ModelInfo::routing.
std::string install_routing_tap(Engine::Impl& e) {
  const EngineOptions& o = e.options;
  if (o.routing_trace.empty() && o.replay_routing.empty()) return "";
  if (!o.routing_trace.empty() && !o.replay_routing.empty())
    fail("--routing-trace and --replay-routing together: a replayed run's routing is the trace's");
  if (e.link) fail("routing traces are not written or replayed in a pipeline (a stage sees only its layers)");
  const HParams& hp = e.model->hparams();
  std::vector<int> routed;
  for (int il = 0; il < hp.n_layer; ++il)
    if (e.model->expert_layout().has_layer(il)) routed.push_back(il);
  if (routed.empty())
    fail("{}: the model routes no experts", o.routing_trace.empty() ? o.replay_routing : o.routing_trace);
  std::string what;
  if (!o.replay_routing.empty()) {
    e.routing = make_routing_replay(o.replay_routing, hp.n_expert, hp.n_expert_used, routed, &what);
  } else {
    e.routing = make_trace_recorder(o.routing_trace, hp.n_layer, hp.n_expert, hp.n_expert_used, true);
    what = fmt::format("routing trace written to {}", o.routing_trace);
  }
  e.model->set_routing_tap(e.routing.get());
  return what;
}

}  // namespace

std::unique_ptr<Engine> Engine::load(const EngineOptions& o) {
  Timer timer;
  auto impl = std::make_unique<Impl>();
  impl->options = o;
  impl->file = gguf::File::open(o.model_path);
  impl->model = load_model(*impl->file);
  impl->model->set_layer_range(o.layer_begin, o.layer_end);
  if (!o.mtp_path.empty()) {
    if (o.draft != DraftMode::kMtp && o.draft != DraftMode::kAuto)
      fail("--mtp {}: the MTP block drafts with --draft mtp or auto, and drafting here is {}",
           o.mtp_path, draft_mode_name(o.draft));
    if (o.link) fail("--mtp {}: a pipeline verifies no drafts", o.mtp_path);
    impl->mtp_file = gguf::File::open(o.mtp_path);
    impl->model->load_mtp(*impl->mtp_file, static_cast<uint32_t>(impl->file->n_parts()));
  } else if (o.draft == DraftMode::kMtp ||
             (o.draft == DraftMode::kAuto && impl->model->n_mtp_layers() > 0 && !o.link)) {
    impl->model->load_mtp(*impl->file);
  }
  impl->link = o.link;
  impl->tokenizer = Tokenizer::from_gguf(*impl->file);
  if (o.kv_slots < 1) fail("kv_slots {}: expected at least 1 sequence", o.kv_slots);
  const HParams& hp = impl->model->hparams();
  if (impl->tokenizer->n_vocab() > hp.n_vocab)
    fail("the tokenizer has {} tokens but the model's embedding has {} rows", impl->tokenizer->n_vocab(), hp.n_vocab);
  impl->grammars = std::make_unique<GrammarCache>(*impl->tokenizer, hp.n_vocab);
  if (o.n_ctx < 0) fail("context size {} is negative", o.n_ctx);
  // 0: the trained length, at most 4096. A larger explicit size is honoured (as llama.cpp does):
  // positions past the trained length may degrade, so it is said, never silently capped.
  impl->n_ctx = o.n_ctx > 0 ? o.n_ctx : hp.n_ctx_train > 0 ? std::min(4096, hp.n_ctx_train) : 4096;
  if (hp.n_ctx_train > 0 && impl->n_ctx > hp.n_ctx_train)
    SLUICE_LOG_WARN("warning: context {} exceeds the model's trained context {}; output past {} tokens may degrade",
                    impl->n_ctx, hp.n_ctx_train, hp.n_ctx_train);
  impl->kv_config = engine_kv_config(o.kv_type_k, o.kv_type_v);
  const std::unique_ptr<KvCache> kv_shape = impl->make_kv_cache(impl->n_ctx);
  const ExpertPlan plan =
      plan_experts(*impl->file, *impl->model, o, *kv_shape, impl->n_ctx, impl->mtp_file.get());
  const MemoryFacts& f = plan.facts;
  const uint64_t token_bytes =
      f.resident_bytes + (f.n_expert > 0 ? f.routed_bytes / f.n_expert * f.n_expert_used : 0);
  impl->pool = std::make_unique<ThreadPool>(
      o.n_threads > 0 ? o.n_threads : threads_for_work(default_thread_count(), token_bytes));
  impl->experts = make_expert_store(*impl->file, *impl->model, o, plan, impl->mtp_file.get());
  impl->model->set_prefetch(o.prefetch && plan.memory.placement == Placement::kStream);
  impl->info.routing = install_routing_tap(*impl);

  ModelInfo& mi = impl->info;
  mi.architecture = hp.arch;
  mi.name = impl->file->get_string_or("general.name", "");
  mi.n_layer = hp.n_layer;
  mi.n_embd = hp.n_embd;
  mi.n_vocab = hp.n_vocab;
  mi.n_ctx_train = hp.n_ctx_train;
  mi.n_expert = hp.n_expert;
  mi.n_expert_used = hp.n_expert_used;
  mi.file_bytes = impl->file->total_size();
  mi.chat_template = o.chat_template.empty() ? impl->file->get_string_or("tokenizer.chat_template", "") : o.chat_template;
  const Tokenizer& tk = *impl->tokenizer;
  if (tk.bos() >= 0) mi.bos_token = tk.token_text(tk.bos());
  if (tk.eos() >= 0) mi.eos_token = tk.token_text(tk.eos());
  mi.experts_mode = placement_name(plan.memory.placement);
  mi.experts_detail = impl->experts->describe() + "; " + plan.memory.reason;
  mi.resident_bytes = plan.facts.resident_bytes;
  mi.routed_bytes = plan.facts.routed_bytes;
  mi.expert_cache_bytes = plan.memory.cache_bytes;
  mi.n_ctx = impl->n_ctx;
  mi.kv_bytes = plan.memory.kv_bytes;
  mi.memlock_limit = read_meminfo().memlock_limit.value_or(0);
  mi.layer_begin = impl->model->layer_begin();
  mi.layer_end = impl->model->layer_end();
  if (impl->link) {
    mi.stage = impl->link->stage();
    mi.n_stages = impl->link->n_stages();
  }
  impl->load_seconds = timer.seconds();
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const ModelInfo& Engine::info() const { return impl_->info; }

const std::string& Engine::Impl::model_id() {
  std::call_once(model_id_once, [&] { model_id_value = model_fingerprint(*file); });
  return model_id_value;
}
double Engine::load_seconds() const { return impl_->load_seconds; }

std::vector<int32_t> Engine::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  return impl_->tokenizer->encode(text, add_special, parse_special);
}

std::string Engine::detokenize(std::span<const int32_t> tokens) const {
  return impl_->tokenizer->decode(std::vector<int32_t>(tokens.begin(), tokens.end()));
}

bool Engine::is_eog(int32_t token) const { return impl_->tokenizer->is_eog(token); }

void Engine::check_grammar(std::string_view grammar) const { impl_->grammars->get(grammar); }

int32_t Engine::share_token(int32_t token) { return impl_->link ? impl_->link->share_token(token) : token; }

void engine_forward(Engine::Impl& e, const Batch& batch, KvCache& kv, std::vector<float>& logits,
                    std::vector<float>* final_hidden) {
  Model& m = *e.model;
  if (!e.link) {
    // forward_stage leaves the final residual rows in its buffer; the caller's when it wants them.
    std::vector<float> rows;
    return m.forward_stage(*e.pool, batch, kv, *e.experts, final_hidden ? *final_hidden : rows,
                           logits);
  }
  std::vector<float> hidden;
  if (!m.first_stage()) {
    hidden.resize(batch.size() * m.hidden_width());
    e.link->recv_hidden(hidden);
  }
  m.forward_stage(*e.pool, batch, kv, *e.experts, hidden, logits);
  if (!m.last_stage()) e.link->send_hidden(hidden);
}

Generation::Step decode_step(Engine::Impl& e, Generation& gen, std::span<const float> rows,
                             std::span<const int32_t> drafts, int n_used, int n_ctx,
                             const std::function<bool(const Generation::Sampled&)>& emit) {
  const DecodeJob job{&gen, rows, drafts, n_used, emit};
  return std::move(decode_steps(e, std::span<const DecodeJob>(&job, 1), n_ctx)[0]);
}

std::vector<Generation::Step> decode_steps(Engine::Impl& e, std::span<const DecodeJob> jobs,
                                           int n_ctx) {
  std::vector<Generation::Step> out(jobs.size());
  // Every stage knows when a step sampled nothing (prefill chunks that end no prompt): no message,
  // so the next chunk can start on this stage while later stages still compute this one.
  if (jobs.empty()) return out;
  if (!e.link) {
    for (size_t i = 0; i < jobs.size(); ++i)
      out[i] = jobs[i].gen->take(jobs[i].rows, jobs[i].drafts, jobs[i].n_used, n_ctx, jobs[i].emit);
    return out;
  }
  for (const DecodeJob& j : jobs)
    if (!j.drafts.empty()) fail("a pipeline does not verify drafts");
  // Every stage counts the same tokens against the same limits, so all stop together; -1 marks a
  // sequence that reached its limit and sampled nothing.
  std::vector<int32_t> tokens(jobs.size(), -1);
  if (e.link->last()) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      out[i] = jobs[i].gen->take(jobs[i].rows, {}, jobs[i].n_used, n_ctx, jobs[i].emit);
      if (!out[i].tokens.empty()) tokens[i] = out[i].tokens.back();
    }
    e.link->share_tokens(tokens);
    return out;
  }
  e.link->share_tokens(tokens);
  for (size_t i = 0; i < jobs.size(); ++i) {
    Generation& gen = *jobs[i].gen;
    if (gen.limit_reached(jobs[i].n_used, n_ctx)) continue;
    // The last stage samples nothing where a grammar allows no token; so does this one.
    if (tokens[i] < 0 && gen.grammar_blocked()) continue;
    if (tokens[i] < 0)
      fail("{} sampled no token where {} expected one: the stages disagree on the step",
           e.link->describe(e.link->n_stages() - 1), e.link->describe(e.link->stage()));
    out[i] = gen.take_sampled(tokens[i], jobs[i].emit);
  }
  return out;
}

ExpertStats Engine::expert_stats() const {
  ExpertStoreStats s = impl_->experts->stats();
  return {s.requests, s.hits, s.misses, s.bytes_read, s.read_seconds, s.stall_seconds, s.prefetch_issued, s.prefetch_used,
          s.certain_issued, s.certain_used, s.cache_bytes};
}

ExpertCacheMap Engine::expert_cache_map() const {
  ExpertCacheMap m;
  impl_->experts->cache_map(m);
  return m;
}

struct Session::Impl {
  Engine::Impl* engine = nullptr;
  std::unique_ptr<KvCache> kv;
  std::vector<int32_t> tokens;  // context held in kv (sequence 0)
  std::vector<float> logits;    // after the last evaluated token
  int reused = 0;               // prompt tokens the last evaluate() took from the cache
  std::unique_ptr<MtpDrafter> mtp;  // with the model's MTP block loaded: its cache and hidden rows

  // Every truncation of the context goes through here, so the MTP drafter drops what follows.
  void truncate(int n) {
    kv->truncate(0, n);
    if (mtp) mtp->truncate(kv->length(0));
  }

  // Evaluates toks[from, end) at their positions. Logits of the last `n_rows` tokens go to `rows`
  // (n_rows × n_vocab, all tokens when n_rows < 0); `logits` keeps the last token's. `exact`:
  // every row as a one-token pass computes it (ExactRows), for verifying drafts.
  void run(std::span<const int32_t> toks, int from, std::vector<float>* rows, int n_rows = -1, bool exact = false) {
    const ExactRows exact_rows(exact);
    Model& m = *engine->model;
    const int n_vocab = m.hparams().n_vocab;
    const int n = static_cast<int>(toks.size());
    const int first_row = rows ? (n_rows < 0 ? 0 : n - n_rows) : n;
    ExpertsLease lease(*engine, "a Session");
    Batch b;
    std::vector<float> out, hidden;
    Progress progress("prompt", static_cast<uint64_t>(n - from), "tokens");
    const int chunk = session_prefill_chunk();
    for (int start = from; start < n; start += chunk) {
      const int end = std::min(n, start + chunk);
      b.clear();
      for (int i = start; i < end; ++i) b.add(toks[i], i, 0, i >= first_row || i == end - 1);
      try {
        engine_forward(*engine, b, *kv, out, mtp ? &hidden : nullptr);
      } catch (...) {
        // The cache holds only fully evaluated steps; forget the rest so the session stays usable.
        tokens.resize(std::min<size_t>(tokens.size(), kv->length(0)));
        throw;
      }
      // Only the last pipeline stage has logits.
      if (out.empty()) {
        logits.clear();
      } else {
        // Rows come in batch order: the chunk's rows from first_row on, or only its last one.
        const int kept = std::max(0, end - std::max(start, first_row));
        if (rows) rows->insert(rows->end(), out.end() - static_cast<ptrdiff_t>(kept) * n_vocab, out.end());
        logits.assign(out.end() - n_vocab, out.end());
      }
      if (mtp) mtp->add_hidden(*engine->pool, start, hidden);
      progress.update(static_cast<uint64_t>(end - from));
    }
  }
};

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

std::unique_ptr<Session> Engine::new_session(int n_ctx) {
  if (n_ctx < 0) fail("context size {} is negative", n_ctx);
  if (n_ctx == 0) n_ctx = impl_->n_ctx;
  auto s = std::make_unique<Session::Impl>();
  s->engine = impl_.get();
  s->kv = impl_->make_kv_cache(n_ctx);
  if (impl_->model->mtp_loaded())
    s->mtp = std::make_unique<MtpDrafter>(*impl_->model, n_ctx, impl_->kv_config);
  return std::unique_ptr<Session>(new Session(std::move(s)));
}

int Session::n_ctx() const { return impl_->kv->n_ctx(); }
const std::vector<int32_t>& Session::tokens() const { return impl_->tokens; }

int Session::reused() const { return impl_->reused; }

void Session::save(const std::string& path, const std::string& app_data) const {
  const Impl& s = *impl_;
  if (s.tokens.empty()) fail("nothing to save: the session holds no tokens");
  KvState st;
  st.model_id = s.engine->model_id();
  st.kv_id = s.kv->layout_id();
  st.app_data = app_data;
  st.tokens = s.tokens;
  st.logits = s.logits;
  st.kv = s.kv->export_prefix(0, static_cast<int>(s.tokens.size()));
  write_kv_state(path, st);
}

std::string Session::load(const std::string& path, std::string* app_data) {
  Impl& s = *impl_;
  KvState st = read_kv_state(path);
  if (st.model_id != s.engine->model_id())
    return fmt::format("'{}' was saved with another model file ({}; this is {})", path, st.model_id, s.engine->model_id());
  const std::string layout = s.kv->layout_id();
  if (st.kv_id != layout)
    return fmt::format("'{}' holds a KV cache of another type or layout ({}; this session: {})", path, st.kv_id, layout);
  if (st.tokens.empty() || static_cast<int>(st.tokens.size()) > s.kv->n_ctx())
    return fmt::format("'{}' holds {} tokens, this context holds {}", path, st.tokens.size(), s.kv->n_ctx());
  if (st.logits.size() != static_cast<size_t>(s.engine->model->hparams().n_vocab))
    fail("KV state '{}': {} logits, the model has {} tokens", path, st.logits.size(), s.engine->model->hparams().n_vocab);
  try {
    s.kv->import_prefix(0, static_cast<int>(st.tokens.size()), st.kv);
    // No hidden rows come with a restored context: MTP drafts wait for a fresh evaluation.
    if (s.mtp) s.mtp->truncate(0);
  } catch (...) {
    s.tokens.clear();  // the cache lost its old rows with the failed import
    throw;
  }
  s.tokens = std::move(st.tokens);
  s.logits = std::move(st.logits);
  s.reused = 0;
  if (app_data) *app_data = std::move(st.app_data);
  return "";
}

void Session::clear() {
  impl_->tokens.clear();
  impl_->truncate(0);
}

std::span<const float> Session::evaluate(std::span<const int32_t> toks) {
  Impl& s = *impl_;
  if (toks.empty()) fail("cannot evaluate an empty prompt");
  if (static_cast<int>(toks.size()) > s.kv->n_ctx())
    fail("prompt of {} tokens exceeds the context of {} tokens", toks.size(), s.kv->n_ctx());
  s.truncate(reusable_prefix(s.tokens, toks));
  // A cache may keep less than asked (deepseek4's rings cannot be rolled back far).
  const int common = s.kv->length(0);
  s.reused = common;
  s.tokens.assign(toks.begin(), toks.end());
  s.run(toks, common, nullptr);
  return s.logits;
}

std::vector<float> Session::evaluate_all(std::span<const int32_t> toks) {
  Impl& s = *impl_;
  if (static_cast<int>(toks.size()) > s.kv->n_ctx())
    fail("{} tokens exceed the context of {} tokens", toks.size(), s.kv->n_ctx());
  clear();
  std::vector<float> all;
  s.tokens.assign(toks.begin(), toks.end());
  s.run(toks, 0, &all);
  return all;
}

GenerateResult Session::generate(std::span<const int32_t> prompt, const GenerateOptions& o, const TokenCallback& on_token) {
  Impl& s = *impl_;
  // A bad grammar fails before the prompt costs anything.
  std::shared_ptr<const grammar::TokenGrammar> grammar;
  if (!o.grammar.empty()) grammar = s.engine->grammars->get(o.grammar);
  Timer t;
  evaluate(prompt);
  const double prefill_seconds = t.seconds();
  // A pipeline's stages would all have to verify the same drafts: it decodes one token per pass.
  GenerateOptions go = o;
  if (s.engine->link) go.draft.mode = DraftMode::kNone;
  if (go.draft.mode == DraftMode::kMtp && !s.mtp) {
    if (s.engine->model->n_mtp_layers() == 0)
      fail(
          "--draft mtp: the model file has no MTP (nextn) layers (a DeepSeek V4 block comes in "
          "its own GGUF: --mtp FILE)");
    fail(
        "--draft mtp: the engine was loaded without the model's MTP layers (EngineOptions::draft "
        "is {})",
        draft_mode_name(s.engine->options.draft));
  }
  Generation gen(*s.engine->tokenizer, go, prompt, s.reused, std::move(grammar));
  t.reset();
  auto emit = [&](const Generation::Sampled& next) { return !on_token || on_token(next.token, next.text); };
  // The logits of one step: the prompt's last token, then each decode pass's pending token and drafts.
  std::vector<float> rows = s.logits;
  std::vector<int32_t> drafts;
  Generation::MtpSource mtp_source;
  if (s.mtp)
    mtp_source = [&](int k) {
      ExpertsLease lease(*s.engine, "a Session");
      return s.mtp->draft(*s.engine->pool, *s.engine->experts, s.tokens, k);
    };
  for (;;) {
    const int n_used = static_cast<int>(s.tokens.size());
    const Generation::Step step = decode_step(*s.engine, gen, rows, drafts, n_used, s.kv->n_ctx(), emit);
    // KV positions past the last accepted draft hold rejected tokens.
    s.truncate(n_used + step.n_accepted);
    // Finished: the evaluated drafts stay (a follow-up prompt may reuse them), the last token is
    // not evaluated.
    const size_t n_keep = gen.finished() ? step.n_accepted : step.tokens.size();
    s.tokens.insert(s.tokens.end(), step.tokens.begin(), step.tokens.begin() + n_keep);
    if (gen.finished()) break;
    drafts = gen.propose(s.tokens, s.kv->n_ctx(), mtp_source);
    // Usually only the pending token is unevaluated; a cache that could not roll back that far
    // (deepseek4's rings) kept a shorter prefix, and the rest is evaluated again here.
    std::vector<int32_t> toks = s.tokens;
    toks.insert(toks.end(), drafts.begin(), drafts.end());
    rows.clear();
    s.run(toks, s.kv->length(0), &rows, static_cast<int>(drafts.size()) + 1, !drafts.empty());
  }
  std::string tail;
  GenerateResult r = gen.finish(&tail);
  if (on_token && !tail.empty()) on_token(-1, tail);
  r.prefill_seconds = prefill_seconds;
  r.decode_seconds = t.seconds();
  return r;
}

}  // namespace sluice
