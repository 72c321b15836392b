// `sluice chat`: a multi-turn conversation with a model in the terminal. The loop itself is
// chat::ChatRepl; this file parses flags, loads the engine, installs the SIGINT handler that
// stops a reply, and picks the line source (libedit on a TTY, plain lines from a pipe).
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <memory>

#include "chat/chat_repl.h"
#include "cli/commands.h"
#include "cli/line_editor.h"
#include "cli/options.h"
#include "cli/session_file.h"
#include "core/log.h"

namespace sluice::cli {

namespace {

// Set by SIGINT while a reply is generated; the token callback polls it. A lock-free atomic store
// is async-signal-safe.
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_sigint(int) { g_stop.store(true); }

}  // namespace

int cmd_chat(int argc, char** argv) {
  CLI::App app{"Chat with a model: multi-turn, streamed, with the model's chat template", "sluice chat"};
  ModelFlags mf;
  add_model_flags(app, mf);
  add_chat_template_flags(app, mf);
  chat::ChatConfig cfg;
  cfg.generate.max_tokens = 1024;
  add_sampling_flags(app, cfg.generate.sampling);
  DraftFlags df;
  add_draft_flags(app, df);
  GrammarFlags gf;
  add_grammar_flags(app, gf);
  app.add_option("-n,--n-predict,--predict", cfg.generate.max_tokens, "most tokens per reply")
      ->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--system", cfg.system, "system prompt (also -sys)");
  bool no_history = false, no_shift = false;
  SessionFile session_file(
      app, "continue the conversation saved in FILE (when model and KV type match; also /load FILE); save it at exit");
  app.add_flag("--no-history", no_history, "do not read or write the history file");
  app.add_flag("--no-context-shift", no_shift,
               "when the context fills, stop and ask for /clear or /ctx instead of dropping the oldest messages");
  SLUICE_PARSE(app, argc, argv);
  cfg.context_shift = !no_shift;
  cfg.generate.draft = draft_options(df);
  cfg.generate.grammar = grammar_from_flags(gf);

  EngineOptions eo = engine_options(mf);
  set_engine_draft(eo, df, cfg.generate.draft);
  auto engine = Engine::load(eo);
  check_grammar_flags(*engine, gf, cfg.generate.grammar);
  const ModelInfo& mi = engine->info();
  SLUICE_LOG_INFO("model: {} ({}, {} layers, {} experts top-{}), loaded in {:.2f} s; {}", mf.model, mi.architecture,
                  mi.n_layer, mi.n_expert, mi.n_expert_used, engine->load_seconds(), mi.experts_detail);

  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);

  chat::ChatRepl repl(*engine, cfg, g_stop, std::cout, std::cerr);
  if (!repl.has_template())
    SLUICE_LOG_INFO("note: the model has no chat template; using the plain \"User: ...\\nAssistant: ...\" format");
  SLUICE_LOG_INFO("/help lists the commands; Ctrl+C stops a reply, Ctrl+D quits");
  session_file.restore([&](const std::string& path) { return repl.load_state(path); });
  int rc = 0;
  if (isatty(STDIN_FILENO)) {
    LineEditor editor("sluice", no_history ? "" : chat_history_path());
    rc = repl.run(editor);
  } else {
    StreamLineReader plain(std::cin);
    rc = repl.run(plain);
  }
  if (!repl.messages().empty()) session_file.save([&](const std::string& path) { repl.save_state(path); });
  return rc;
}

}  // namespace sluice::cli
