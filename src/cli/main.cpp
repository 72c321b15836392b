// `sluice` entry point: subcommand dispatch, --version, llama.cpp flag spellings and top-level
// error reporting (argument errors exit 2, other errors 1, each prefixed with `sluice CMD:`).
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
};

// llama.cpp spellings CLI11 cannot declare (several letters after one dash), rewritten to ours.
constexpr std::pair<std::string_view, const char*> kAliases[] = {
    {"-np", "--parallel"}, {"-sys", "--system"}, {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}};

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

void usage() {
  std::fprintf(stderr, "usage: sluice COMMAND [options]   (sluice COMMAND --help for details)\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(stderr, "  %-16s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0 || std::strcmp(argv[1], "version") == 0) {
    std::printf("sluice %s\n", SLUICE_VERSION);
    return 0;
  }
  tune_malloc();
  for (int i = 2; i < argc; ++i)
    for (const auto& [from, to] : kAliases)
      if (argv[i] == from) argv[i] = const_cast<char*>(to);
  for (const auto& c : kCommands) {
    if (std::string_view(argv[1]) != c.name) continue;
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
  usage();
  return 2;
}
