// Engine: the public API's loaded model (sluice/sluice.h): opens the file, loads the model, its
// tokenizer and MTP block, plans where the experts live and builds their store, and answers
// questions about the model. Sessions (session.cpp) and the Scheduler run it.
#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "core/meminfo.h"
#include "core/timer.h"
#include "core/units.h"
#include "gguf/gguf.h"
#include "model/archs/registry.h"
#include "model/model.h"
#include "runtime/engine_impl.h"
#include "runtime/expert_setup.h"
#include "runtime/kv_state.h"
#include "runtime/routing_taps.h"
#include "sluice/sluice.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

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
    auto recorder = make_trace_recorder(o.routing_trace, hp.n_layer, hp.n_expert, hp.n_expert_used, true);
    e.recorder = recorder.get();
    e.routing = std::move(recorder);
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
  impl->model->set_expert_shard(o.expert_shard.get());
  impl->model->set_head_shard(o.head_shard.get());
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
  const uint64_t token_bytes =
      plan.facts.resident_bytes + static_cast<uint64_t>(active_routed_bytes(plan.facts));
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
  // Each expert-parallel rank plans its own share under its own budget: say what it chose.
  if (o.expert_shard && impl->link)
    SLUICE_LOG_INFO("{}: {}", impl->link->describe(impl->link->stage()), mi.experts_detail);
  // And the rows of the output head it multiplies (model/head_shard.h).
  if (o.head_shard && impl->link) {
    const HeadRows r = impl->model->head_rows_owned();
    const MatView v = impl->model->head_slice();
    SLUICE_LOG_INFO("{}: output head rows {}:{} of {} ({})",
                    impl->link->describe(impl->link->stage()), r.begin, r.end, hp.n_vocab,
                    format_bytes(v.row_stride * static_cast<uint64_t>(v.n_out)));
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

ExpertStats Engine::expert_stats() const {
  ExpertStoreStats s = impl_->experts->stats();
  return {s.requests, s.hits, s.misses, s.bytes_read, s.read_seconds, s.stall_seconds, s.prefetch_issued, s.prefetch_used,
          s.certain_issued, s.certain_used, s.cache_bytes};
}

uint64_t Engine::routing_trace_rows() const { return impl_->recorder ? impl_->recorder->rows() : 0; }

ExpertCacheMap Engine::expert_cache_map() const {
  ExpertCacheMap m;
  impl_->experts->cache_map(m);
  return m;
}

}  // namespace sluice
