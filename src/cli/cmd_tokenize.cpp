// `sluice tokenize [MODEL|-m MODEL] (-p TEXT | -f FILE) [--ids|--json] [--special] [--no-bos]`: shows how
// a model's vocabulary splits text, to check prompts and compare against other engines.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {

namespace {

// Control characters and bytes that are not printable ASCII are escaped so every piece stays on
// its line; multi-byte UTF-8 passes through.
std::string escape_piece(const std::string& s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\\' || c == '\'') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7F) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  CLI::App app{"Tokenize text with a model's (or vocab-only GGUF's) vocabulary", "sluice tokenize"};
  std::string model, prompt, file;
  bool ids_only = false, json_out = false, special = false, no_bos = false;
  add_model_option(app, model);  // a model or a vocab-only GGUF
  auto* p = app.add_option("-p,--prompt", prompt, "text to tokenize");
  auto* f = app.add_option("-f,--file", file, "file whose bytes are tokenized");
  p->excludes(f);
  auto* ids = app.add_flag("--ids", ids_only, "print ids only, space separated");
  app.add_flag("--json", json_out, "print {\"ids\": [...], \"pieces\": [...]}")->excludes(ids);
  app.add_flag("--special", special, "recognise control tokens written in the text");
  app.add_flag("--no-bos", no_bos, "do not add BOS/EOS even when the vocabulary asks for them");
  SLUICE_PARSE(app, argc, argv);
  if (!*p && !*f) fail("give the text with -p TEXT or -f FILE");

  std::string text = prompt;
  if (*f) {
    std::ifstream in(file, std::ios::binary);
    if (!in) fail("cannot open {}", file);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto gf = gguf::File::open(model);
  auto tok = Tokenizer::from_gguf(*gf);
  const auto toks = tok->encode(text, !no_bos, special);

  if (ids_only) {
    fmt::print("{}\n", fmt::join(toks, " "));
  } else if (json_out) {
    nlohmann::json j;
    j["ids"] = toks;
    j["pieces"] = nlohmann::json::array();
    for (int32_t id : toks) j["pieces"].push_back(tok->token_bytes(id));
    // A piece may be part of a UTF-8 character; replace such bytes rather than fail.
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    for (int32_t id : toks) fmt::print("{} '{}'\n", id, escape_piece(tok->token_bytes(id)));
  }
  return 0;
}

}  // namespace sluice::cli
