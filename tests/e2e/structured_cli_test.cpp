// Structured output through the CLI: `run` and `chat` with --json-schema TEXT|@FILE, --grammar and
// --grammar-file print text their constraint accepts, say when max tokens cut it short, and a
// grammar that does not parse, a schema keyword sluice cannot honour or a grammar the model's
// vocabulary cannot begin exits 2 naming the flag, the position and the reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../unit/test_util.h"
#include "grammar/automaton.h"
#include "grammar/gbnf.h"
#include "grammar/token_grammar.h"

using namespace sluice;
using json = nlohmann::json;

namespace {

const std::filesystem::path kSource = SLUICE_SOURCE_DIR;
const std::string kModel = (kSource / "models/sluice-tiny-moe.gguf").string();
const std::string kPrompt = "And God said";
const std::string kSchema =
    R"({"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":99},)"
    R"("tag":{"enum":["a","b"]},"s":{"type":"string","maxLength":6}},"required":["n","tag","s"],)"
    R"("additionalProperties":false})";

// `sluice ARGS`: exit status, standard output and standard error apart.
struct Cli {
  int status;
  std::string out, err;
};
Cli cli(const std::string& args) {
  const std::filesystem::path err = test::scratch_dir() / "structured-cli.err";
  const test::ShellResult r =
      test::sh("{ " + std::string(SLUICE_BIN) + " " + args + " 2>'" + err.string() + "'; }");
  return {r.status, r.out, test::read_file(err)};
}

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// `run`'s generated text: standard output less the echoed prompt and the final newline.
std::string generated(const Cli& r) {
  EXPECT_TRUE(r.out.starts_with(kPrompt)) << r.out;
  std::string text = r.out.substr(std::min(r.out.size(), kPrompt.size()));
  if (text.ends_with('\n')) text.pop_back();
  return text;
}

void expect_valid(const std::string& text) {
  json j;
  ASSERT_NO_THROW(j = json::parse(text)) << text;
  ASSERT_TRUE(j.is_object()) << text;
  EXPECT_EQ(j.size(), 3u) << text;
  ASSERT_TRUE(j["n"].is_number_integer()) << text;
  EXPECT_GE(j["n"].get<int>(), 0);
  EXPECT_LE(j["n"].get<int>(), 99);
  EXPECT_TRUE(j["tag"] == "a" || j["tag"] == "b") << text;
  ASSERT_TRUE(j["s"].is_string()) << text;
}

}  // namespace

TEST(StructuredCli, RunWithASchemaPrintsValidJson) {
  const std::filesystem::path file = test::scratch_dir() / "cli.schema.json";
  std::ofstream(file) << kSchema;
  for (int seed = 1; seed <= 4; ++seed) {
    // The schema as text and as @FILE, at temperature 1 with drafts on.
    const std::string schema = seed % 2 ? quoted(kSchema) : "@" + file.string();
    const Cli r =
        cli("run -m " + kModel + " -p " + quoted(kPrompt) + " -c 512 -n 400 --temp 1 -s " +
            std::to_string(seed) + " --json-schema " + schema);
    ASSERT_EQ(r.status, 0) << r.err;
    expect_valid(generated(r));
    EXPECT_NE(r.err.find("grammar: output complete; masks and matching "), std::string::npos)
        << r.err;
  }
}

TEST(StructuredCli, RunWithAGrammarFileMatchesIt) {
  const std::filesystem::path file = kSource / "tests/data/structured/gbnf/arithmetic.gbnf";
  const grammar::Automaton a(grammar::parse_gbnf(test::read_file(file)));
  for (int seed = 1; seed <= 3; ++seed) {
    const Cli r = cli("run -m " + kModel + " -p " + quoted(kPrompt) + " -n 40 --temp 1 -s " +
                      std::to_string(seed) + " --grammar-file " + file.string());
    ASSERT_EQ(r.status, 0) << r.err;
    const std::string text = generated(r);
    const grammar::MatchState end = grammar::advance(a, grammar::start_state(a), text);
    EXPECT_FALSE(end.dead()) << text;
    // 40 tokens end the text wherever they reach; a complete one may end there too.
    if (r.err.find("output unfinished (length)") == std::string::npos) {
      EXPECT_TRUE(end.can_end) << text;
    }
  }
  const Cli r = cli("run -m " + kModel + " -p " + quoted(kPrompt) +
                    " -n 20 --temp 0 --grammar 'root ::= (\"ab\" | [0-9]){3,5}'");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string text = generated(r);
  EXPECT_GE(text.size(), 3u) << text;
  EXPECT_LE(text.size(), 10u) << text;
  EXPECT_EQ(text.find_first_not_of("ab0123456789"), std::string::npos) << text;
}

TEST(StructuredCli, MaxTokensInsideTheGrammarIsSaid) {
  const Cli r = cli("run -m " + kModel + " -p " + quoted(kPrompt) +
                    " -n 3 --temp 0 --grammar 'root ::= \"[\" [a-z ]{20,30} \"]\"'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("grammar: output unfinished (length)"), std::string::npos) << r.err;
}

TEST(StructuredCli, ChatRepliesMatchTheSchema) {
  const std::filesystem::path input = test::scratch_dir() / "chat-input.txt";
  std::ofstream(input) << "Give me JSON.\n";
  const Cli r =
      cli("chat -m " + kModel + " --no-history -c 512 -n 400 --temp 1 -s 3 --json-schema " +
          quoted(kSchema) + " < " + input.string());
  ASSERT_EQ(r.status, 0) << r.err;
  std::string reply = r.out;
  while (!reply.empty() && (reply.back() == '\n' || reply.back() == ' ')) reply.pop_back();
  const size_t start = reply.find('{');
  ASSERT_NE(start, std::string::npos) << r.out;
  expect_valid(reply.substr(start));
}

TEST(StructuredCli, BadConstraintsExit2WithThePlaceAndTheReason) {
  struct Case {
    std::string args, words;
  };
  const std::string run = "run -m " + kModel + " -p hi -n 4 ";
  const std::string chat = "chat -m " + kModel + " --no-history ";
  const Case cases[] = {
      {run + "--grammar 'root ::= \"a\" bad'",
       "--grammar: grammar: line 1, column 14: rule 'bad' is used but never defined"},
      {chat + "--grammar 'root ::= ('",
       "--grammar: grammar: line 1, column 11: expected ')' closing the group"},
      {run + "--json-schema '{\"type\":\"array\",\"contains\":{}}'",
       "--json-schema: json schema: at the root: keyword 'contains' is not supported"},
      {chat + "--json-schema '{\"properties\":{\"h\":{\"format\":\"hostname\"}}}'",
       "--json-schema: json schema: at /properties/h/format: format 'hostname' is not supported"},
      {run + "--json-schema '{\"type\":'", "--json-schema: "},
      {run + "--json-schema @/nonexistent.json", "--json-schema: "},
      {run + "--grammar 'root ::= \"a\"' --json-schema '{}'", "--grammar excludes --json-schema"},
  };
  for (const Case& c : cases) {
    const Cli r = cli(c.args + " </dev/null");
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.words), std::string::npos) << c.args << "\n" << r.err;
  }

  // A WordPiece vocabulary has no byte tokens: nothing in it can write a snowman.
  const std::string bert = test::testdata("vocab/ggml-vocab-bert-bge.gguf");
  if (!std::filesystem::exists(bert)) GTEST_SKIP() << bert << " missing";
  const std::string model = (test::scratch_dir() / "bert-vocab.gguf").string();
  ASSERT_EQ(cli("gen-model --preset tiny -q --force --vocab-from " + bert + " -o " + model).status,
            0);
  const Cli r = cli("run -m " + model + " -p hi -n 4 --grammar 'root ::= \"\xe2\x98\x83\"'");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("--grammar: grammar: no token of the model's vocabulary can begin the text "
                       "it allows (which starts with byte 0xE2)"),
            std::string::npos)
      << r.err;
}
