// BERT WordPiece as HF's BertNormalizer + BertPreTokenizer + WordPiece do it: drop control
// characters, turn whitespace into spaces, isolate CJK ideographs, fold (NFD, drop non-spacing
// marks, lowercase), split into words and punctuation, then cover each word greedily with the
// longest vocabulary entries. GGUF vocabularies converted by llama.cpp spell a word-initial piece
// "▁piece" and a continuation "piece" (HF's "##piece"), so the cover starts from "▁" + word.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "core/error.h"
#include "tokenizer/models.h"
#include "tokenizer/utf8.h"

namespace sluice {

namespace {

#include "tokenizer/bert_fold_table.inc"

// Code point → folded replacement, parsed once from the generated table.
const std::unordered_map<uint32_t, std::string>& fold_map() {
  static const auto m = [] {
    std::unordered_map<uint32_t, std::string> out;
    const std::string_view table(kBertFoldTable, sizeof(kBertFoldTable) - 1);
    for (size_t pos = 0; pos < table.size();) {
      const size_t tab = table.find('\t', pos);
      const size_t nl = table.find('\n', tab);
      const std::string_view src = table.substr(pos, tab - pos);
      out.emplace(utf8::decode_at(src, 0, src.size()), std::string(table.substr(tab + 1, nl - tab - 1)));
      pos = nl + 1;
    }
    return out;
  }();
  return m;
}

// HF's "Chinese character" blocks (CJK ideographs, not kana or hangul), padded with spaces.
bool is_cjk(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// Hangul syllables decompose into conjoining jamo under NFD (Unicode's arithmetic rule).
void append_hangul(uint32_t cp, std::string& out) {
  const uint32_t s = cp - 0xAC00;
  out += utf8::encode(0x1100 + s / (21 * 28));
  out += utf8::encode(0x1161 + (s % (21 * 28)) / 28);
  if (s % 28) out += utf8::encode(0x11A7 + s % 28);
}

// Single-character classes and the word splitter; compiled once, matched with per-call data.
class Classes {
 public:
  Classes()
      : control_(compile(R"((?![\t\n\r])[\p{Cc}\p{Cf}\p{Co}\p{Cn}])")),
        space_(compile(R"(\s)")),
        words_(compile(R"([\p{P}!-/:-@\[-`{-~]|[^\s\p{P}!-/:-@\[-`{-~]+)")) {}
  bool is_control(std::string_view ch) const { return match_at(control_.get(), ch, 0).first == 0; }
  bool is_space(std::string_view ch) const { return match_at(space_.get(), ch, 0).first == 0; }
  const pcre2_code* words() const { return words_.get(); }

  // (start, end) of the first match at or after offset; start = npos when none.
  static std::pair<size_t, size_t> match_at(const pcre2_code* code, std::string_view s, size_t offset) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), offset, PCRE2_NO_UTF_CHECK,
                               md, nullptr);
    std::pair<size_t, size_t> r{std::string_view::npos, 0};
    if (rc >= 0) {
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      r = {ov[0], ov[1]};
    }
    pcre2_match_data_free(md);
    return r;
  }

 private:
  struct Free {
    void operator()(pcre2_code* c) const { pcre2_code_free(c); }
  };
  using Code = std::unique_ptr<pcre2_code, Free>;
  static Code compile(const char* pattern) {
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* c = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                  PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    if (!c) fail("WordPiece: internal regex does not compile at offset {}", off);
    return Code(c);
  }
  Code control_, space_, words_;
};

const Classes& classes() {
  static const Classes c;
  return c;
}

constexpr size_t kMaxWordChars = 100;  // HF WordPiece.max_input_chars_per_word

}  // namespace

void wordpiece_encode(const Vocab& vocab, const WordPieceOptions& opt, int32_t unk, std::string_view text,
                      std::vector<int32_t>& out) {
  const Classes& cls = classes();
  const auto& fold = fold_map();
  std::string norm;
  for (size_t i = 0; i < text.size();) {
    size_t n = utf8::valid_char_len(text, i);
    if (n == 0) {  // invalid bytes read as U+FFFD, which BERT drops
      ++i;
      continue;
    }
    const std::string_view ch = text.substr(i, n);
    const uint32_t cp = utf8::decode_at(text, i, n);
    i += n;
    if (cp == 0 || cp == 0xFFFD || cls.is_control(ch)) continue;
    if (cls.is_space(ch)) {
      norm.push_back(' ');
    } else if (is_cjk(cp)) {
      norm.push_back(' ');
      norm.append(ch);
      norm.push_back(' ');
    } else if (!opt.fold) {
      norm.append(ch);
    } else if (cp >= 0xAC00 && cp <= 0xD7A3) {
      append_hangul(cp, norm);
    } else if (auto it = fold.find(cp); it != fold.end()) {
      norm += it->second;
    } else {
      norm.append(ch);
    }
  }

  std::string word;
  for (size_t off = 0;;) {
    const auto [s, e] = Classes::match_at(cls.words(), norm, off);
    if (s == std::string_view::npos) break;
    off = e;
    word.assign("\xE2\x96\x81");  // U+2581 marks the word start
    word.append(norm, s, e - s);
    size_t n_chars = 0;
    for (size_t k = s; k < e; k += utf8::seq_len(static_cast<unsigned char>(norm[k]))) ++n_chars;
    const size_t mark = out.size();
    bool covered = n_chars <= kMaxWordChars;
    for (size_t i = 0; covered && i < word.size();) {
      // Longest vocabulary entry starting at i, trying character boundaries from the end.
      size_t j = word.size();
      int32_t id = -1;
      while (j > i && (id = vocab.find(std::string_view(word).substr(i, j - i))) < 0) {
        do --j;
        while (j > i && (static_cast<unsigned char>(word[j]) & 0xC0) == 0x80);
      }
      if (id < 0) {
        covered = false;
        break;
      }
      out.push_back(id);
      i = j;
    }
    if (!covered) {
      out.resize(mark);
      if (unk >= 0) out.push_back(unk);
    }
  }
}

}  // namespace sluice
