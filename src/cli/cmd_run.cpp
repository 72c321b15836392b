// `sluice run`: generate text from a prompt, streaming it to stdout; timings go to stderr.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/pipeline.h"
#include "core/error.h"

namespace sluice::cli {

int cmd_run(int argc, char** argv) {
  CLI::App app{"Generate text from a prompt", "sluice run"};
  ModelFlags mf;
  add_model_flags(app, mf);
  GenerateOptions go;
  add_sampling_flags(app, go.sampling);
  DraftFlags df;
  add_draft_flags(app, df);
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
  std::string session_file;
  app.add_option("--session", session_file,
                 "restore the KV state saved in FILE (when model and KV type match) and save it there at exit");
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
  fmt::print(stderr, "model: {} ({}, {} layers, {} experts top-{}), loaded in {:.2f} s\n", mf.model, mi.architecture,
             mi.n_layer, mi.n_expert, mi.n_expert_used, engine->load_seconds());
  fmt::print(stderr, "resident weights {:.1f} MB, routed experts {:.1f} MB; {}\n", mi.resident_bytes / 1e6,
             mi.routed_bytes / 1e6, mi.experts_detail);
  fmt::print(stderr, "KV cache {:.1f} MB at {} tokens of context; lockable memory {}\n", mi.kv_bytes / 1e6, mi.n_ctx,
             mi.memlock_limit ? fmt::format("{:.1f} MB", mi.memlock_limit / 1e6) : std::string("unlimited"));
  check_grammar_flags(*engine, gf, go.grammar);
  auto tokens = engine->tokenize(prompt, !no_bos);
  auto session = engine->new_session();
  if (!session_file.empty()) restore_session(*session, session_file);
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
  if (!session_file.empty()) {
    fmt::print(stderr, "session: {} prompt tokens reused, {} evaluated\n", session->reused(), r.n_prompt);
    session->save(session_file);
    fmt::print(stderr, "session: saved {} tokens to {}\n", session->tokens().size(), session_file);
  }
  const int n_gen = static_cast<int>(r.tokens.size());
  const bool context_full = static_cast<int>(session->tokens().size()) + 1 >= session->n_ctx();
  if (r.finish == FinishReason::kLength && n_gen < go.max_tokens && context_full)
    fmt::print(stderr, "generation stopped after {} of {} tokens: the context of {} tokens is full (-c to enlarge it)\n", n_gen,
               go.max_tokens, session->n_ctx());
  else if (r.finish == FinishReason::kLength && n_gen < go.max_tokens)
    fmt::print(stderr, "generation stopped after {} tokens: no token of the vocabulary continues the grammar\n", n_gen);
  if (!go.grammar.empty())
    fmt::print(stderr, "grammar: {}; masks and matching {:.3f} ms per token\n",
               r.finish == FinishReason::kLength ? "output unfinished (length)" : "output complete",
               n_gen ? 1e3 * r.grammar_seconds / n_gen : 0.0);
  fmt::print(stderr, "prefill: {} tokens in {:.3f} s ({:.2f} t/s); decode: {} tokens in {:.3f} s ({:.2f} t/s)\n",
             r.n_prompt, r.prefill_seconds, r.n_prompt / std::max(r.prefill_seconds, 1e-9), n_gen,
             r.decode_seconds, n_gen / std::max(r.decode_seconds, 1e-9));
  if (r.n_drafted > 0 || go.draft.mode != DraftMode::kNone)
    fmt::print(stderr, "draft ({}): {} drafted, {} accepted ({:.1f} %), {} tokens in {} forward passes ({:.2f} tokens/pass)\n",
               draft_mode_name(go.draft.mode), r.n_drafted, r.n_accepted,
               r.n_drafted ? 100.0 * r.n_accepted / r.n_drafted : 0.0, n_gen, r.n_steps,
               r.n_steps ? static_cast<double>(n_gen) / r.n_steps : 0.0);
  if (stats) {
    print_pipeline_traffic(eo, r.n_prompt + n_gen);
    ExpertStats es = engine->expert_stats();
    const double secs = r.prefill_seconds + r.decode_seconds;
    const int n_tok = r.n_prompt + n_gen;
    fmt::print(stderr,
               "experts: {} requests, hit rate {:.1f} %, {} misses, {:.1f} MB read ({:.1f} MB/s), stall {:.3f} s/token, "
               "prefetch precision {:.1f} % recall {:.1f} %\n",
               es.requests, es.requests ? 100.0 * es.hits / es.requests : 0.0, es.misses, es.bytes_read / 1e6,
               es.bytes_read / 1e6 / std::max(secs, 1e-9), es.stall_seconds / std::max(n_tok, 1),
               es.prefetch_issued ? 100.0 * es.prefetch_used / es.prefetch_issued : 0.0,
               es.requests ? 100.0 * es.prefetch_used / es.requests : 0.0);
  }
  return 0;
}

}  // namespace sluice::cli
