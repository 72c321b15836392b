// HF tokenizer.json (+ tokenizer_config.json) → the tokenizer.ggml.* keys of a vocab-only GGUF,
// so that a Hugging Face byte-level BPE tokenizer can be used (and tested) without a converted
// model. Only byte-level BPE models are accepted; anything else fails with the reason.
#pragma once

#include <string>
#include <vector>

namespace sluice::gguf {
class Writer;
}

namespace sluice {

struct HfConvertOptions {
  std::string pre;  // tokenizer.ggml.pre to write; empty: detect from the pre_tokenizer regexes
};

struct HfConvertReport {
  std::string pre;                    // the pre-tokenizer name written
  size_t n_tokens = 0, n_merges = 0, n_special = 0;
  std::vector<std::string> warnings;  // parts of tokenizer.json sluice does not reproduce
};

// Reads both files (config_path may be empty) and sets the keys on `w`. Throws sluice::Error.
HfConvertReport convert_hf_tokenizer(const std::string& tokenizer_json_path,
                                     const std::string& config_path, const HfConvertOptions& opt,
                                     gguf::Writer& w);

}  // namespace sluice
