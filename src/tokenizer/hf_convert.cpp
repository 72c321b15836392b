// tokenizer.json → tokenizer.ggml.* keys. Token types follow llama.cpp's converter: added tokens
// flagged special are control tokens, other added tokens user-defined, ids missing from both
// tables become unused "[PADn]" entries. The pre-tokenizer name is found by comparing the Split
// regexes with the families sluice knows, so a tokenizer we would split differently is refused
// rather than silently mis-tokenized.
#include "tokenizer/hf_convert.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <unordered_map>

#include "core/error.h"
#include "gguf/writer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"

namespace sluice {

namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open {}", path);
  try {
    return json::parse(f);
  } catch (const json::exception& e) {
    fail("{} is not valid JSON: {}", path, e.what());
  }
}

bool has_byte_level(const json& node) {
  if (!node.is_object()) return false;
  if (node.value("type", "") == "ByteLevel") return true;
  for (const char* list : {"pretokenizers", "decoders"})
    if (node.contains(list) && node[list].is_array())
      for (const auto& child : node[list])
        if (has_byte_level(child)) return true;
  return false;
}

// The regexes the pre_tokenizer applies, in order; false when it holds a step we cannot express.
bool collect_patterns(const json& node, std::vector<std::string>* out, std::string* why) {
  if (node.is_null()) return true;
  const std::string type = node.value("type", "");
  if (type == "Sequence") {
    for (const auto& child : node.at("pretokenizers"))
      if (!collect_patterns(child, out, why)) return false;
    return true;
  }
  if (type == "ByteLevel") {
    if (node.value("add_prefix_space", false)) {
      *why = "ByteLevel add_prefix_space = true";
      return false;
    }
    if (node.value("use_regex", true)) out->push_back(PreTokenizer::byte_level_regex());
    return true;
  }
  if (type == "Split") {
    const auto& pat = node.at("pattern");
    if (!pat.contains("Regex") || node.value("behavior", "") != "Isolated" || node.value("invert", false)) {
      *why = "Split " + node.dump();
      return false;
    }
    out->push_back(pat.at("Regex").get<std::string>());
    return true;
  }
  *why = "pre-tokenizer step " + type;
  return false;
}

// tokenizer_config.json names special tokens as a string, {"content": ...}, or null.
std::string token_content(const json& cfg, const char* key) {
  if (!cfg.contains(key)) return "";
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

}  // namespace

HfConvertReport convert_hf_tokenizer(const std::string& tokenizer_json_path, const std::string& config_path,
                                     const HfConvertOptions& opt, gguf::Writer& w) {
  const json tj = read_json(tokenizer_json_path);
  const json cfg = config_path.empty() ? json::object() : read_json(config_path);
  HfConvertReport rep;

  const json& model = tj.at("model");
  if (model.value("type", "") != "BPE")
    fail("{}: model type '{}' is not supported; sluice converts byte-level BPE only", tokenizer_json_path,
         model.value("type", ""));
  if (!has_byte_level(tj.value("pre_tokenizer", json())) && !has_byte_level(tj.value("decoder", json())))
    fail("{}: not a byte-level BPE (no ByteLevel pre-tokenizer or decoder)", tokenizer_json_path);

  std::vector<std::string> patterns;
  std::string why;
  const bool expressible = collect_patterns(tj.value("pre_tokenizer", json()), &patterns, &why);
  if (!opt.pre.empty()) {
    PreTokenizer check(opt.pre);  // throws on an unknown name
    rep.pre = opt.pre;
  } else {
    if (!expressible) fail("{}: unsupported pre-tokenizer ({}); pass the pre-tokenizer name", tokenizer_json_path, why);
    rep.pre = PreTokenizer::detect(patterns);
    if (rep.pre.empty())
      fail("{}: pre-tokenizer regexes match no known family; pass the pre-tokenizer name", tokenizer_json_path);
  }
  const json norm = tj.value("normalizer", json());
  if (!norm.is_null() && !(norm.value("type", "") == "Sequence" && norm.value("normalizers", json::array()).empty()))
    rep.warnings.push_back("normalizer " + norm.dump() + " is not applied by sluice");
  if (model.value("byte_fallback", false)) rep.warnings.push_back("BPE byte_fallback is ignored");

  // Ids come from the vocab map and from added_tokens; the table spans the largest id.
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  auto place = [&](int64_t id, const std::string& text, TokenType ty) {
    if (id < 0 || id > INT32_MAX) fail("{}: token id {} out of range", tokenizer_json_path, id);
    if (static_cast<size_t>(id) >= tokens.size()) {
      tokens.resize(id + 1);
      types.resize(id + 1, static_cast<int32_t>(TokenType::kUnused));
    }
    tokens[id] = text;
    types[id] = static_cast<int32_t>(ty);
  };
  for (const auto& [text, id] : model.at("vocab").items()) place(id.get<int64_t>(), text, TokenType::kNormal);
  for (const auto& at : tj.value("added_tokens", json::array())) {
    const bool special = at.value("special", false);
    place(at.at("id").get<int64_t>(), at.at("content").get<std::string>(),
          special ? TokenType::kControl : TokenType::kUserDefined);
    rep.n_special += special;
  }
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i].empty()) tokens[i] = "[PAD" + std::to_string(i) + "]";
  std::unordered_map<std::string, int32_t> id_of;
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto [it, fresh] = id_of.emplace(tokens[i], static_cast<int32_t>(i));
    if (!fresh) fail("{}: token '{}' has two ids ({} and {})", tokenizer_json_path, tokens[i], it->second, i);
  }

  std::vector<std::string> merges;
  for (const auto& m : model.at("merges")) {
    if (m.is_string()) {
      merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2) {
      merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      fail("{}: merge entry {} is neither \"a b\" nor [a, b]", tokenizer_json_path, m.dump());
    }
  }

  w.set("general.architecture", gguf::Value::str("vocab"));
  w.set("tokenizer.ggml.model", gguf::Value::str("gpt2"));
  w.set("tokenizer.ggml.pre", gguf::Value::str(rep.pre));
  w.set("tokenizer.ggml.tokens", gguf::Value::str_array(tokens));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  w.set("tokenizer.ggml.merges", gguf::Value::str_array(merges));
  auto set_id = [&](const char* cfg_key, const char* gguf_key) {
    const std::string content = token_content(cfg, cfg_key);
    if (content.empty()) return;
    auto it = id_of.find(content);
    if (it == id_of.end()) fail("{}: {} '{}' is not in the vocabulary", config_path, cfg_key, content);
    w.set(gguf_key, gguf::Value::u32(static_cast<uint32_t>(it->second)));
  };
  set_id("bos_token", "tokenizer.ggml.bos_token_id");
  set_id("eos_token", "tokenizer.ggml.eos_token_id");
  set_id("unk_token", "tokenizer.ggml.unknown_token_id");
  set_id("pad_token", "tokenizer.ggml.padding_token_id");
  if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
    w.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(cfg["add_bos_token"].get<bool>()));
  if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean())
    w.set("tokenizer.ggml.add_eos_token", gguf::Value::boolean(cfg["add_eos_token"].get<bool>()));
  if (cfg.contains("chat_template")) {
    const json& ct = cfg["chat_template"];
    if (ct.is_string()) {
      w.set("tokenizer.chat_template", gguf::Value::str(ct.get<std::string>()));
    } else if (ct.is_array()) {  // named templates: keep the default one
      for (const auto& t : ct)
        if (t.value("name", "") == "default") w.set("tokenizer.chat_template", gguf::Value::str(t.value("template", "")));
    }
  }
  rep.n_tokens = tokens.size();
  rep.n_merges = merges.size();
  return rep;
}

}  // namespace sluice
