// The `sluice` subcommands. Each lives in its own cmd_*.cpp, parses its own flags with CLI11 and
// returns a process exit code; main() dispatches on the first argument and turns any
// sluice::Error into a one-line message and exit code 1 (argument errors: exit code 2).
#pragma once

#include <CLI/CLI.hpp>

#include "cli/flag_spellings.h"

// Parses argv into `app` after rewriting llama.cpp's spellings and refusing unknown flags
// (cli/flag_spellings.h). --help prints and returns 0 from the calling command; a flag error
// (naming the flag) propagates to main(), which prints it as "sluice CMD: ..." and exits 2.
#define SLUICE_PARSE(app, argc, argv)                                              \
  try {                                                                            \
    ::sluice::cli::CommandLine sluice_line_((app), (argc), (argv));                \
    (app).parse(sluice_line_.argc(), sluice_line_.argv());                         \
  } catch (const CLI::ParseError& e) {                                             \
    if (e.get_exit_code() != 0) throw;      \
    return (app).exit(e);                   \
  }

namespace sluice::cli {

int cmd_inspect(int argc, char** argv);
int cmd_gen_model(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_convert_tokenizer(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_logits(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);
int cmd_route_stats(int argc, char** argv);
int cmd_serve(int argc, char** argv);
// Blocks SIGINT/SIGTERM in the calling thread, so in every thread started after it: serve takes
// them on one thread of its own. main calls it before MPI starts its threads.
void block_serve_signals();
int cmd_render_template(int argc, char** argv);
int cmd_pack_gguf(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_pull(int argc, char** argv);
int cmd_list(int argc, char** argv);
int cmd_rm(int argc, char** argv);

}  // namespace sluice::cli
