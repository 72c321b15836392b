// `sluice` entry point: subcommand dispatch, --help / help [COMMAND] (on stdout), --version,
// top-level error reporting (argument errors exit 2, other errors 1, each prefixed with `sluice CMD:`).
#include <CLI/CLI.hpp>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <cstdio>
#include <cstring>
#include <exception>
#include <string_view>
#include <utility>

#include "cli/commands.h"
#include "cli/pipeline.h"
#include "core/error.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*fn)(int, char**);
};

constexpr Command kCommands[] = {
    {"inspect", "show a model's architecture, tensors, sizes and a RAM verdict",
     sluice::cli::cmd_inspect},
    {"gen-model", "write a random-weight GGUF in the real layout of an architecture", sluice::cli::cmd_gen_model},
    {"tokenize", "show the token ids and pieces of a text", sluice::cli::cmd_tokenize},
    {"convert-tokenizer", "write a vocab-only GGUF from a HF tokenizer.json", sluice::cli::cmd_convert_tokenizer},
    {"run", "generate text from a prompt", sluice::cli::cmd_run},
    {"chat", "multi-turn chat in the terminal with the model's chat template", sluice::cli::cmd_chat},
    {"logits", "evaluate reference tokens and write logits as JSON", sluice::cli::cmd_logits},
    {"perplexity", "sliding-window perplexity of a text file", sluice::cli::cmd_perplexity},
    {"route-stats", "routing statistics of a model on a text (reuse, skew, cache hit rates)",
     sluice::cli::cmd_route_stats},
    {"serve", "OpenAI-compatible HTTP server with continuous batching", sluice::cli::cmd_serve},
    {"render-template", "render a Jinja chat template with a JSON context", sluice::cli::cmd_render_template},
    {"pack-gguf", "write a GGUF from a JSON manifest of metadata and raw tensors", sluice::cli::cmd_pack_gguf},
    {"bench", "measure prefill and decode tokens/s (llama-bench style)", sluice::cli::cmd_bench},
    {"pull", "download ORG/NAME[:QUANT] from the Hugging Face hub into its cache", sluice::cli::cmd_pull},
    {"list", "the cached hub models: size, quant and RAM verdict", sluice::cli::cmd_list},
    {"rm", "delete a cached hub model (a repository or one quant)", sluice::cli::cmd_rm},
};

// A forward pass allocates its activations per layer (a 512-token prefill chunk: several 4 MiB
// buffers per layer). glibc's default serves blocks past its adaptive mmap threshold with fresh
// mappings and trims the heap top above 128 KiB, so each layer paid page faults and zeroing of
// new pages again: 20 % of a pp512 on the 16-layer qwen3-30b-a3b preset (58.7 -> 73.1 t/s with
// the settings below, `sluice bench -p 512`). With them freed activations stay in the heap for
// the next layer; what stays is bounded by the peak the pass needed anyway.
void tune_malloc() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
#endif
}

// The command list: on stdout when asked for (--help, help), on stderr after a usage error.
void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: sluice COMMAND [options]   (sluice help COMMAND or sluice COMMAND --help for "
               "details)\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-18s %s\n", c.name, c.summary);
  std::fprintf(out, "  %-18s %s\n  %-18s %s\n", "help [COMMAND]", "this list, or a command's options",
               "version", "the version (also --version)");
}

const Command* find_command(std::string_view name) {
  for (const auto& c : kCommands)
    if (name == c.name) return &c;
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string_view first = argv[1];
  if (first == "--help" || first == "-h" ||
      (first == "help" && (argc == 2 || (argc == 3 && std::string_view(argv[2]) == "help")))) {
    usage(stdout);
    return 0;
  }
  if (first == "--version" || first == "version") {
    std::printf("sluice %s\n", SLUICE_VERSION);
    return 0;
  }
  // `sluice help CMD` is `sluice CMD --help`.
  char help_flag[] = "--help";
  char* help_argv[] = {argv[0], argc > 2 ? argv[2] : nullptr, help_flag, nullptr};
  if (first == "help") {
    if (argc > 3 || !find_command(argv[2])) {
      if (argc > 3) std::fprintf(stderr, "sluice help: give one command name\n\n");
      else std::fprintf(stderr, "sluice help: unknown command '%s'\n\n", argv[2]);
      usage(stderr);
      return 2;
    }
    argc = 3;
    argv = help_argv;
  }
  tune_malloc();
  if (const Command* found = find_command(argv[1])) {
    const Command& c = *found;
    // Under mpirun with several processes each is a pipeline stage; an error on one ends all.
    int code = 0;
    try {
      if (std::string_view(c.name) == "serve") sluice::cli::block_serve_signals();
      sluice::cli::pipeline_start(&argc, &argv, c.name);
      code = c.fn(argc - 1, argv + 1);
    } catch (const CLI::ParseError& e) {
      std::fprintf(stderr, "sluice %s: %s\n", c.name, e.what());
      code = 2;
    } catch (const sluice::Error& e) {
      std::fprintf(stderr, "sluice %s: error: %s\n", c.name, e.what());
      code = 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sluice %s: unexpected error: %s\n", c.name, e.what());
      code = 1;
    }
    if (code != 0) sluice::cli::pipeline_abort(code);
    sluice::cli::pipeline_stop();
    return code;
  }
  std::fprintf(stderr, "sluice: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
