// Tokenizer: loads the tokenizer.ggml.* keys, splits special tokens out of the text, and hands
// the rest to the BPE or SPM model. Defaults for absent keys (BOS/EOS ids, add_bos, space prefix,
// end-of-generation tokens) follow llama.cpp so that prompts tokenize to the ids the reference
// engine produces for the same file.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <initializer_list>

#include "core/error.h"
#include "core/log.h"
#include "gguf/gguf.h"
#include "tokenizer/models.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace sluice {

namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// Pre-tokenizers whose tokenizer.json sets BPE.ignore_merges, and those whose vocabularies add a
// BOS by default (llama.cpp's defaults when add_bos_token is absent).
bool pre_ignores_merges(const std::string& pre) {
  for (const char* p : {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                        "midm-2.0", "lfm2", "gpt-4o", "llama4", "minimax-m2"})
    if (pre == p) return true;
  return false;
}
bool pre_adds_bos(const std::string& pre) {
  for (const char* p : {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                        "midm-2.0", "lfm2", "chameleon"})
    if (pre == p) return true;
  return false;
}

// Token texts that end a turn or a generation in the families we know; a vocabulary marks only
// the ones it has.
constexpr const char* kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
    // fill-in-the-middle padding and repository/file separators also stop generation
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
    "<reponame>", "<|file_sep|>"};
// Candidates for the end-of-turn token when tokenizer.ggml.eot_token_id is absent.
constexpr const char* kEotTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                     "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                     "<｜end▁of▁sentence｜>", "<end_of_utterance>"};

// Builds a new string: replacing in place would move the tail once per match, quadratic in the
// number of spaces of a long prompt.
void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t last = 0;
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, last)) {
    out.append(s, last, pos - last);
    out.append(to);
    last = pos + from.size();
  }
  out.append(s, last, std::string::npos);
  s.swap(out);
}

// "<0x41>" → 0x41; -1 for any other text.
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& f) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  if (!f.has("tokenizer.ggml.model")) fail("no vocabulary: key tokenizer.ggml.model is missing");
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model == "gpt2") {
    t->kind_ = Kind::kBpe;
  } else if (model == "llama") {
    t->kind_ = Kind::kSpm;
  } else if (model == "bert") {
    t->kind_ = Kind::kWordPiece;
  } else if (model == "no_vocab" || model == "none") {
    fail("the model has no vocabulary (tokenizer.ggml.model = '{}')", model);
  } else {
    fail("unsupported tokenizer model '{}' (tokenizer.ggml.model); supported: gpt2, llama, bert", model);
  }

  Vocab& v = t->vocab_;
  v.text = f.get_string_array("tokenizer.ggml.tokens");
  const size_t n = v.text.size();
  if (n == 0) fail("no vocabulary: tokenizer.ggml.tokens is missing or empty");
  if (n > static_cast<size_t>(INT32_MAX)) fail("tokenizer.ggml.tokens has {} entries, too many", n);
  v.score = f.get_float_array("tokenizer.ggml.scores");
  if (v.score.empty()) v.score.assign(n, 0.0f);
  if (v.score.size() != n)
    fail("tokenizer.ggml.scores has {} entries but tokenizer.ggml.tokens has {}", v.score.size(), n);
  const auto types = f.get_int_array("tokenizer.ggml.token_type");
  if (!types.empty() && types.size() != n)
    fail("tokenizer.ggml.token_type has {} entries but tokenizer.ggml.tokens has {}", types.size(), n);
  v.type.assign(n, TokenType::kNormal);
  for (size_t i = 0; i < types.size(); ++i)
    v.type[i] = types[i] >= 0 && types[i] <= 6 ? static_cast<TokenType>(types[i]) : TokenType::kUndefined;
  v.id_of.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (v.text[i].empty()) continue;  // an empty entry can never match text
    auto [it, fresh] = v.id_of.emplace(v.text[i], static_cast<int32_t>(i));
    if (!fresh) fail("duplicate token '{}' in tokenizer.ggml.tokens (ids {} and {})", v.text[i], it->second, i);
  }
  t->byte_ids_.fill(-1);
  for (int b = 0; b < 256; ++b) t->byte_ids_[b] = v.find(fmt::format("<0x{:02X}>", b));

  const bool spm = t->kind_ == Kind::kSpm;
  auto read_id = [&](const char* key, int64_t fallback) -> int32_t {
    const int64_t id = f.get_int_or(key, fallback);
    if (id >= 0 && id < static_cast<int64_t>(n)) return static_cast<int32_t>(id);
    if (f.has(key) && id != UINT32_MAX && id != -1)
      SLUICE_LOG_WARN("tokenizer: {} = {} is outside the vocabulary of {}; ignored", key, id, n);
    return -1;
  };
  // BERT's [CLS] plays BOS and [SEP] closes the input; llama.cpp's defaults are 101 and 102.
  const bool wpm = t->kind_ == Kind::kWordPiece;
  t->bos_ = read_id("tokenizer.ggml.bos_token_id", spm ? 1 : -1);
  if (wpm && t->bos_ < 0) t->bos_ = read_id("tokenizer.ggml.cls_token_id", 101);
  t->sep_ = read_id("tokenizer.ggml.seperator_token_id", wpm ? 102 : -1);
  t->eos_ = read_id("tokenizer.ggml.eos_token_id", spm ? 2 : -1);
  t->eot_ = read_id("tokenizer.ggml.eot_token_id", -1);
  t->eom_ = read_id("tokenizer.ggml.eom_token_id", -1);
  t->unk_ = read_id("tokenizer.ggml.unknown_token_id", spm ? 0 : wpm ? 100 : -1);

  bool add_bos_default = spm || wpm;
  if (wpm) {
    t->fold_ = f.get_bool_or("tokenizer.ggml.normalizer.lowercase", true);
  } else if (!spm) {
    t->pre_name_ = f.get_string_or("tokenizer.ggml.pre", "");
    t->pre_ = std::make_unique<PreTokenizer>(t->pre_name_);
    const auto merges = f.get_string_array("tokenizer.ggml.merges");
    if (merges.empty() && t->pre_name_ != "kimi-k2")
      fail("BPE vocabulary without merges: tokenizer.ggml.merges is missing or empty");
    t->bpe_ = std::make_unique<BpeModel>(t->vocab_, merges, pre_ignores_merges(t->pre_name_));
    add_bos_default = pre_adds_bos(t->pre_name_);
  } else {
    t->add_space_prefix_ = f.get_bool_or("tokenizer.ggml.add_space_prefix", true);
  }
  t->add_bos_ = f.get_bool_or("tokenizer.ggml.add_bos_token", add_bos_default);
  t->add_eos_ = f.get_bool_or("tokenizer.ggml.add_eos_token", false);
  if (t->add_bos_ && t->bos_ < 0)
    fail("tokenizer asks for a BOS token (add_bos_token) but tokenizer.ggml.bos_token_id is not set");
  if (t->add_eos_ && t->eos_ < 0)
    fail("tokenizer asks for an EOS token (add_eos_token) but tokenizer.ggml.eos_token_id is not set");
  if (wpm && t->add_bos_ && t->sep_ < 0)
    fail("WordPiece vocabulary without [SEP]: tokenizer.ggml.seperator_token_id is not set");

  if (t->eot_ < 0) {
    for (const char* s : kEotTexts) {
      if ((t->eot_ = v.find(s)) >= 0) break;
    }
  }
  t->eog_.assign(n, false);
  for (int32_t id : {t->eos_, t->eot_, t->eom_})
    if (id >= 0) t->eog_[id] = true;
  for (const char* s : kEogTexts) {
    const int32_t id = v.find(s);
    if (id >= 0) t->eog_[id] = true;
  }
  // Harmony (gpt-oss) ends a message with <|end|> but the generation with <|return|> / <|call|>.
  const int32_t end = v.find("<|end|>");
  if (end >= 0 && end != t->eos_ && v.find("<|return|>") >= 0 && v.find("<|call|>") >= 0)
    t->eog_[end] = false;

  for (int32_t id = 0; id < static_cast<int32_t>(n); ++id) {
    const TokenType ty = v.type[id];
    if (!v.text[id].empty() &&
        (ty == TokenType::kControl || ty == TokenType::kUserDefined || ty == TokenType::kUnknown))
      t->specials_.push_back(id);
  }
  // Longer texts first, so "<|im_end|>" is not cut by a special token that is its prefix.
  std::stable_sort(t->specials_.begin(), t->specials_.end(), [&](int32_t a, int32_t b) {
    return v.text[a].size() > v.text[b].size();
  });

  t->pieces_.resize(n);
  for (int32_t id = 0; id < static_cast<int32_t>(n); ++id) t->pieces_[id] = t->render(id);
  return t;
}

std::string Tokenizer::render(int32_t id) const {
  const std::string& text = vocab_.text[id];
  switch (vocab_.type[id]) {
    case TokenType::kControl:
    case TokenType::kUserDefined:
    case TokenType::kUnknown:
      return text;
    case TokenType::kByte: {
      const int b = parse_byte_token(text);
      if (b >= 0) return std::string(1, static_cast<char>(b));
      break;
    }
    default:
      break;
  }
  if (kind_ != Kind::kBpe) {  // SPM and WordPiece spell spaces as U+2581
    std::string s = text;
    replace_all(s, kSpmSpace, " ");
    return s;
  }
  std::string raw;
  return byte_level::decode(text, &raw) ? raw : text;
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= n_vocab()) fail("token id {} is outside the vocabulary of {}", id, n_vocab());
}

const std::string& Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return vocab_.text[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  check_id(id);
  return vocab_.type[id];
}

bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && id < n_vocab() && eog_[id]; }

std::string Tokenizer::token_bytes(int32_t id) const {
  return id >= 0 && id < n_vocab() ? pieces_[id] : std::string();
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids)
    if (id >= 0 && id < n_vocab()) out += pieces_[id];
  return out;
}

std::vector<Tokenizer::Fragment> Tokenizer::partition(std::string_view text, bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, text});
  std::vector<Fragment> next;
  for (int32_t id : specials_) {
    if (!parse_special && vocab_.type[id] != TokenType::kUserDefined) continue;
    const std::string& st = vocab_.text[id];
    next.clear();
    for (const Fragment& fr : frags) {
      if (fr.token >= 0) {
        next.push_back(fr);
        continue;
      }
      size_t last = 0;
      for (size_t pos = fr.text.find(st); pos != std::string_view::npos; pos = fr.text.find(st, last)) {
        if (pos > last) next.push_back({-1, fr.text.substr(last, pos - last)});
        next.push_back({id, {}});
        last = pos + st.size();
      }
      if (last < fr.text.size()) next.push_back({-1, fr.text.substr(last)});
    }
    frags.swap(next);
  }
  return frags;
}

void Tokenizer::encode_bpe_text(std::string_view text, std::vector<int32_t>& out) const {
  auto run = [&](std::string_view valid) {
    for (std::string_view piece : pre_->split(valid)) bpe_->encode_piece(byte_level::encode(piece), out);
  };
  // Regexes need valid UTF-8; a stray byte is kept as a piece of its own so that byte-level BPE
  // still round-trips it.
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8::valid_char_len(text, i);
    if (n > 0) {
      i += n;
      continue;
    }
    if (i > start) run(text.substr(start, i - start));
    bpe_->encode_piece(byte_level::encode(text.substr(i, 1)), out);
    start = ++i;
  }
  if (start < text.size()) run(text.substr(start));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && add_bos_) out.push_back(bos_);
  bool after_special = true;  // SPM prefixes a space to text at the start and after special tokens
  for (const Fragment& fr : partition(text, parse_special)) {
    if (fr.token >= 0) {
      out.push_back(fr.token);
      after_special = true;
      continue;
    }
    if (kind_ == Kind::kBpe) {
      encode_bpe_text(fr.text, out);
    } else if (kind_ == Kind::kWordPiece) {
      wordpiece_encode(vocab_, WordPieceOptions{fold_}, unk_, fr.text, out);
    } else {
      std::string s = add_space_prefix_ && after_special ? " " : "";
      s.append(fr.text);
      replace_all(s, " ", kSpmSpace);
      spm_encode(vocab_, byte_ids_, unk_, s, out);
    }
    after_special = false;
  }
  if (add_special && add_eos_) out.push_back(eos_);
  if (add_special && add_bos_ && kind_ == Kind::kWordPiece) out.push_back(sep_);
  return out;
}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_.token_bytes(id);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const size_t n = utf8::valid_char_len(pending_, i);
    if (n > 0) {
      out.append(pending_, i, n);
      i += n;
      continue;
    }
    // Keep an unfinished character for the next token: a lead byte followed only by
    // continuation bytes, fewer than it announces.
    const auto lead = static_cast<unsigned char>(pending_[i]);
    const size_t want = utf8::seq_len(lead);
    bool unfinished = want > 1 && lead >= 0xC2 && lead <= 0xF4 && i + want > pending_.size();
    for (size_t k = i + 1; unfinished && k < pending_.size(); ++k)
      unfinished = (static_cast<unsigned char>(pending_[k]) & 0xC0) == 0x80;
    if (unfinished) break;
    // One U+FFFD for the lead byte and the continuation bytes it claimed, as UTF-8 decoders with
    // errors=replace do.
    size_t bad = 1;
    if (want > 1 && lead >= 0xC2 && lead <= 0xF4)
      while (bad < want && i + bad < pending_.size() &&
             (static_cast<unsigned char>(pending_[i + bad]) & 0xC0) == 0x80)
        ++bad;
    out += utf8::kReplacement;
    i += bad;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = pending_.empty() ? std::string() : std::string(utf8::kReplacement);
  pending_.clear();
  return out;
}

}  // namespace sluice
