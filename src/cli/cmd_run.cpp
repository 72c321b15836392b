// `sluice run`: generate text from a prompt, streaming it to stdout; timings go to stderr (not
// under -q). With --session FILE the text saved there is continued and saved back.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/pipeline.h"
#include "cli/session_file.h"
#include "core/error.h"
#include "core/log.h"
#include "core/units.h"

namespace sluice::cli {

namespace {

// --stats: asked for, so printed under -q too. Sizes in binary units, as everywhere else.
void print_run_stats(Engine& engine, const EngineOptions& eo, const GenerateResult& r) {
  const int n_tok = r.n_prompt + static_cast<int>(r.tokens.size());
  print_pipeline_traffic(eo, n_tok);
  const ExpertStats es = engine.expert_stats();
  const double secs = std::max(r.prefill_seconds + r.decode_seconds, 1e-9);
  constexpr double kMiB = 1024.0 * 1024.0;
  fmt::print(stderr,
             "experts: {} requests, hit rate {:.1f} %, {} misses; {:.1f} MiB read from disk ({:.1f} MiB/s; misses and "
             "prefetches), stall {:.3f} s/token\n",
             es.requests, es.requests ? 100.0 * es.hits / es.requests : 0.0, es.misses, es.bytes_read / kMiB,
             es.bytes_read / kMiB / secs, es.stall_seconds / std::max(n_tok, 1));
  fmt::print(stderr,
             "prefetch: {} experts read ahead, {} of them used; precision {:.1f} % (read-ahead experts that were used), "
             "recall {:.1f} % (expert requests a read-ahead served)\n",
             es.prefetch_issued, es.prefetch_used,
             es.prefetch_issued ? 100.0 * es.prefetch_used / es.prefetch_issued : 0.0,
             es.requests ? 100.0 * es.prefetch_used / es.requests : 0.0);
}

}  // namespace

int cmd_run(int argc, char** argv) {
  CLI::App app{"Generate text from a prompt", "sluice run"};
  ModelFlags mf;
  add_model_flags(app, mf);
  GenerateOptions go;
  add_sampling_flags(app, go.sampling);
  DraftFlags df;
  add_draft_flags(app, df);
  add_routing_trace_flag(app, mf);
  GrammarFlags gf;
  add_grammar_flags(app, gf);
  std::string prompt, prompt_file;
  bool stats = false, no_bos = false;
  auto* p = app.add_option("-p,--prompt", prompt, "prompt text");
  app.add_option("-f,--file", prompt_file, "read the prompt from a file ('-': standard input)")->excludes(p)->check(stdin_or_file());
  app.add_option("-n,--n-predict,--predict", go.max_tokens, "tokens to generate")->check(CLI::Range(0, 1 << 24))->capture_default_str();
  app.add_flag("--no-bos", no_bos, "do not add the model's BOS token");
  bool ignore_eos = false;
  app.add_flag("--ignore-eos", ignore_eos, "keep generating past the model's end-of-generation tokens");
  app.add_flag("--stats", stats, "print routing and expert-cache statistics at exit");
  SessionFile session_file(app,
                           "continue the text saved in FILE (when model and KV type match): the prompt is appended "
                           "to it, and the whole text is saved back at exit");
  SLUICE_PARSE(app, argc, argv);
  if (!prompt_file.empty()) prompt = read_text(prompt_file);
  if (prompt.empty()) fail("give a prompt with -p TEXT or -f FILE");
  go.stop_at_eog = !ignore_eos;
  go.draft = draft_options(df);
  go.grammar = grammar_from_flags(gf);

  EngineOptions eo = engine_options(mf);
  set_engine_draft(eo, df, go.draft);
  apply_pipeline(mf, eo);
  pipeline_output_from(0);
  auto engine = Engine::load(eo);
  const ModelInfo& mi = engine->info();
  SLUICE_LOG_INFO("model: {} ({}, {} layers, {} experts top-{}), loaded in {:.2f} s", mf.model, mi.architecture,
                  mi.n_layer, mi.n_expert, mi.n_expert_used, engine->load_seconds());
  SLUICE_LOG_INFO("resident weights {}, routed experts {}; {}", format_bytes(mi.resident_bytes),
                  format_bytes(mi.routed_bytes), mi.experts_detail);
  SLUICE_LOG_INFO("KV cache {} at {} tokens of context; lockable memory {}", format_bytes(mi.kv_bytes), mi.n_ctx,
                  mi.memlock_limit ? format_bytes(mi.memlock_limit) : std::string("unlimited"));
  check_grammar_flags(*engine, gf, go.grammar);
  auto session = engine->new_session();
  // A restored session is continued: the prompt follows its text (no second BOS), so only the
  // prompt is evaluated and the output goes on from there.
  const bool continued = session_file.restore([&](const std::string& path) {
    std::string conversation;
    std::string why = session->load(path, &conversation);
    // A chat's file holds its conversation too, which run would not save back.
    if (why.empty() && !conversation.empty()) {
      session->clear();
      why = fmt::format("'{}' holds a chat conversation (sluice chat --session continues it)", path);
    }
    if (why.empty())
      SLUICE_LOG_INFO("session: restored {} tokens from '{}'; the prompt continues them", session->tokens().size(), path);
    return why;
  });
  std::vector<int32_t> tokens = continued ? session->tokens() : std::vector<int32_t>{};
  const std::vector<int32_t> added = engine->tokenize(prompt, !no_bos && !continued);
  tokens.insert(tokens.end(), added.begin(), added.end());
  // The prompt is echoed once it is evaluated, so a terminal's prefill progress bar has the line.
  bool echoed = false;
  auto echo = [&] {
    if (!echoed) std::fputs(prompt.c_str(), stdout);
    echoed = true;
  };
  GenerateResult r = session->generate(tokens, go, [&](int32_t, std::string_view text) {
    echo();
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  echo();
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (session_file.enabled()) {
    SLUICE_LOG_INFO("session: {} prompt tokens reused, {} evaluated", session->reused(), r.n_prompt);
    // The last token printed is not evaluated by generate(); the saved text is what was printed,
    // so that the next run continues from there (when the context has room for it).
    std::vector<int32_t> all = tokens;
    all.insert(all.end(), r.tokens.begin(), r.tokens.end());
    if (all.size() > session->tokens().size() && static_cast<int>(all.size()) < session->n_ctx()) session->evaluate(all);
    session_file.save([&](const std::string& path) {
      session->save(path);
      SLUICE_LOG_INFO("session: saved {} tokens to '{}'", session->tokens().size(), path);
    });
  }
  const int n_gen = static_cast<int>(r.tokens.size());
  const bool context_full = static_cast<int>(session->tokens().size()) + 1 >= session->n_ctx();
  if (r.finish == FinishReason::kLength && n_gen < go.max_tokens && context_full)
    SLUICE_LOG_WARN("generation stopped after {} of {} tokens: the context of {} tokens is full (-c to enlarge it)", n_gen,
                    go.max_tokens, session->n_ctx());
  else if (r.finish == FinishReason::kLength && n_gen < go.max_tokens)
    SLUICE_LOG_WARN("generation stopped after {} tokens: no token of the vocabulary continues the grammar", n_gen);
  if (!go.grammar.empty())
    SLUICE_LOG_INFO("grammar: {}; masks and matching {:.3f} ms per token",
                    r.finish == FinishReason::kLength ? "output unfinished (length)" : "output complete",
                    n_gen ? 1e3 * r.grammar_seconds / n_gen : 0.0);
  SLUICE_LOG_INFO("prefill: {} tokens in {:.3f} s ({:.2f} t/s); decode: {} tokens in {:.3f} s ({:.2f} t/s)", r.n_prompt,
                  r.prefill_seconds, r.n_prompt / std::max(r.prefill_seconds, 1e-9), n_gen, r.decode_seconds,
                  n_gen / std::max(r.decode_seconds, 1e-9));
  // A pipeline verifies no drafts: its stages have no draft line.
  if (r.n_drafted > 0 || (go.draft.mode != DraftMode::kNone && pipeline_size() == 1))
    SLUICE_LOG_INFO("draft ({}): {} drafted, {} accepted ({:.1f} %), {} tokens in {} forward passes ({:.2f} tokens/pass)",
                    draft_mode_name(go.draft.mode), r.n_drafted, r.n_accepted,
                    r.n_drafted ? 100.0 * r.n_accepted / r.n_drafted : 0.0, n_gen, r.n_steps,
                    r.n_steps ? static_cast<double>(n_gen) / r.n_steps : 0.0);
  if (stats) print_run_stats(*engine, eo, r);
  return 0;
}

}  // namespace sluice::cli
