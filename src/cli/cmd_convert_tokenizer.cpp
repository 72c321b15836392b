// `sluice convert-tokenizer tokenizer.json [tokenizer_config.json] -o vocab.gguf [--pre NAME]`:
// writes a vocab-only GGUF from a Hugging Face byte-level BPE tokenizer.
#include <fmt/format.h>

#include "cli/commands.h"
#include "gguf/writer.h"
#include "tokenizer/hf_convert.h"

namespace sluice::cli {

int cmd_convert_tokenizer(int argc, char** argv) {
  CLI::App app{"Convert a Hugging Face tokenizer.json into a vocab-only GGUF", "sluice convert-tokenizer"};
  std::string tokenizer_json, config_json, out;
  HfConvertOptions opt;
  app.add_option("tokenizer", tokenizer_json, "tokenizer.json")->required()->check(CLI::ExistingFile);
  app.add_option("config", config_json, "tokenizer_config.json (BOS/EOS, add_bos_token, chat template)")
      ->check(CLI::ExistingFile);
  app.add_option("-o,--output", out, "GGUF file to write")->required();
  app.add_option("--pre", opt.pre, "tokenizer.ggml.pre to write instead of the detected one");
  SLUICE_PARSE(app, argc, argv);

  gguf::Writer w;
  const HfConvertReport rep = convert_hf_tokenizer(tokenizer_json, config_json, opt, w);
  w.write(out);
  for (const auto& warning : rep.warnings) fmt::print(stderr, "warning: {}\n", warning);
  fmt::print("wrote {}: {} tokens ({} special), {} merges, pre-tokenizer '{}'\n", out, rep.n_tokens,
             rep.n_special, rep.n_merges, rep.pre);
  return 0;
}

}  // namespace sluice::cli
