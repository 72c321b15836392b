// Regex pre-tokenizers for byte-level BPE, chosen by tokenizer.ggml.pre. A pre-tokenizer is a list
// of regexes applied in sequence, as HF tokenizers' Sequence of Split(behavior = Isolated): each
// regex splits every piece produced so far into its matches and the unmatched gaps between them,
// and all of those stay pieces. BPE then runs on each piece separately.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

class PreTokenizer {
 public:
  // Throws sluice::Error naming the pre-tokenizer when `name` is unknown.
  explicit PreTokenizer(const std::string& name);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Splits valid UTF-8 text into pieces (views into `text`), in order, covering all of it.
  std::vector<std::string_view> split(std::string_view text) const;

  // The regexes in application order, as compiled (after rewriting constructs PCRE2 lacks).
  const std::vector<std::string>& patterns() const { return patterns_; }

  // The canonical tokenizer.ggml.pre name of the family whose regex list equals `patterns` (as a
  // tokenizer.json Sequence of Splits spells them); "" when none does.
  static std::string detect(const std::vector<std::string>& patterns);
  // GPT-2's ByteLevel regex, which a ByteLevel pre-tokenizer with use_regex applies.
  static std::string byte_level_regex();

  // Every name tokenizer.ggml.pre may carry that this class accepts.
  static std::vector<std::string> known_names();

 private:
  struct Compiled;
  std::vector<std::string> patterns_;
  std::vector<std::unique_ptr<Compiled>> compiled_;
};

}  // namespace sluice
