// Flags shared by the commands that load a model (run, chat, serve, logits, perplexity, bench):
// one definition so every command spells and validates them the same way.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "sluice/sluice.h"

namespace sluice::cli {

// The most prompt tokens a forward pass takes (runtime/prefill_chunk.h): -b/-ub are capped to it.
constexpr int kMaxPrefillChunk = 512;

// -hf/--hf-repo ORG/NAME[:QUANT] and --hf-file NAME: a model from the Hugging Face hub (cli/hub_model.h).
struct HubFlags {
  std::string repo;
  std::string file;
};

struct ModelFlags {
  std::string model;
  HubFlags hub;  // when given, `model` becomes the cached (downloaded if need be) file after parsing
  int threads = 0;
  int ctx = 0;  // 0: the model's trained context, at most 4096
  std::string experts = "auto";
  std::string cache_size;   // --ssd-streaming-cache-experts
  std::string mem_limit;    // --mem-limit
  std::string policy = "nextuse";
  bool streaming = false, cold = false, no_prefetch = false, no_mlock = false, debug = false;
  int64_t preload = -1;
  std::string cache_type_k = "f32", cache_type_v = "f32";  // -ctk / -ctv
  std::string stages;          // --stages A:B,C:D (pipeline)
  std::string split_mode = "layer";  // --split-mode layer|experts (mpirun -np N)
  std::string expert_replicas = "auto";  // --expert-replicas N|auto (--split-mode experts)
  double stage_timeout = 60;   // --stage-timeout seconds
  std::string routing_trace;   // --routing-trace FILE (run, bench, perplexity, serve)
  std::string replay_routing;  // --replay-routing FILE (bench)
  // llama.cpp's flags: mapped where they mean something here, else accepted with one warning.
  std::string gpu_layers;       // -ngl: no GPU backend
  std::string flash_attn;       // -fa on|off|auto: attention is always the CPU kernel
  std::string override_tensor;  // -ot: every tensor is in host memory already
  bool no_mmap = false;         // --no-mmap: experts read into RAM (--experts ram)
  bool mlock = false;           // --mlock: lock the expert cache (the default; --no-mlock contradicts)
  int batch = 0, ubatch = 0;    // -b, -ub: the prefill chunk
  int threads_batch = 0;        // -tb: one pool serves prefill and decode
  std::string chat_template;       // --chat-template NAME|TEXT (serve, chat)
  std::string chat_template_file;  // --chat-template-file FILE
  bool jinja = false;              // --jinja (accepted; templates are always Jinja)
};

// Adds the model (defaulting to the shipped model, or -hf REPO[:QUANT] from the hub), -t, -c, --experts and the streaming flags
// (ds4-compatible names: --ssd-streaming, --ssd-streaming-cache-experts, --ssd-streaming-cold,
// --ssd-streaming-preload-experts).
void add_model_flags(CLI::App& app, ModelFlags& f);
// The model file every model command takes the same way: `-m FILE` or the first argument
// (`sluice run MODEL -p ...`), default the shipped model (default_model_path()).
// `urls`: an http(s) URL is accepted too (inspect reads its header remotely).
void add_model_option(CLI::App& app, std::string& path, bool urls = false);
// A byte-size flag value ("4GB", "512MiB", bytes): a bad one is an argument error (exit 2).
CLI::Validator byte_size();
// --expert-replicas: a count of experts per layer, or auto (kAutoReplicas).
inline constexpr int kAutoReplicas = -1;
int parse_expert_replicas(const std::string& text);
CLI::Validator expert_replicas();
void add_sampling_flags(CLI::App& app, SamplingOptions& s);
// --routing-trace FILE: write every evaluated row's expert choice (EngineOptions::routing_trace).
void add_routing_trace_flag(CLI::App& app, ModelFlags& f);
// --cache-type-k and --cache-type-v (main.cpp maps -ctk/-ctv to them) (f32, f16, bf16, q8_0, q4_0); inspect shares them.
void add_kv_type_flags(CLI::App& app, std::string& type_k, std::string& type_v);
// -q/--quiet: the log level drops to warnings, which silences progress (core/progress.h).
void add_quiet_flag(CLI::App& app);
// --draft, --draft-max, --draft-min, --draft-fixed (speculative decoding), --mtp FILE
// (EngineOptions::mtp_path). --draft is parsed into d.mode, and --draft-fixed into
// DraftOptions::adaptive, by draft_options() after parsing.
struct DraftFlags {
  std::string mode = "auto";
  DraftOptions options;
  bool fixed = false;  // --draft-fixed
  std::string mtp;  // a separate MTP GGUF
};
void add_draft_flags(CLI::App& app, DraftFlags& d);
DraftOptions draft_options(const DraftFlags& d);
// The engine's side of the draft flags: the MTP block to load for mtp/auto (none when drafting is
// off, or when `drafts` is false) and the separate MTP file.
void set_engine_draft(EngineOptions& eo, const DraftFlags& d, const DraftOptions& o,
                      bool drafts = true);
// The engine's options from the flags; says once on stderr which llama.cpp flags do nothing here.
EngineOptions engine_options(const ModelFlags& f);
// --chat-template, --chat-template-file, --jinja (chat_template_flags.cpp).
void add_chat_template_flags(CLI::App& app, ModelFlags& f);
// The template those flags give (EngineOptions::chat_template), checked by rendering a sample
// conversation; empty: the model's. Throws CLI::ValidationError naming the flag.
std::string chat_template_override(const ModelFlags& f);
// --grammar TEXT, --grammar-file FILE, --json-schema TEXT|@FILE (run, chat): what the output must
// match. grammar_from_flags gives the GBNF ("" for none), checked without a model;
// check_grammar_flags checks that the model's vocabulary can write it. A bad grammar or schema is
// an argument error (exit 2) naming the flag.
struct GrammarFlags {
  std::string grammar, file, schema;
};
void add_grammar_flags(CLI::App& app, GrammarFlags& g);
std::string grammar_from_flags(const GrammarFlags& g);
void check_grammar_flags(const Engine& engine, const GrammarFlags& g, const std::string& gbnf);
// -f FILE validation that also accepts '-' (standard input), and the reader to match.
CLI::Validator stdin_or_file();
std::string read_text(const std::string& path);
// Fails unless `path` does not exist yet or `force` (the --force flag) allows replacing it.
void check_output(const std::string& path, bool force);
// The model shipped with sluice: $SLUICE_MODEL, else models/sluice-tiny-moe.gguf next to the
// source tree the binary was built from, else relative to the working directory.
std::string default_model_path();

}  // namespace sluice::cli
