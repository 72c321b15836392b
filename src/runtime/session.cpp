// Session: one sequence over the engine's model. It keeps its token history next to its KV cache
// so a new prompt only evaluates what differs from the cached prefix; prompts are evaluated in
// chunks (session_prefill_chunk) to bound activation memory; generate() is the single-sequence
// decode loop over the step primitives (step.h).
#include <algorithm>

#include "core/error.h"
#include "core/progress.h"
#include "core/timer.h"
#include "model/model.h"
#include "ops/matmul.h"
#include "runtime/engine_impl.h"
#include "runtime/kv_state.h"
#include "runtime/mtp_draft.h"
#include "runtime/prefill_chunk.h"
#include "runtime/step.h"
#include "sluice/sluice.h"

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

struct Session::Impl {
  Engine::Impl* engine = nullptr;
  std::unique_ptr<KvCache> kv;
  std::vector<int32_t> tokens;  // context held in kv (sequence 0)
  std::vector<float> logits;    // after the last evaluated token
  int reused = 0;               // prompt tokens the last evaluate() took from the cache
  std::unique_ptr<MtpDrafter> mtp;  // with the model's MTP block loaded: its cache and hidden rows
  std::optional<DraftPolicy> draft_policy;  // what drafting cost and earned over earlier requests

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
  Generation gen(*s.engine->tokenizer, go, prompt, s.reused, std::move(grammar),
                 &DraftPolicy::kept(s.draft_policy, go.draft));
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
