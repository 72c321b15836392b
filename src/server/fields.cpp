// Which request fields are implemented, ignored, renamed or refused (see fields.h).
#include "fields.h"

#include <fmt/format.h>

#include <limits>
#include <set>
#include <string>

#include "structured.h"

namespace sluice::server {

namespace {

using json = nlohmann::json;

// Fields each API implements (api.cpp reads them).
const std::set<std::string>& implemented(Api api) {
  static const std::set<std::string> chat = {
      "model",          "messages",         "stream",         "stream_options",
      "n",              "temperature",      "top_p",          "top_k",
      "min_p",          "presence_penalty", "frequency_penalty", "repeat_penalty",
      "penalty_last_n", "seed",             "ignore_eos",     "stop",
      "max_tokens",     "max_completion_tokens", "tools",     "tool_choice",
      "parallel_tool_calls", "logprobs",    "top_logprobs",   "response_format",
      "logit_bias",     "reasoning_effort", "chat_template_kwargs", "grammar",
      "json_schema"};
  static const std::set<std::string> completion = {
      "model",          "prompt",           "stream",         "stream_options",
      "n",              "best_of",          "temperature",    "top_p",
      "top_k",          "min_p",            "presence_penalty", "frequency_penalty",
      "repeat_penalty", "penalty_last_n",   "seed",           "ignore_eos",
      "stop",           "max_tokens",       "logprobs",       "echo",
      "suffix",         "logit_bias",       "response_format", "grammar",
      "json_schema"};
  static const std::set<std::string> messages = {
      "model", "messages", "system", "max_tokens",  "stop_sequences", "stream",  "temperature",
      "top_p", "top_k",    "tools",  "tool_choice", "thinking"};
  return api == Api::kChat ? chat : api == Api::kCompletion ? completion : messages;
}

enum class Kind { kString, kBool, kInteger, kObject, kAny };

// Fields that change nothing in the answer: bookkeeping for the client's provider (metadata,
// user, store, service_tier, prompt_cache_key, safety_identifier), hints sluice already follows
// (cache_prompt: prompts are always cached; id_slot: the scheduler picks the slot sharing the
// longest prefix; n_keep: the server never shifts a request's context), and Ollama's keep_alive
// (the model stays loaded). They are type-checked and dropped.
struct Ignored {
  const char* name;
  Kind kind;
};
constexpr Ignored kIgnored[] = {
    {"metadata", Kind::kObject},        {"user", Kind::kString},
    {"store", Kind::kBool},             {"service_tier", Kind::kString},
    {"prompt_cache_key", Kind::kString}, {"safety_identifier", Kind::kString},
    {"cache_prompt", Kind::kBool},      {"id_slot", Kind::kInteger},
    {"n_keep", Kind::kInteger},         {"keep_alive", Kind::kAny},
    {"timings_per_token", Kind::kBool},
};

// Sampler fields sluice does not implement, accepted at the value that switches them off.
struct Neutral {
  const char* name;
  double value;
};
constexpr Neutral kNeutral[] = {{"typical_p", 1},      {"typ_p", 1},           {"tfs_z", 1},
                                {"mirostat", 0},       {"dry_multiplier", 0},  {"xtc_probability", 0},
                                {"top_n_sigma", -1},   {"dynatemp_range", 0}};

bool has_kind(const json& v, Kind k) {
  switch (k) {
    case Kind::kString: return v.is_string();
    case Kind::kBool: return v.is_boolean();
    case Kind::kInteger: return v.is_number_integer();
    case Kind::kObject: return v.is_object();
    case Kind::kAny: return true;
  }
  return false;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kString: return "a string";
    case Kind::kBool: return "a boolean";
    case Kind::kInteger: return "an integer";
    case Kind::kObject: return "an object";
    case Kind::kAny: return "a value";
  }
  return "";
}

// llama-server's `samplers`: the sampler chain as names (or its one-letter string). sluice's
// order is fixed (penalties, top-k, temperature, top-p, min-p); the list switches samplers off by
// leaving them out, which is what maps. Samplers sluice does not have are accepted when their
// parameters leave them off (kNeutral).
void apply_samplers(const json& v, json& out) {
  static const std::set<std::string> known = {"penalties", "dry",  "top_n_sigma", "top_k",
                                              "typ_p",     "typical_p", "top_p",  "min_p",
                                              "xtc",       "temperature", "infill"};
  std::set<std::string> listed;
  if (v.is_string()) {
    const std::string letters = v.get<std::string>();
    for (char c : letters) {
      switch (c) {
        case 'e': listed.insert("penalties"); break;
        case 'd': listed.insert("dry"); break;
        case 's': listed.insert("top_n_sigma"); break;
        case 'k': listed.insert("top_k"); break;
        case 'y': listed.insert("typ_p"); break;
        case 'p': listed.insert("top_p"); break;
        case 'm': listed.insert("min_p"); break;
        case 'x': listed.insert("xtc"); break;
        case 't': listed.insert("temperature"); break;
        default: bad("samplers", fmt::format("'samplers' letter '{}' names no sampler", c));
      }
    }
  } else if (v.is_array()) {
    for (const json& s : v) {
      if (!s.is_string()) bad("samplers", "'samplers' must contain only strings", "invalid_type");
      const std::string name = s.get<std::string>();
      if (!known.contains(name))
        bad("samplers", fmt::format("'samplers' entry '{}' is not a sampler sluice knows", name));
      listed.insert(name);
    }
  } else {
    bad("samplers", "'samplers' must be an array of sampler names or a string of their letters",
        "invalid_type");
  }
  if (!listed.contains("top_k")) out["top_k"] = 0;
  if (!listed.contains("top_p")) out["top_p"] = 1.0;
  if (!listed.contains("min_p")) out["min_p"] = 0.0;
  if (!listed.contains("temperature")) out["temperature"] = 1.0;  // the softmax unscaled
  if (!listed.contains("penalties")) {
    out["repeat_penalty"] = 1.0;
    out["presence_penalty"] = 0.0;
    out["frequency_penalty"] = 0.0;
  }
}

// A synonym's value moves to its canonical field unless the client sent that one too.
void rename(json& out, const char* from, const char* to) {
  auto it = out.find(from);
  if (it == out.end()) return;
  json v = std::move(*it);
  out.erase(from);
  if (!out.contains(to) || out[to].is_null()) out[to] = std::move(v);
}

}  // namespace

json normalize_fields(const json& body, Api api) {
  json out = body;
  for (const Ignored& f : kIgnored) {
    auto it = out.find(f.name);
    if (it == out.end()) continue;
    if (!it->is_null() && !has_kind(*it, f.kind))
      bad(f.name, fmt::format("'{}' must be {}", f.name, kind_name(f.kind)), "invalid_type");
    out.erase(it);
  }
  // OpenAI's output modalities: text is what sluice writes; audio would change the answer.
  if (const json* m = field(out, "modalities")) {
    if (!m->is_array()) bad("modalities", "'modalities' must be an array", "invalid_type");
    for (const json& x : *m)
      if (x != "text")
        bad("modalities", fmt::format("'modalities' {} is not supported (only \"text\")", x.dump()),
            "unsupported_parameter");
    out.erase("modalities");
  }
  for (const Neutral& f : kNeutral) {
    const json* v = field(out, f.name);
    if (!v) {
      out.erase(f.name);
      continue;
    }
    if (!v->is_number()) bad(f.name, fmt::format("'{}' must be a number", f.name), "invalid_type");
    if (v->get<double>() != f.value)
      bad(f.name, fmt::format("'{}' is not implemented; only {} (off) is accepted", f.name, f.value),
          "unsupported_parameter");
    out.erase(f.name);
  }
  if (api != Api::kMessages) {
    // llama-server's spellings. n_predict −1 means "until the end", as no max_tokens does.
    if (const json* np = field(out, "n_predict"); np && np->is_number_integer() && *np == -1)
      out.erase("n_predict");
    rename(out, "n_predict", "max_tokens");
    rename(out, "repeat_last_n", "penalty_last_n");
    if (api == Api::kCompletion) rename(out, "n_probs", "logprobs");
    if (const json* s = field(out, "samplers")) {
      const json chain = *s;
      out.erase("samplers");
      apply_samplers(chain, out);
    } else {
      out.erase("samplers");
    }
  }
  for (const auto& [key, value] : out.items())
    if (!value.is_null() && !implemented(api).contains(key))
      bad(key, fmt::format("'{}' is not a supported request field", key), "unsupported_parameter");
  return out;
}

}  // namespace sluice::server
