// `sluice inspect [MODEL|-m MODEL] [--ram SIZE] [--ctx N] [--disk-rate RATE | --measure-disk] [--json]
// [--metadata]`: architecture, tokenizer, tensor table, bytes by class and layer, routed-expert
// size, KV-cache estimate, the RAM verdict and the memory plan `run` follows with the same budget,
// with an I/O-bound decode estimate. All numbers come from plan/sizing and the memory planner;
// this file only formats them, as a table or JSON.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cmath>

#include "cli/commands.h"
#include "cli/hub_model.h"
#include "cli/options.h"
#include "cli/pipeline.h"
#include "core/meminfo.h"
#include "plan/stage_plan.h"
#include "core/disk_probe.h"
#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "gguf/gguf.h"
#include "plan/sizing.h"

namespace sluice::cli {

namespace {

using Json = nlohmann::ordered_json;

// "0-2, 5, 7-9"
std::string format_layers(const std::vector<int>& layers) {
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j > i ? fmt::format("{}-{}", layers[i], layers[j]) : fmt::format("{}", layers[i]);
    i = j + 1;
  }
  return out;
}

std::string opt_str(const std::optional<int64_t>& v) { return v ? fmt::format("{}", *v) : "-"; }

std::string heads_str(const std::vector<int64_t>& h) {
  if (h.empty()) return "-";
  if (std::all_of(h.begin(), h.end(), [&](int64_t x) { return x == h[0]; })) return fmt::format("{}", h[0]);
  return fmt::format("[{}]", fmt::join(h, ", "));
}

template <typename T>
Json opt_json(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

Json heads_json(const std::vector<int64_t>& h) {
  if (h.empty()) return nullptr;
  if (h.size() == 1) return h[0];
  return h;
}

Json class_bytes_json(const ClassBytes& b) {
  Json j = Json::object();
  for (TensorClass c : kAllTensorClasses) j[std::string(tensor_class_name(c))] = b[static_cast<size_t>(c)];
  return j;
}

Json to_json(const gguf::File& file, const ModelReport& r, bool with_metadata) {
  const ModelSummary& m = r.model;
  Json j;
  j["file"] = {{"path", file.part_path(0)}, {"version", file.version()}, {"parts", file.n_parts()},
               {"bytes", file.total_size()}};
  j["model"] = {
      {"architecture", m.arch}, {"name", m.name}, {"block_count", opt_json(m.n_layer)},
      {"embedding_length", opt_json(m.n_embd)}, {"feed_forward_length", opt_json(m.n_ff)},
      {"expert_feed_forward_length", opt_json(m.n_ff_exp)}, {"expert_count", opt_json(m.n_expert)},
      {"expert_used_count", opt_json(m.n_expert_used)}, {"expert_shared_count", opt_json(m.n_expert_shared)},
      {"leading_dense_block_count", opt_json(m.n_leading_dense)}, {"nextn_predict_layers", opt_json(m.n_mtp_layers)},
      {"head_count", heads_json(m.n_head)}, {"head_count_kv", heads_json(m.n_head_kv)},
      {"key_length", opt_json(m.key_length)}, {"value_length", opt_json(m.value_length)},
      {"q_lora_rank", opt_json(m.q_lora_rank)}, {"kv_lora_rank", opt_json(m.kv_lora_rank)},
      {"rope_dimension_count", opt_json(m.rope_dim)}, {"rope_freq_base", opt_json(m.rope_freq_base)},
      {"rope_scaling_type", m.rope_scaling_type}, {"rope_scaling_factor", opt_json(m.rope_scaling_factor)},
      {"context_length", opt_json(m.context_length)}, {"sliding_window", opt_json(m.sliding_window)},
      {"vocab_size", opt_json(m.vocab_size)}, {"mla", m.is_mla}};
  const TokenizerSummary& t = r.tokenizer;
  j["tokenizer"] = {{"model", t.model}, {"pre", t.pre}, {"vocab_size", t.n_vocab},
                    {"bos_token_id", opt_json(t.bos_id)}, {"eos_token_id", opt_json(t.eos_id)},
                    {"has_chat_template", t.has_chat_template}};
  if (with_metadata) {
    Json md = Json::object();
    for (const auto& [k, v] : file.metadata()) md[k] = v.to_display();
    j["metadata"] = md;
  }
  Json tensors = Json::array();
  for (const auto& ti : file.tensors())
    tensors.push_back({{"name", ti.name}, {"type", type_name(ti.type)},
                       {"shape", std::vector<int64_t>(ti.ne.begin(), ti.ne.begin() + ti.n_dims)},
                       {"bytes", ti.nbytes}, {"class", tensor_class_name(classify_tensor(ti.name, r.first_mtp_layer, r.model.arch))}});
  j["tensors"] = tensors;
  Json layers = Json::array();
  for (const auto& lb : r.layers)
    layers.push_back({{"layer", opt_json(lb.layer)}, {"bytes", class_bytes_json(lb.bytes)}, {"total", lb.total()}});
  j["layers"] = layers;
  j["class_totals"] = class_bytes_json(r.class_totals);
  j["total_bytes"] = r.total_bytes;
  Json shapes = Json::array();
  for (const auto& s : r.expert_shapes)
    shapes.push_back({{"layers", s.layers}, {"experts", s.n_experts}, {"bytes_per_expert", s.bytes_per_expert}});
  j["routed_expert_shapes"] = shapes;
  j["kv_cache"] = {{"ctx", r.kv.ctx},
                   {"layers", r.kv.n_layer},
                   {"bytes_per_token", r.kv.bytes_per_token},
                   {"fixed_bytes", r.kv.fixed_bytes},
                   {"bytes", r.kv.bytes},
                   {"type", kv_type_name(r.kv.type_k)},
                   {"type_k", kv_type_name(r.kv.type_k)},
                   {"type_v", kv_type_name(r.kv.type_v)},
                   {"values_are_keys", r.kv.values_are_keys}};
  const Verdict& v = r.verdict;
  j["verdict"] = {{"ram", v.ram}, {"resident_bytes", v.resident}, {"kv_bytes", v.kv},
                  {"routed_bytes", v.routed}, {"reserved", v.reserved}, {"expert_budget", v.expert_budget},
                  {"fraction_routed_in_ram", v.fraction}, {"message", v.message}, {"flags", v.flags}};
  const MemoryPlan& p = r.plan;
  j["plan"] = {{"ok", p.ok}, {"placement", placement_name(p.placement)}, {"usable", p.usable},
               {"margin", p.margin}, {"kv_bytes", p.kv_bytes}, {"cache_bytes", p.cache_bytes},
               {"headroom", p.headroom}, {"fit_fraction", p.fit_fraction}, {"reason", p.reason}};
  j["decode_estimate"] = {{"hit_rate", r.decode.hit_rate}, {"miss_bytes_per_token", r.decode.miss_bytes_per_token},
                          {"io_tokens_per_second", r.decode.io_tokens_per_second},
                          {"tokens_per_second", r.decode.tokens_per_second}};
  return j;
}

void print_plan(const ModelReport& r, double disk_rate) {
  const MemoryPlan& p = r.plan;
  if (!p.ok) {
    fmt::print("plan: {}\n", p.reason);
    return;
  }
  fmt::print("plan (what `run --mem-limit` / `serve --parallel` do with this budget): experts {}", placement_name(p.placement));
  if (p.placement == Placement::kStream) fmt::print(", cache {} ({:.1f} % of routed experts)", format_bytes(p.cache_bytes), p.fit_fraction * 100);
  fmt::print("\n  usable {}, margin {}, KV {}, unplanned {}; {}\n", format_bytes(p.usable), format_bytes(p.margin),
             format_bytes(p.kv_bytes), format_bytes(p.headroom), p.reason);
  const DecodeEstimate& d = r.decode;
  if (d.miss_bytes_per_token == 0) return;
  fmt::print("  decode: expected hit rate {:.1f} % (uniform routing), {} read per token", d.hit_rate * 100,
             format_bytes(d.miss_bytes_per_token));
  if (d.io_tokens_per_second <= 0) {
    fmt::print("; give --disk-rate or --measure-disk for a t/s estimate\n");
    return;
  }
  fmt::print(", reads alone allow {:.2f} t/s at {}/s", d.io_tokens_per_second, format_bytes(static_cast<uint64_t>(disk_rate)));
  if (d.tokens_per_second != d.io_tokens_per_second)
    fmt::print("; with compute (--ram-tps) about {:.2f} t/s\n", d.tokens_per_second);
  else
    fmt::print(" (compute adds to it: give --ram-tps)\n");
}

void print_human(const gguf::File& file, const ModelReport& r, bool with_metadata) {
  const ModelSummary& m = r.model;
  fmt::print("file: {} (GGUF v{}, {} part(s), {})\n", file.part_path(0), file.version(), file.n_parts(),
             format_bytes(file.total_size()));
  fmt::print("model: {}{}\n", m.arch.empty() ? "(no general.architecture)" : m.arch,
             m.name.empty() ? "" : fmt::format(" \"{}\"", m.name));
  if (!m.arch.empty()) {
    fmt::print("  layers {}  embedding {}  feed-forward {}  context {}\n", opt_str(m.n_layer), opt_str(m.n_embd),
               opt_str(m.n_ff), opt_str(m.context_length));
    fmt::print("  heads {}  kv heads {}  key {}  value {}", heads_str(m.n_head), heads_str(m.n_head_kv),
               opt_str(m.key_length), opt_str(m.value_length));
    if (m.is_mla) fmt::print("  MLA: q_lora {}  kv_lora {}", opt_str(m.q_lora_rank), opt_str(m.kv_lora_rank));
    fmt::print("\n  rope dims {}  freq base {}{}{}\n", opt_str(m.rope_dim),
               m.rope_freq_base ? fmt::format("{}", *m.rope_freq_base) : "-",
               m.rope_scaling_type.empty() ? "" : "  scaling " + m.rope_scaling_type,
               m.rope_scaling_factor ? fmt::format(" x{}", *m.rope_scaling_factor) : "");
    if (m.sliding_window) fmt::print("  sliding window {}\n", *m.sliding_window);
    if (m.n_expert)
      fmt::print("  experts {} ({} used, {} shared)  expert feed-forward {}  leading dense layers {}{}\n",
                 *m.n_expert, opt_str(m.n_expert_used), m.n_expert_shared.value_or(0), opt_str(m.n_ff_exp),
                 m.n_leading_dense.value_or(0),
                 m.n_mtp_layers ? fmt::format("  MTP layers {}", *m.n_mtp_layers) : "");
  }
  const TokenizerSummary& t = r.tokenizer;
  fmt::print("tokenizer: {} (pre {}), {} tokens, bos {}, eos {}, chat template {}\n",
             t.model.empty() ? "-" : t.model, t.pre.empty() ? "-" : t.pre, t.n_vocab, opt_str(t.bos_id),
             opt_str(t.eos_id), t.has_chat_template ? "yes" : "no");

  if (with_metadata) {
    fmt::print("\nmetadata ({} keys)\n", file.metadata().size());
    for (const auto& [k, v] : file.metadata()) fmt::print("  {:<48} {}\n", k, v.to_display());
  }

  if (file.tensors().empty()) {
    fmt::print("\nno tensors (vocabulary-only file)\n");
  } else {
    fmt::print("\ntensors ({})\n  {:<40} {:<8} {:<20} {:>12}  {}\n", file.tensors().size(), "name", "type",
               "shape", "bytes", "class");
    for (const auto& ti : file.tensors())
      fmt::print("  {:<40} {:<8} {:<20} {:>12}  {}\n", ti.name, type_name(ti.type), ti.shape_string(), ti.nbytes,
                 tensor_class_name(classify_tensor(ti.name, r.first_mtp_layer, r.model.arch)));

    fmt::print("\nbytes by class\n  {:<6}", "layer");
    for (TensorClass c : kAllTensorClasses) fmt::print(" {:>13}", tensor_class_name(c));
    fmt::print(" {:>13}\n", "total");
    auto row = [](const std::string& label, const ClassBytes& b, uint64_t total) {
      fmt::print("  {:<6}", label);
      for (TensorClass c : kAllTensorClasses) fmt::print(" {:>13}", b[static_cast<size_t>(c)]);
      fmt::print(" {:>13}\n", total);
    };
    for (const auto& lb : r.layers) row(lb.layer ? fmt::format("{}", *lb.layer) : "global", lb.bytes, lb.total());
    row("total", r.class_totals, r.total_bytes);
  }

  for (const auto& s : r.expert_shapes)
    fmt::print("routed expert, layers {}: {} experts x {} ({} B)\n", format_layers(s.layers), s.n_experts,
               format_bytes(s.bytes_per_expert), s.bytes_per_expert);
  const std::string value_type = r.kv.values_are_keys
                                     ? std::string("values are the keys")
                                     : fmt::format("V {}", kv_type_name(r.kv.type_v));
  fmt::print("\nKV cache at ctx {} (K {}, {}{}): {} layers, {} B/token{}, {}\n", r.kv.ctx,
             kv_type_name(r.kv.type_k), value_type, m.is_mla ? ", MLA latent" : "", r.kv.n_layer,
             r.kv.bytes_per_token,
             r.kv.fixed_bytes ? fmt::format(" + {} fixed", format_bytes(r.kv.fixed_bytes)) : "",
             format_bytes(r.kv.bytes));

  const Verdict& v = r.verdict;
  fmt::print("\nRAM budget {}\n", format_bytes(v.ram));
  fmt::print("  resident weights   {}\n  KV cache           {}\n  kept back          {}  (unusable share and margin)\n"
             "  left for experts   {}\n",
             format_bytes(v.resident), format_bytes(v.kv), format_bytes(v.reserved), format_bytes(v.expert_budget));
  if (v.routed > 0)
    fmt::print("  routed experts     {}  ({:.1f} % fit)\n", format_bytes(v.routed), v.fraction * 100);
  fmt::print("verdict: {}\n", v.message);
  if (!v.flags.empty()) fmt::print("suggested flags: {}\n", v.flags);
}

}  // namespace

// The hosts a `--plan N` places on: under mpirun each rank's (a collective), else this one N times,
// with --ram as its budget when given.
static std::vector<HostFacts> plan_hosts(const gguf::File& file, const SizingOptions& opts, int n) {
  if (pipeline_size() > 1) {
    ModelFlags f;
    f.model = file.part_path(0);
    if (opts.ram) f.mem_limit = fmt::format("{}", *opts.ram);
    return pipeline_hosts(f, n);
  }
  HostFacts h;
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  h.host = name;
  h.budget = opts.ram ? memory_budget(MemInfo{}, *opts.ram, "--ram") : memory_budget(read_meminfo(), 0, "");
  h.disk_bytes_per_second = opts.disk_bytes_per_second;
  return std::vector<HostFacts>(n, h);
}

// `--plan N`: the stage placement for N hosts and each host's budget, as `mpirun -np N sluice
// run` would place the layers (cli/pipeline, plan/stage_plan).
void print_pipeline(const gguf::File& file, const ModelReport& report, const SizingOptions& opts, int n) {
  const std::vector<HostFacts> hosts = plan_hosts(file, opts, n);
  const int n_layer = report.first_mtp_layer >= 0 ? report.first_mtp_layer : static_cast<int>(report.model.n_layer.value_or(0));
  PlanRequest req;
  req.n_ctx = report.kv.ctx;
  req.n_slots = opts.slots;
  const PipelinePlan plan = plan_pipeline([&](LayerSpan s) { return memory_facts(file, opts.kv, req.n_ctx, s); }, n_layer, hosts, req);
  if (pipeline_rank() != 0) return;
  fmt::print("pipeline plan, {} stages: {}\n", n, plan.reason);
  fmt::print("| stage | host | budget | layers | resident | routed | KV | experts | cache | hit % | est. ms/token |\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < plan.stages.size(); ++i) {
    const StagePlan& s = plan.stages[i];
    fmt::print("| {} | {} | {} ({}) | {}:{} | {} | {} | {} | {} | {} | {:.1f} | {} |\n", i, hosts[i].host,
               format_bytes(hosts[i].budget.bytes), hosts[i].budget.source, s.span.begin, s.span.end,
               format_bytes(s.facts.resident_bytes), format_bytes(s.facts.routed_bytes), format_bytes(s.memory.kv_bytes),
               s.memory.ok ? placement_name(s.memory.placement) : "does not fit", format_bytes(s.memory.cache_bytes),
               100.0 * s.decode.hit_rate,
               std::isfinite(s.seconds_per_token) ? fmt::format("{:.2f}", s.seconds_per_token * 1e3) : std::string("-"));
  }
  if (!plan.ok) fail("pipeline placement: {}", plan.reason);
}

// --plan N --experts-split: every host holds the resident weights (of an untied output head only
// its rows) and a KV cache, and its share of each layer's routed experts and its replicas (placed
// as `--split-mode experts` places them), planned under its own budget.
void print_expert_split(const gguf::File& file, const std::string& path, const ModelReport& report,
                        const SizingOptions& opts, int n, int replicas) {
  const std::vector<HostFacts> hosts = plan_hosts(file, opts, n);
  PlanRequest req;
  req.n_ctx = report.kv.ctx;
  req.n_slots = opts.slots;
  std::string how;
  const ExpertPlacement placement =
      plan_expert_split(file, path, n, replicas, experts_in_ram(file, opts.kv, req, hosts), &how);
  if (pipeline_rank() != 0) return;
  const MemoryFacts all = memory_facts(file, opts.kv, req.n_ctx);
  fmt::print("expert-parallel plan, {} hosts (each runs every layer and its share of the experts), experts {}\n", n, how);
  fmt::print("| rank | host | budget | experts | replicas | resident | routed held | KV | experts placed | cache |\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|---|\n");
  bool ok = true;
  for (int r = 0; r < n; ++r) {
    MemoryFacts facts = all;
    facts.routed_bytes = static_cast<uint64_t>(static_cast<double>(all.routed_bytes) * placement.held_fraction(r));
    facts.resident_bytes -= unread_head_bytes(file, r, n);
    req.budget = hosts[r].budget;
    const MemoryPlan m = plan_memory(facts, req);
    ok = ok && m.ok;
    fmt::print("| {} | {} | {} ({}) | {} ({:.1f} %) | {} | {} | {} ({:.1f} %) | {} | {} | {} |\n", r, hosts[r].host,
               format_bytes(hosts[r].budget.bytes), hosts[r].budget.source, placement.owned(r),
               100.0 * placement.owned_fraction(r), placement.replicated(r), format_bytes(facts.resident_bytes),
               format_bytes(facts.routed_bytes), 100.0 * placement.held_fraction(r), format_bytes(m.kv_bytes),
               m.ok ? placement_name(m.placement) : "does not fit", format_bytes(m.cache_bytes));
  }
  if (!ok) fail("expert-parallel plan: some host cannot hold the resident weights and its KV cache");
}

int cmd_inspect(int argc, char** argv) {
  CLI::App app{"Show a GGUF model's architecture, tensors, sizes and a RAM verdict", "sluice inspect"};
  std::string path, ram_text, disk_rate_text;
  SizingOptions opts;
  int64_t ctx = 0;
  bool json = false, metadata = false, measure_disk = false;
  add_model_option(app, path, true);
  HubFlags hub_flags;
  add_hub_flags(app, hub_flags);
  app.add_option("--ram", ram_text, "RAM to plan for, e.g. 32GB or 24GiB (default: memory available now)")->check(byte_size());
  app.add_option("-c,--ctx,--ctx-size", ctx,
                 "context length for the KV-cache estimate (default: the model's, at most 4096)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--slots", opts.slots, "sequences with a full KV cache each, as serve --parallel (default 1)")
      ->check(CLI::Range(1, 256));
  app.add_option("--disk-rate", disk_rate_text, "disk read rate for the decode estimate, bytes per second (e.g. 2GB)")
      ->check(byte_size());
  app.add_option("--ram-tps", opts.ram_tokens_per_second,
                 "decode t/s with every expert in RAM (e.g. sluice bench --experts ram): adds compute to the estimate")
      ->check(CLI::PositiveNumber);
  app.add_flag("--measure-disk", measure_disk, "measure the disk read rate with a 2-second random-read probe of the model file");
  std::string type_k = "f32", type_v = "f32";
  add_kv_type_flags(app, type_k, type_v);
  int plan_stages = 0;
  app.add_option("--plan", plan_stages, "pipeline placement over N hosts (under mpirun: each rank's host; else N of this one)")
      ->check(CLI::Range(1, 1024));
  bool experts_split = false;
  app.add_flag("--experts-split", experts_split,
               "with --plan N: plan --split-mode experts (each host runs every layer and holds its share of the experts)");
  std::string replicas_text = "auto";
  app.add_option("--expert-replicas", replicas_text,
                 "with --experts-split: replicas of the hottest experts per layer on each host "
                 "(0: none), or auto (as --split-mode experts chooses them)")
      ->check(expert_replicas())
      ->capture_default_str();
  app.add_flag("--json", json, "print JSON instead of tables");
  app.add_flag("--metadata", metadata, "also list every metadata key");
  SLUICE_PARSE(app, argc, argv);

  if (!ram_text.empty()) opts.ram = parse_byte_size(ram_text, "--ram");
  if (ctx > 0) opts.ctx = ctx;
  opts.kv = engine_kv_config(*parse_kv_type(type_k), *parse_kv_type(type_v));
  if (!disk_rate_text.empty() && measure_disk) fail("--disk-rate and --measure-disk exclude each other");
  if (!disk_rate_text.empty()) opts.disk_bytes_per_second = static_cast<double>(parse_byte_size(disk_rate_text, "--disk-rate"));
  InspectedModel inspected = open_inspected(path, hub_flags);
  const std::unique_ptr<gguf::File>& file = inspected.file;
  if (measure_disk && inspected.remote) fail("--measure-disk probes a local file; give --disk-rate for a remote one");
  if (measure_disk) {
    const MemoryFacts facts = memory_facts(*file, opts.kv, opts.ctx.value_or(1));
    const DiskProbe probe = probe_disk(file->part_path(0), 2.0, facts.expert_bytes ? facts.expert_bytes : (1u << 20));
    opts.disk_bytes_per_second = probe.bytes_per_second;
    SLUICE_LOG_INFO("disk: {}/s over {} random reads{}", format_bytes(static_cast<uint64_t>(probe.bytes_per_second)),
               probe.reads, probe.direct ? "" : " (no O_DIRECT: the page cache may have served some)");
  }
  const ModelReport report = analyze_model(*file, opts);
  if (experts_split && plan_stages < 2) fail("--experts-split needs --plan N with N of at least 2");
  const int replicas = parse_expert_replicas(replicas_text);
  if (replicas != kAutoReplicas && !experts_split)
    fail("--expert-replicas {} needs --plan N --experts-split", replicas_text);
  if (plan_stages > 0 && experts_split) {
    if (inspected.remote) fail("--experts-split plans a local file (it reads the file's expert layout and heat profile)");
    print_expert_split(*file, path, report, opts, plan_stages, replicas);
    return 0;
  }
  if (plan_stages > 0) {
    print_pipeline(*file, report, opts, plan_stages);
    return 0;
  }
  if (json) {
    Json j = to_json(*file, report, metadata);
    if (inspected.remote)
      j["fetched"] = {{"bytes", inspected.fetched->bytes}, {"requests", inspected.fetched->requests}};
    fmt::print("{}\n", j.dump(2, ' ', false, Json::error_handler_t::replace));
  } else {
    print_human(*file, report, metadata);
    print_plan(report, opts.disk_bytes_per_second);
    if (inspected.remote)
      fmt::print("fetched {} ({} B, {:.3f} % of the file) in {} range request(s)\n", format_bytes(inspected.fetched->bytes),
                 inspected.fetched->bytes, 100.0 * static_cast<double>(inspected.fetched->bytes) / static_cast<double>(file->total_size()),
                 inspected.fetched->requests);
  }
  return 0;
}

}  // namespace sluice::cli
