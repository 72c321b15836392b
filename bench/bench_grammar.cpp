// Grammar mask cost on a real vocabulary (not a test): builds the vocabulary trie, compiles a JSON
// Schema (or GBNF) grammar, then walks random allowed tokens through it twice — the first walk
// computes each state's mask on first use (what a new schema costs), the second finds them cached
// (every later request with the schema) — and prints the time per token of each.
// usage: bench_grammar VOCAB.gguf SCHEMA.json|GRAMMAR.gbnf [TOKENS] [WALKS]
// (bench/prompts/nested-order.schema.json is the nested schema of the structured-output benchmark)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "core/timer.h"
#include "gguf/gguf.h"
#include "grammar/token_grammar.h"
#include "sluice/grammar.h"
#include "tokenizer/tokenizer.h"

using namespace sluice;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: bench_grammar VOCAB.gguf SCHEMA.json|GRAMMAR.gbnf [TOKENS] [WALKS]\n");
    return 2;
  }
  const std::string spec = read(argv[2]);
  const bool gbnf = std::string(argv[2]).ends_with(".gbnf");
  const int tokens = argc > 3 ? std::atoi(argv[3]) : 200;
  const int walks = argc > 4 ? std::atoi(argv[4]) : 8;
  auto file = gguf::File::open(argv[1]);
  auto tok = Tokenizer::from_gguf(*file);
  Timer t;
  auto vocab = std::make_shared<const grammar::VocabTrie>(*tok, tok->n_vocab());
  std::printf("vocabulary: %d tokens, trie of %zu nodes built in %.1f ms\n", tok->n_vocab(),
              vocab->nodes().size(), t.seconds() * 1e3);
  t.reset();
  const std::string text = gbnf ? spec : json_schema_grammar(spec);
  auto g = std::make_shared<const grammar::TokenGrammar>(text, vocab);
  std::printf("grammar: %zu bytes of GBNF, %d automaton states, compiled in %.1f ms\n", text.size(),
              g->automaton().n_states(), t.seconds() * 1e3);
  std::vector<float> logits(tok->n_vocab(), 0.0f), out;
  for (int pass = 0; pass < 2; ++pass) {
    double mask_s = 0, accept_s = 0, worst = 0;
    int steps = 0, complete = 0;
    for (int w = 0; w < walks; ++w) {
      std::mt19937_64 rng(1000 + w);
      grammar::GrammarMatcher m(g);
      for (int i = 0; i < tokens && !m.closed(); ++i) {
        Timer step;
        if (!m.mask(logits, out, false)) break;
        const double s = step.seconds();
        mask_s += s;
        worst = std::max(worst, s);
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < tok->n_vocab(); ++id)
          if (std::isfinite(out[id])) allowed.push_back(id);
        step.reset();
        m.accept(allowed[rng() % allowed.size()]);
        accept_s += step.seconds();
        ++steps;
      }
      complete += m.closed();
    }
    std::printf(
        "%s: %d tokens in %d walks (%d complete): mask %.1f us/token (worst %.2f ms), accept %.1f "
        "us/token\n",
        pass == 0 ? "first use (masks computed)" : "cached (a repeated schema)", steps, walks,
        complete, mask_s / steps * 1e6, worst * 1e3, accept_s / steps * 1e6);
  }
  return 0;
}
