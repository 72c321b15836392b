// Shared model and sampling flags.
#include "cli/options.h"

#include "cli/hub_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "runtime/prefill_chunk.h"

namespace sluice::cli {

std::string default_model_path() {
  if (const char* env = std::getenv("SLUICE_MODEL"); env && *env) return env;
  const std::filesystem::path rel = "models/sluice-tiny-moe.gguf";
#ifdef SLUICE_SOURCE_DIR
  const std::filesystem::path src = std::filesystem::path(SLUICE_SOURCE_DIR) / rel;
  if (std::filesystem::exists(src)) return src.string();
#endif
  return rel.string();
}

CLI::Validator stdin_or_file() {
  return CLI::Validator([](const std::string& s) { return s == "-" ? std::string() : CLI::ExistingFile(s); }, "FILE|-");
}

std::string read_text(const std::string& path) {
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) fail("cannot open '{}'", path);
  }
  std::stringstream ss;
  ss << (path == "-" ? std::cin.rdbuf() : file.rdbuf());
  return ss.str();
}

void check_output(const std::string& path, bool force) {
  if (!force && std::filesystem::exists(path)) fail("'{}' exists: refusing to overwrite it (--force replaces it)", path);
}

void add_routing_trace_flag(CLI::App& app, ModelFlags& f) {
  app.add_option("--routing-trace", f.routing_trace,
                 "write each evaluated token's chosen experts per layer and the router lookahead's "
                 "prediction to FILE (format: src/experts/routing_trace.h; read by route-stats and "
                 "bench --replay-routing)");
}

void add_quiet_flag(CLI::App& app) {
  app.add_flag_callback(
      "-q,--quiet", [] { set_log_level(LogLevel::kWarn); },
      "no progress bars or informational lines (warnings and errors still print)");
}

void add_model_option(CLI::App& app, std::string& path, bool urls) {
  path = default_model_path();
  // inspect also reads a header over HTTP (hub/remote_source.h).
  const CLI::Validator exists = urls ? CLI::Validator(
                                           [](const std::string& s) {
                                             return s.starts_with("http://") || s.starts_with("https://")
                                                        ? std::string()
                                                        : CLI::ExistingFile(s);
                                           },
                                           "FILE|URL")
                                     : CLI::Validator(CLI::ExistingFile);
  auto* flag = app.add_option("-m,--model", path, "GGUF model (first part of a split model)")
                   ->check(exists)
                   ->capture_default_str();
  auto* positional = app.add_option("MODEL", path, "the model as the first argument (instead of -m)")
                         ->check(exists)
                         ->excludes(flag);
  flag->excludes(positional);
}

CLI::Validator byte_size() {
  return CLI::Validator([](const std::string& s) { return byte_size_error(s); }, "SIZE");
}

namespace {

// -2: not auto nor a count.
int replicas_of(const std::string& text) {
  if (text == "auto") return kAutoReplicas;
  int n = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 0 || n > (1 << 20)) return -2;
  return n;
}

std::string replicas_error(const std::string& text) {
  return fmt::format("'{}' is neither auto nor a count of experts per layer (0: none)", text);
}

}  // namespace

int parse_expert_replicas(const std::string& text) {
  const int n = replicas_of(text);
  if (n == -2) fail("--expert-replicas: {}", replicas_error(text));
  return n;
}

CLI::Validator expert_replicas() {
  return CLI::Validator(
      [](const std::string& s) { return replicas_of(s) == -2 ? replicas_error(s) : std::string(); },
      "N|auto");
}

namespace {

// llama.cpp's spellings (cli/flag_spellings.cpp rewrites -ngl, -fa, -ub, -tb, -ot to these).
void add_llama_flags(CLI::App& app, ModelFlags& f) {
  const char* const group = "llama.cpp compatibility";
  app.add_option("--n-gpu-layers,--gpu-layers", f.gpu_layers, "(-ngl) accepted and ignored: sluice has no GPU backend")
      ->group(group);
  app.add_option("--flash-attn", f.flash_attn, "(-fa [on|off|auto]) accepted and ignored: attention is always sluice's tiled CPU kernel")
      ->check(CLI::IsMember({"on", "off", "auto", "1", "0"}))->group(group);
  app.add_option("--override-tensor", f.override_tensor, "(-ot) accepted and ignored: every tensor is in host memory")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->group(group);
  app.add_flag("--no-mmap", f.no_mmap, "read the routed experts into RAM (--experts ram)")->group(group);
  app.add_flag("--mlock", f.mlock, "lock the expert cache in memory (the default)")->group(group);
  app.add_option("-b,--batch-size", f.batch, "prompt tokens per forward pass when -ub is not given (at most 512)")
      ->check(CLI::Range(1, 1 << 20))->group(group);
  app.add_option("--ubatch-size", f.ubatch, "(-ub) prompt tokens per forward pass (at most 512, the KV cache's step)")
      ->check(CLI::Range(1, 1 << 20))->group(group);
  app.add_option("--threads-batch", f.threads_batch, "(-tb) threads when -t is not given: one pool runs prefill and decode")
      ->check(CLI::Range(0, 1024))->group(group);
}

// The llama.cpp flags that change nothing here, each with the reason, for one warning.
std::vector<std::string> ignored_llama_flags(const ModelFlags& f) {
  std::vector<std::string> out;
  if (!f.gpu_layers.empty() && f.gpu_layers != "0")
    out.push_back(fmt::format("-ngl {} (no GPU backend: every layer runs on the CPU)", f.gpu_layers));
  if (!f.flash_attn.empty() && f.flash_attn != "auto")
    out.push_back(fmt::format("-fa {} (no GPU backend: attention is always sluice's tiled CPU kernel)", f.flash_attn));
  if (!f.override_tensor.empty())
    out.push_back(fmt::format("-ot {} (no GPU backend: every tensor is in host memory; --experts places the routed ones)",
                              f.override_tensor));
  if (f.threads_batch > 0 && f.threads > 0 && f.threads != f.threads_batch)
    out.push_back(fmt::format("-tb {} (one thread pool runs prefill and decode: -t {} sets it)", f.threads_batch, f.threads));
  if (f.ubatch > kMaxPrefillChunk)
    out.push_back(fmt::format("-ub {} beyond {} (a forward pass takes at most {} prompt tokens)", f.ubatch,
                              kMaxPrefillChunk, kMaxPrefillChunk));
  return out;
}

}  // namespace

void add_model_flags(CLI::App& app, ModelFlags& f) {
  add_quiet_flag(app);
  add_model_option(app, f.model);
  add_hub_flags(app, f.hub);
  // After every flag is parsed and checked (-q included), so a bad flag never costs a download.
  app.final_callback([&f] {
    if (!f.hub.repo.empty()) f.model = hub_model_path(f.hub);
  });
  app.add_option("-t,--threads", f.threads, "worker threads (0: one per physical core available to the process)")->check(CLI::Range(0, 1024));
  app.add_option("-c,--ctx,--ctx-size", f.ctx, "context size in tokens (0: the model's trained context, at most 4096; larger: allowed with a warning)")
      ->check(CLI::Range(0, 1 << 24))->capture_default_str();
  app.add_option("--experts", f.experts, "routed experts: auto, ram, mmap or stream")
      ->check(CLI::IsMember({"auto", "ram", "mmap", "stream"}))->capture_default_str();
  app.add_flag("--ssd-streaming", f.streaming, "stream routed experts from SSD (same as --experts stream)");
  app.add_option("--ssd-streaming-cache-experts", f.cache_size, "expert cache size, e.g. 4GB, 512MiB or bytes (default: from the memory budget)")
      ->check(byte_size());
  app.add_option("--mem-limit", f.mem_limit, "memory budget (default: cgroup limit or available memory)")->check(byte_size());
  app.add_option("--ssd-streaming-policy", f.policy, "expert cache eviction: lru, lfu or nextuse")->check(CLI::IsMember({"lru", "lfu", "nextuse"}))->capture_default_str();
  app.add_flag("--ssd-streaming-cold", f.cold, "do not preload the expert cache at startup");
  app.add_option("--ssd-streaming-preload-experts", f.preload, "preload at most N experts")->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  app.add_flag("--no-prefetch", f.no_prefetch, "disable router-lookahead prefetch");
  app.add_flag("--no-mlock", f.no_mlock, "do not lock the expert cache in memory");
  app.add_flag("--debug", f.debug, "log every expert hit and miss");
  add_kv_type_flags(app, f.cache_type_k, f.cache_type_v);
  add_llama_flags(app, f);
  app.add_option("--split-mode", f.split_mode,
                 "(-sm) mpirun -np N: layer (a pipeline: each process runs a span of layers) or "
                 "experts (each runs every layer and computes its share of each layer's routed "
                 "experts)")
      ->check(CLI::IsMember({"layer", "experts"}))->capture_default_str();
  app.add_option("--expert-replicas", f.expert_replicas,
                 "--split-mode experts: copies of the hottest experts each process holds beside its "
                 "own, per layer (0: none), or auto (up to an eighth of a layer's experts where "
                 "every host's budget keeps them in RAM)")
      ->check(expert_replicas())
      ->capture_default_str();
  app.add_option("--stages", f.stages, "pipeline (mpirun -np N): each stage's layers, e.g. 0:8,8:16 (default: planned)");
  app.add_option("--stage-timeout", f.stage_timeout, "pipeline: seconds to wait for a neighbouring stage before failing")
      ->check(CLI::Range(0.1, 1e6))->capture_default_str();
}

void add_kv_type_flags(CLI::App& app, std::string& type_k, std::string& type_v) {
  const auto types = CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"});
  app.add_option("--cache-type-k", type_k, "KV cache type of keys (MLA: the latent): f32, f16, bf16, q8_0 or q4_0")
      ->check(types)->capture_default_str();
  app.add_option("--cache-type-v", type_v, "KV cache type of values: f32, f16, bf16, q8_0 or q4_0")
      ->check(types)->capture_default_str();
}

void add_sampling_flags(CLI::App& app, SamplingOptions& s) {
  app.add_option("--temp", s.temperature, "temperature (0: greedy)")->check(CLI::Range(0.0, 100.0))->capture_default_str();
  app.add_option("--top-k", s.top_k, "top-k (0: off)")->check(CLI::Range(0, 1 << 24))->capture_default_str();
  app.add_option("--top-p", s.top_p, "top-p (1: off)")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--min-p", s.min_p, "min-p (0: off)")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--repeat-penalty", s.repeat_penalty, "repetition penalty (1: off)")->check(CLI::Range(0.0, 10.0));
  app.add_option("--presence-penalty", s.presence_penalty, "presence penalty")->check(CLI::Range(-2.0, 2.0));
  app.add_option("--frequency-penalty", s.frequency_penalty, "frequency penalty")->check(CLI::Range(-2.0, 2.0));
  app.add_option("--repeat-last-n", s.penalty_last_n, "tokens the penalties look back over")->check(CLI::Range(0, 1 << 20));
  app.add_option("-s,--seed", s.seed, "random seed");
}

void add_draft_flags(CLI::App& app, DraftFlags& d) {
  app.add_option("--draft", d.mode,
                 "speculative decoding: auto (n-gram lookup, and the file's MTP layers when it "
                 "has them: each step whichever pays by measured cost, or none), mtp, ngram or "
                 "none")
      ->check(CLI::IsMember({"auto", "none", "ngram", "mtp"}))
      ->capture_default_str();
  app.add_option("--draft-max", d.options.max, "most tokens drafted per step")->check(CLI::Range(0, 64))->capture_default_str();
  app.add_option("--draft-min", d.options.min, "draft only when at least N tokens are proposed")->check(CLI::Range(0, 64))->capture_default_str();
  app.add_flag("--draft-fixed", d.fixed,
               "draft every proposal up to --draft-max tokens whatever the measured cost (the MTP "
               "block's when the file has one), instead of the lengths that pay");
  app.add_option("--mtp", d.mtp,
                 "the MTP block from a separate GGUF (DeepSeek V4's converter writes one) for "
                 "--draft mtp or auto")
      ->check(CLI::ExistingFile);
}

DraftOptions draft_options(const DraftFlags& d) {
  DraftOptions o = d.options;
  o.mode = *parse_draft_mode(d.mode);
  if (d.fixed && o.mode == DraftMode::kNone)
    throw CLI::ValidationError("--draft-fixed", "drafting is off (--draft none); give --draft ngram, mtp or auto");
  if (d.fixed && o.max == 0)
    throw CLI::ValidationError("--draft-fixed", "--draft-max 0 drafts nothing; give --draft-max 1 to 64");
  if (o.min > o.max)
    throw CLI::ValidationError("--draft-min", fmt::format("{} is larger than --draft-max {}", o.min, o.max));
  o.adaptive = !d.fixed;
  return o;
}

void set_engine_draft(EngineOptions& eo, const DraftFlags& d, const DraftOptions& o, bool drafts) {
  eo.draft = drafts && o.max > 0 ? o.mode : DraftMode::kNone;
  eo.mtp_path = d.mtp;
}

EngineOptions engine_options(const ModelFlags& f) {
  // Contradictory flags are argument errors (exit 2), not something to resolve silently.
  if (f.streaming && f.experts != "auto" && f.experts != "stream")
    throw CLI::ValidationError("--ssd-streaming", fmt::format("streams experts, but --experts {} was also given", f.experts));
  if (f.no_mmap && (f.streaming || (f.experts != "auto" && f.experts != "ram")))
    throw CLI::ValidationError("--no-mmap", fmt::format("reads the experts into RAM, but --experts {} was also given",
                                                        f.streaming ? "stream" : f.experts));
  if (f.mlock && f.no_mlock) throw CLI::ValidationError("--mlock", "locks the expert cache, but --no-mlock was also given");
  const std::string mode = f.streaming ? "stream" : f.no_mmap ? "ram" : f.experts;
  if (!f.cache_size.empty() && (mode == "ram" || mode == "mmap"))
    throw CLI::ValidationError("--ssd-streaming-cache-experts",
                               fmt::format("sizes the streaming cache, which --experts {} does not use", mode));
  EngineOptions o;
  o.model_path = f.model;
  o.n_threads = f.threads > 0 ? f.threads : f.threads_batch;
  // -ub is the forward pass's size; -b, llama.cpp's logical batch, bounds it when -ub is absent.
  if (const int chunk = f.ubatch > 0 ? f.ubatch : f.batch; chunk > 0) set_session_prefill_chunk(std::min(chunk, kMaxPrefillChunk));
  if (const auto ignored = ignored_llama_flags(f); !ignored.empty()) {
    static bool said = false;  // engine_options runs more than once in a pipeline
    if (!said) SLUICE_LOG_WARN("warning: ignored: {}", fmt::join(ignored, "; "));
    said = true;
  }
  o.n_ctx = f.ctx;
  // CLI::IsMember has checked the spellings; the enums are parsed here, once.
  o.experts = f.streaming ? ExpertMode::kStream : f.no_mmap ? ExpertMode::kRam : *parse_expert_mode(f.experts);
  if (!f.cache_size.empty()) o.cache_bytes = parse_byte_size(f.cache_size, "--ssd-streaming-cache-experts");
  if (!f.mem_limit.empty()) o.mem_limit = parse_byte_size(f.mem_limit, "--mem-limit");
  if (o.cache_bytes > 0 && o.mem_limit > 0 && o.cache_bytes > o.mem_limit)
    throw CLI::ValidationError("--ssd-streaming-cache-experts",
                               fmt::format("{} is larger than --mem-limit {}", f.cache_size, f.mem_limit));
  o.cache_policy = *parse_eviction_policy(f.policy);
  o.cold = f.cold;
  o.preload_experts = f.preload;
  o.prefetch = !f.no_prefetch;
  o.lock_memory = !f.no_mlock;
  o.debug = f.debug;
  o.kv_type_k = *parse_kv_type(f.cache_type_k);
  o.kv_type_v = *parse_kv_type(f.cache_type_v);
  o.routing_trace = f.routing_trace;
  o.replay_routing = f.replay_routing;
  o.chat_template = chat_template_override(f);
  return o;
}

namespace {

const char* grammar_flag(const GrammarFlags& g) {
  return !g.schema.empty() ? "--json-schema" : !g.file.empty() ? "--grammar-file" : "--grammar";
}

}  // namespace

void add_grammar_flags(CLI::App& app, GrammarFlags& g) {
  auto* text = app.add_option("--grammar", g.grammar, "GBNF grammar (llama.cpp's syntax) the output must match");
  auto* file = app.add_option("--grammar-file", g.file, "read the GBNF grammar from FILE")
                   ->check(CLI::ExistingFile)
                   ->excludes(text);
  app.add_option("--json-schema", g.schema, "JSON Schema the output must satisfy: its text, or @FILE")
      ->excludes(text)
      ->excludes(file);
}

std::string grammar_from_flags(const GrammarFlags& g) {
  const char* flag = grammar_flag(g);
  try {
    std::string gbnf = g.grammar;
    if (!g.file.empty()) gbnf = read_text(g.file);
    if (!g.schema.empty())
      gbnf = json_schema_grammar(g.schema.starts_with("@") ? read_text(g.schema.substr(1)) : g.schema);
    if (!gbnf.empty()) check_grammar(gbnf);
    return gbnf;
  } catch (const Error& e) {
    throw CLI::ValidationError(flag, e.what());
  }
}

void check_grammar_flags(const Engine& engine, const GrammarFlags& g, const std::string& gbnf) {
  if (gbnf.empty()) return;
  try {
    engine.check_grammar(gbnf);
  } catch (const Error& e) {
    throw CLI::ValidationError(grammar_flag(g), e.what());
  }
}

}  // namespace sluice::cli
