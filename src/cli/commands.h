// The `sluice` subcommands. Each lives in its own cmd_*.cpp, parses its own flags with CLI11 and
// returns a process exit code; main() dispatches on the first argument and turns any
// sluice::Error into a one-line message and exit code 1.
#pragma once

#include <CLI/CLI.hpp>

// Parses argv into `app`; prints help or the flag error (naming the flag) and returns from the
// calling command with CLI11's exit code.
#define SLUICE_PARSE(app, argc, argv)   \
  try {                                 \
    (app).parse((argc), (argv));        \
  } catch (const CLI::ParseError& e) {  \
    return (app).exit(e);               \
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
int cmd_serve(int argc, char** argv);
int cmd_render_template(int argc, char** argv);
int cmd_pack_gguf(int argc, char** argv);
int cmd_bench(int argc, char** argv);

}  // namespace sluice::cli
