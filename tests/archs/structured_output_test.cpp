// Structured output on models: every JSON Schema of tests/data/structured/schemas.json sampled at
// temperature 1 over several seeds, batched by the Scheduler (a grammar per slot, drafting on),
// must finish complete and validate under ajv (tests/node/validate_json.mjs) — on a random-weight
// model with Qwen3's 151k vocabulary and on the shipped model. The example GBNF grammars sampled
// on the shipped model match their grammar, and greedy output under a grammar is the same with
// and without speculative drafts.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../unit/qwen3_model.h"
#include "../unit/test_util.h"
#include "grammar/token_grammar.h"
#include "sluice/sluice.h"

using namespace sluice;
using json = nlohmann::json;

namespace {

const std::filesystem::path kSource = SLUICE_SOURCE_DIR;
const std::string kShipped = (kSource / "models/sluice-tiny-moe.gguf").string();

bool have_node() {
  return std::filesystem::exists(kSource / "tests/node/node_modules/ajv") &&
         std::system("node --version > /dev/null 2>&1") == 0;
}

// Samples every schema `seeds` times (seed 1..seeds) through one Scheduler; returns the ajv cases
// ({name, schema, outputs}). Each generation must end with its text complete.
json sample_schemas(Engine& engine, const std::vector<int32_t>& prompt, int seeds) {
  const json schemas = json::parse(test::read_file(kSource / "tests/data/structured/schemas.json"));
  SchedulerOptions so;
  so.n_parallel = 8;
  so.max_queue = 1024;
  Scheduler sched(engine, so);
  struct Pending {
    size_t schema;
    std::shared_ptr<CompletionHandle> handle;
  };
  std::vector<Pending> pending;
  for (size_t i = 0; i < schemas.size(); ++i) {
    const std::string gbnf = json_schema_grammar(schemas[i]["schema"].dump());
    for (int seed = 1; seed <= seeds; ++seed) {
      CompletionRequest r;
      r.prompt = prompt;
      r.options.max_tokens = 400;
      r.options.grammar = gbnf;
      r.options.sampling.temperature = 1.0f;
      r.options.sampling.top_k = 200;
      r.options.sampling.top_p = 1.0f;
      r.options.sampling.min_p = 0.0f;
      r.options.sampling.seed = static_cast<uint64_t>(seed) * 7919 + i;
      Submission sub = sched.submit(std::move(r));
      EXPECT_EQ(sub.status, SubmitStatus::kOk) << sub.message;
      if (sub.handle) pending.push_back({i, sub.handle});
    }
  }
  json cases = json::array();
  for (const auto& s : schemas)
    cases.push_back({{"name", s["name"]}, {"schema", s["schema"]}, {"outputs", json::array()}});
  for (Pending& p : pending) {
    CompletionEvent ev;
    while (!p.handle->finished()) p.handle->next(ev, std::chrono::milliseconds(1000));
    EXPECT_EQ(ev.kind, CompletionEvent::Kind::kDone) << ev.text;
    const GenerateResult& r = ev.result;
    EXPECT_TRUE(r.finish == FinishReason::kGrammar || r.finish == FinishReason::kEog)
        << cases[p.schema]["name"] << ": unfinished after " << r.tokens.size()
        << " tokens: " << r.text;
    cases[p.schema]["outputs"].push_back(r.text);
  }
  return cases;
}

// Runs ajv over the cases; every output must validate.
void validate(const json& cases, const std::string& label) {
  const std::filesystem::path file = test::scratch_dir() / ("structured-" + label + ".json");
  std::ofstream(file) << cases.dump();
  const test::ShellResult r = test::sh("cd '" + (kSource / "tests/node").string() +
                                       "' && node validate_json.mjs '" + file.string() + "'");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("outputs valid"), std::string::npos) << r.out;
  std::printf("%s: %s", label.c_str(),
              r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1).c_str());
}

}  // namespace

TEST(StructuredOutput, SchemasValidateOnTheQwen3Vocabulary) {
  const std::string model = test::qwen3_tiny_model();
  if (model.empty() || !have_node())
    GTEST_SKIP() << "tests/node/node_modules or node missing (scripts/install-deps)";
  auto engine = Engine::load({.model_path = model, .n_ctx = 1024});
  ASSERT_GT(engine->info().n_vocab, 150000);
  const auto prompt = engine->tokenize(
      "<|im_start|>user\nAnswer in JSON.<|im_end|>\n<|im_start|>assistant\n", false, true);
  const json cases = sample_schemas(*engine, prompt, 6);
  validate(cases, "qwen3");
}

TEST(StructuredOutput, SchemasValidateOnTheShippedModel) {
  if (!have_node())
    GTEST_SKIP() << "tests/node/node_modules or node missing (scripts/install-deps)";
  auto engine = Engine::load({.model_path = kShipped, .n_ctx = 1024});
  const json cases = sample_schemas(*engine, engine->tokenize("And God said", true), 6);
  validate(cases, "shipped");
}

TEST(StructuredOutput, ExampleGrammarsHoldOnTheShippedModel) {
  auto engine = Engine::load({.model_path = kShipped, .n_ctx = 512});
  auto session = engine->new_session();
  for (const char* name : {"arithmetic", "json", "list", "chess", "japanese"}) {
    const std::string gbnf =
        test::read_file(kSource / "tests/data/structured/gbnf" / (std::string(name) + ".gbnf"));
    const grammar::Automaton a(grammar::parse_gbnf(gbnf));
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      GenerateOptions o;
      o.max_tokens = 60;
      o.grammar = gbnf;
      o.sampling.temperature = 1.0f;
      o.sampling.seed = seed;
      const GenerateResult r = session->generate(engine->tokenize("And God said", true), o, {});
      const grammar::MatchState end = grammar::advance(a, grammar::start_state(a), r.text);
      if (r.finish == FinishReason::kLength)
        EXPECT_FALSE(end.dead()) << name << ": " << r.text;
      else
        EXPECT_TRUE(end.can_end) << name << ": " << r.text;
      EXPECT_FALSE(r.text.empty()) << name;
    }
  }
}

TEST(StructuredOutput, DraftsDoNotChangeGreedyOutput) {
  auto engine = Engine::load({.model_path = kShipped, .n_ctx = 512, .draft = DraftMode::kNgram});
  auto session = engine->new_session();
  // The model repeats itself on this prompt, so n-gram drafts come; the grammar forbids 'e' and
  // ends a sentence after 40 characters at most, so many drafts run into a refused token.
  const std::string gbnf = "root ::= ([^e.\\n]{1,40} \".\"){2}\n";
  const auto prompt =
      engine->tokenize("And God said, Let there be light: and there was light. And God said", true);
  GenerateOptions o;
  o.max_tokens = 80;
  o.grammar = gbnf;
  o.sampling.temperature = 0;
  o.draft.mode = DraftMode::kNone;
  const GenerateResult plain = session->generate(prompt, o, {});
  o.draft.mode = DraftMode::kNgram;
  o.draft.adaptive = false;
  session->clear();
  const GenerateResult drafted = session->generate(prompt, o, {});
  EXPECT_EQ(drafted.tokens, plain.tokens);
  EXPECT_EQ(drafted.text, plain.text);
  EXPECT_GT(drafted.n_drafted, 0);
  EXPECT_EQ(plain.text.find('e'), std::string::npos) << plain.text;
  EXPECT_EQ(plain.finish, FinishReason::kGrammar) << plain.text;
}
