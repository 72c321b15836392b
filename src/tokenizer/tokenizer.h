// Text ↔ token ids for GGUF vocabularies: byte-level BPE (tokenizer.ggml.model "gpt2") with the
// pre-tokenizer named by tokenizer.ggml.pre, SentencePiece BPE ("llama") and BERT WordPiece
// ("bert"). Special tokens
// (control / user-defined) are split out of the text before the subword model runs. Behaviour
// follows llama.cpp's reading of the GGUF keys, so that ids match what the reference engine feeds
// the model.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace sluice {

namespace gguf {
class File;
}
class PreTokenizer;
class BpeModel;

class Tokenizer {
 public:
  enum class Kind { kBpe, kSpm, kWordPiece };

  // Throws sluice::Error on a missing or malformed vocabulary, an unknown model or pre-tokenizer,
  // or add_bos/add_eos set without the matching token.
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& file);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_special: prepend BOS / append EOS when the vocabulary asks for it (add_bos_token /
  // add_eos_token keys, else the model-type default); WordPiece wraps the text in [CLS] ... [SEP]. parse_special: control tokens written in the
  // text become their ids; user-defined tokens are always recognised. Thread-safe.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // Raw bytes the token stands for: byte-level / ▁ decoded for normal tokens, the byte of a <0xNN>
  // token, the literal text of control, user-defined and unknown tokens. Out-of-range ids give "".
  std::string token_bytes(int32_t id) const;
  // Concatenated token_bytes; no space stripping, so decoding a continuation keeps its spaces.
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t n_vocab() const { return vocab_.size(); }
  int32_t bos() const { return bos_; }  // -1 when absent
  int32_t eos() const { return eos_; }  // -1 when absent
  int32_t eot() const { return eot_; }  // -1 when absent
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // End of generation: eos, eot, eom and the end-of-turn tokens known by text (<|im_end|>,
  // <|eot_id|>, <|return|>, <|endoftext|>, ...).
  bool is_eog(int32_t id) const;
  const std::string& token_text(int32_t id) const;  // throws on an out-of-range id
  TokenType token_type(int32_t id) const;            // throws on an out-of-range id
  int32_t find_token(std::string_view text) const { return vocab_.find(text); }  // -1 if absent
  Kind kind() const { return kind_; }
  const std::string& pre() const { return pre_name_; }

 private:
  Tokenizer() = default;
  struct Fragment {
    int32_t token;          // >= 0: a special token; -1: text
    std::string_view text;  // the text when token < 0
  };
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;
  void encode_bpe_text(std::string_view text, std::vector<int32_t>& out) const;
  std::string render(int32_t id) const;
  void check_id(int32_t id) const;

  Vocab vocab_;
  Kind kind_ = Kind::kBpe;
  std::string pre_name_;
  std::unique_ptr<PreTokenizer> pre_;
  std::unique_ptr<BpeModel> bpe_;
  std::array<int32_t, 256> byte_ids_{};  // <0xNN> tokens, -1 where missing
  int32_t bos_ = -1, eos_ = -1, eot_ = -1, eom_ = -1, unk_ = -1, sep_ = -1;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false, fold_ = true;
  std::vector<bool> eog_;
  std::vector<int32_t> specials_;      // control / user-defined / unknown ids, longest text first
  std::vector<std::string> pieces_;    // token_bytes of every id, built at load
};

// Incremental detokenizer for streaming: buffers the bytes of a token that ends inside a
// multi-byte UTF-8 character until the character completes, so push() never returns a partial
// character. Bytes that can never form a valid character come out as U+FFFD.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  std::string push(int32_t id);
  // Whatever is still buffered (an unfinished character becomes U+FFFD); resets the decoder.
  std::string flush();

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace sluice
