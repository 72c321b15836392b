// The subword models behind Tokenizer: byte-level BPE (merge ranks), SentencePiece BPE (token
// scores with byte fallback) and BERT WordPiece (greedy longest match). Each turns one already split piece of text into ids;
// special-token handling and BOS/EOS live in Tokenizer.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace sluice {

class BpeModel {
 public:
  // merges: "left right" strings, rank = index. With no merges the model ranks a pair by the id
  // of the merged token, as tiktoken vocabularies (Kimi-K2) do. ignore_merges: a piece that is
  // itself a token is emitted whole (HF's BPE.ignore_merges, used by Llama-3 and o200k).
  BpeModel(const Vocab& vocab, const std::vector<std::string>& merges, bool ignore_merges);

  // Appends the ids of one pre-tokenized piece, given in the byte-level alphabet.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  int rank(std::string_view left, std::string_view right, std::string& scratch) const;

  const Vocab& vocab_;
  std::unordered_map<std::string, int32_t, Vocab::Hash, std::equal_to<>> ranks_;
  bool ignore_merges_;
};

// SentencePiece BPE: repeatedly merges the adjacent pair whose merged text is the highest-scoring
// token; characters left without a token become <0xNN> byte tokens (or unk when those are absent).
// `text` has spaces already escaped as U+2581.
void spm_encode(const Vocab& vocab, const std::array<int32_t, 256>& byte_ids, int32_t unk,
                std::string_view text, std::vector<int32_t>& out);

// BERT WordPiece: BertNormalizer (controls dropped, whitespace to spaces, CJK ideographs isolated,
// and with `fold` NFD + accent stripping + lowercasing), split into words and punctuation, then
// each word covered by the longest vocabulary entries; a word without a full cover becomes unk.
struct WordPieceOptions {
  bool fold = true;  // lowercase and strip accents, as uncased BERT vocabularies require
};
void wordpiece_encode(const Vocab& vocab, const WordPieceOptions& opt, int32_t unk, std::string_view text,
                      std::vector<int32_t>& out);

}  // namespace sluice
