// JSON Schema to grammar: which JSON texts each construct admits (and refuses), integer ranges
// checked number by number, patterns and formats, and the errors that name an unsupported keyword
// and where it is. (Sampled outputs are validated with ajv in tests/archs/structured_output_test.)
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/token_grammar.h"
#include "sluice/grammar.h"
#include "test_util.h"

using namespace sluice;
using namespace sluice::grammar;

namespace {

// A compiled schema grammar that answers whether whole texts match.
class Schema {
 public:
  explicit Schema(const std::string& schema) : a_(parse_gbnf(json_schema_grammar(schema))) {}
  bool operator()(const std::string& text) const {
    return advance(a_, start_state(a_), text).can_end;
  }

 private:
  Automaton a_;
};

std::string error_of(const std::string& schema) {
  try {
    Automaton a(parse_gbnf(json_schema_grammar(schema)));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(JsonSchema, ObjectsRequiredOptionalAndOrder) {
  const Schema s(
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
                     "required":["b"],"additionalProperties":false})");
  EXPECT_TRUE(s(R"({"b":"x"})"));
  EXPECT_TRUE(s(R"({"a":1,"b":"x","c":true})"));
  EXPECT_TRUE(s(R"({ "a": -7, "b": "" })"));
  EXPECT_TRUE(s("{\n  \"b\": \"x\",\n  \"c\": false\n}"));
  EXPECT_FALSE(s(R"({})"));  // b is required
  EXPECT_FALSE(s(R"({"a":1})"));
  EXPECT_FALSE(s(R"({"b":"x","a":1})"));  // schema order
  EXPECT_FALSE(s(R"({"b":"x","d":1})"));  // no additional properties
  EXPECT_FALSE(s(R"({"a":1,,"b":"x"})"));
  EXPECT_FALSE(s(R"({"b":"x",})"));
  EXPECT_FALSE(s(R"({"a":1.5,"b":"x"})"));  // integer
  EXPECT_FALSE(s("{\"b\":\"x\"}   "));      // nothing after the value
  // Without properties: any object; with additionalProperties a schema: extra keys that are not
  // the declared names.
  const Schema any(R"({"type":"object"})");
  EXPECT_TRUE(any(R"({"k":[1,{"z":null}],"e":"\u00e9\n"})"));
  EXPECT_FALSE(any(R"([1])"));
  const Schema extra(
      R"({"type":"object","properties":{"id":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})");
  EXPECT_TRUE(extra(R"({"id":1,"flag":true,"i":false,"idx":true})"));
  EXPECT_TRUE(extra(R"({"flag":true})"));
  EXPECT_FALSE(extra(R"({"id":1,"id":true})"));  // an extra "id" would have to be an integer
  EXPECT_FALSE(extra(R"({"flag":1})"));
}

TEST(JsonSchema, ArraysCountsAndTuples) {
  const Schema s(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})");
  EXPECT_FALSE(s("[1]"));
  EXPECT_TRUE(s("[1,2]"));
  EXPECT_TRUE(s("[ 1, 2, 3 ]"));
  EXPECT_FALSE(s("[1,2,3,4]"));
  EXPECT_FALSE(s("[1,2,]"));
  const Schema empty_ok(R"({"type":"array","items":{"type":"null"}})");
  EXPECT_TRUE(empty_ok("[]"));
  EXPECT_TRUE(empty_ok("[null,null,null,null,null]"));
  const Schema tuple(
      R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false})");
  EXPECT_TRUE(tuple("[]"));
  EXPECT_TRUE(tuple("[1]"));
  EXPECT_TRUE(tuple(R"([1,"a"])"));
  EXPECT_FALSE(tuple(R"([1,"a",2])"));
  EXPECT_FALSE(tuple(R"(["a"])"));
  const Schema draft7(
      R"({"type":"array","items":[{"type":"boolean"}],"additionalItems":{"type":"integer"},"minItems":2})");
  EXPECT_TRUE(draft7("[true,1,2]"));
  EXPECT_FALSE(draft7("[true]"));
  EXPECT_FALSE(draft7("[1,1]"));
}

TEST(JsonSchema, EnumsConstsUnionsAndCombinators) {
  const Schema e(R"({"enum":["a\"b",1.5,null,{"x":[true]}]})");
  EXPECT_TRUE(e(R"("a\"b")"));
  EXPECT_TRUE(e("1.5"));
  EXPECT_TRUE(e("null"));
  EXPECT_TRUE(e(R"({"x":[true]})"));
  EXPECT_FALSE(e(R"("ab")"));
  const Schema u(R"({"type":["integer","null"]})");
  EXPECT_TRUE(u("-12"));
  EXPECT_TRUE(u("null"));
  EXPECT_FALSE(u("\"1\""));
  const Schema any_of(R"({"anyOf":[{"type":"string","maxLength":2},{"type":"boolean"}]})");
  EXPECT_TRUE(any_of(R"("ab")"));
  EXPECT_TRUE(any_of("false"));
  EXPECT_FALSE(any_of(R"("abc")"));
  const Schema one_of(
      R"({"oneOf":[{"type":"object","properties":{"t":{"const":"a"},"v":{"type":"integer"}},"required":["t","v"]},
                                   {"type":"object","properties":{"t":{"const":"b"}},"required":["t"]}]})");
  EXPECT_TRUE(one_of(R"({"t":"a","v":1})"));
  EXPECT_TRUE(one_of(R"({"t":"b"})"));
  EXPECT_FALSE(one_of(R"({"t":"c"})"));
  const Schema all_of(
      R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                                   {"properties":{"a":{"minimum":5},"b":{"type":"null"}}}]})");
  EXPECT_TRUE(all_of(R"({"a":5,"b":null})"));
  EXPECT_FALSE(all_of(R"({"a":4})"));
  EXPECT_FALSE(all_of(R"({"b":null})"));
  const Schema refs(
      R"({"$defs":{"n":{"type":"object","properties":{"k":{"type":"array","items":{"$ref":"#/$defs/n"}}},"required":["k"]}},
                        "$ref":"#/$defs/n"})");
  EXPECT_TRUE(refs(R"({"k":[{"k":[]},{"k":[{"k":[]}]}]})"));
  EXPECT_FALSE(refs(R"({"k":[{}]})"));
  const Schema nullable(R"({"type":"string","nullable":true,"maxLength":1})");
  EXPECT_TRUE(nullable("null"));
  EXPECT_TRUE(nullable(R"("z")"));
}

TEST(JsonSchema, IntegerRangesNumberByNumber) {
  const std::pair<int64_t, int64_t> ranges[] = {{0, 0},       {-50, 1234}, {7, 7},
                                                {-999, -100}, {1, 9},      {0, 100000},
                                                {99, 1001},   {-5, 5},     {123456, 123789}};
  for (auto [lo, hi] : ranges) {
    const Schema s(fmt::format(R"({{"type":"integer","minimum":{},"maximum":{}}})", lo, hi));
    for (int64_t n = lo - 40; n <= hi + 40; n += (hi - lo > 5000 ? 37 : 1))
      EXPECT_EQ(s(std::to_string(n)), n >= lo && n <= hi) << lo << ".." << hi << ": " << n;
    EXPECT_FALSE(s("0" + std::to_string(std::max<int64_t>(lo, 1))));  // leading zero
    EXPECT_FALSE(s("-0"));
  }
  const Schema open(R"({"type":"integer","exclusiveMinimum":-3,"exclusiveMaximum":2.5})");
  for (int n = -6; n <= 6; ++n) EXPECT_EQ(open(std::to_string(n)), n > -3 && n < 2.5) << n;
  const Schema lower(R"({"type":"integer","minimum":18})");
  EXPECT_TRUE(lower("18"));
  EXPECT_TRUE(lower("999999999999999"));
  EXPECT_FALSE(lower("17"));
  EXPECT_FALSE(lower("-20"));
}

TEST(JsonSchema, NumberBoundsAndShapes) {
  const Schema n(R"({"type":"number"})");
  for (const char* ok : {"0", "-0", "1.5", "-12.25e+10", "3E-7", "100"}) EXPECT_TRUE(n(ok)) << ok;
  for (const char* no : {"01", "1.", ".5", "+1", "1e", "NaN", "1e123"}) EXPECT_FALSE(n(no)) << no;
  const Schema b(R"({"type":"number","minimum":-2.5,"exclusiveMaximum":3})");
  for (const char* ok : {"-2", "-1.999", "0", "-0.5", "2.999", "2", "-1.5"})
    EXPECT_TRUE(b(ok)) << ok;
  for (const char* no : {"3", "3.0", "-3", "-2.6", "1e1", "-2.7"}) EXPECT_FALSE(b(no)) << no;
}

TEST(JsonSchema, StringsLengthsFormatsAndPatterns) {
  const Schema len(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(len(R"("a")"));
  EXPECT_TRUE(len(R"("ab")"));
  EXPECT_TRUE(len(R"("\n\"é")"));  // escapes and non-ASCII count as one character each
  EXPECT_TRUE(len("\"éé\""));
  EXPECT_FALSE(len("\"😀😀\""));  // JavaScript counts each twice: bounded strings keep to U+FFFF
  EXPECT_TRUE(Schema(R"({"type":"string"})")("\"😀😀😀\""));
  EXPECT_FALSE(len(R"("abcd")"));
  EXPECT_FALSE(len("\"a\nb\""));      // raw control characters are not JSON
  EXPECT_FALSE(len(R"("\ud800x")"));  // lone surrogate escapes are left out
  const Schema date(R"({"type":"string","format":"date"})");
  EXPECT_TRUE(date(R"("2024-02-28")"));
  EXPECT_TRUE(date(R"("1999-12-31")"));
  EXPECT_FALSE(date(R"("2024-02-30")"));
  EXPECT_FALSE(date(R"("2024-04-31")"));
  EXPECT_FALSE(date(R"("2024-13-01")"));
  const Schema dt(R"({"type":"string","format":"date-time"})");
  EXPECT_TRUE(dt(R"("2024-06-01T23:59:59.123+02:00")"));
  EXPECT_TRUE(dt(R"("2024-06-01T00:00:00Z")"));
  EXPECT_FALSE(dt(R"("2024-06-01T24:00:00Z")"));
  EXPECT_FALSE(dt(R"("2024-06-01T10:00:00")"));  // a time zone is required
  const Schema uuid(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(uuid(R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(uuid(R"("123e4567e89b12d3a456426614174000")"));
  const Schema p(R"({"type":"string","pattern":"^(ab|c)+\\d{2}[^x-z]?$"})");
  EXPECT_TRUE(p(R"("abcab12")"));
  EXPECT_TRUE(p(R"("c00q")"));
  EXPECT_FALSE(p(R"("c00y")"));
  EXPECT_FALSE(p(R"("12")"));
  // Unanchored: the match may sit anywhere; characters JSON escapes are written escaped.
  const Schema q(R"({"type":"string","pattern":"a\"b"})");
  EXPECT_TRUE(q(R"("xxa\"byy")"));
  EXPECT_FALSE(q(R"("xxa"byy")"));
  const Schema dot(R"({"type":"string","pattern":"^.$"})");
  EXPECT_TRUE(dot(R"("\\")"));
  EXPECT_TRUE(dot(R"("\t")"));
  EXPECT_FALSE(dot(R"("\n")"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamedWithTheirPlace) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"object","properties":{"a":{"type":"array","minContains":1}}})",
       "at /properties/a: keyword 'minContains' is not supported"},
      {R"({"type":"integer","multipleOf":3})",
       "at the root: keyword 'multipleOf' is not supported"},
      {R"({"type":"object","patternProperties":{"^x":{}}})",
       "keyword 'patternProperties' is not supported"},
      {R"({"type":"array","items":{"type":"string","format":"email"}})",
       "at /items/format: format 'email' is not supported"},
      {R"({"type":"array","uniqueItems":true})", "'uniqueItems': true is not supported"},
      {R"({"type":"string","pattern":"^(?=a)b$"})", "lookaround assertions cannot be expressed"},
      {R"({"type":"string","pattern":"(a)\\1"})", "backreferences cannot be expressed"},
      {R"({"type":"string","pattern":"\\bword"})", "word boundaries"},
      {R"({"$ref":"http://example.com/s.json"})", "only local references"},
      {R"({"$ref":"#/$defs/missing"})", "points at nothing"},
      {R"({"oneOf":[{"type":"integer"},{"type":"number"}]})",
       "oneOf: alternatives 0 and 1 could both accept a value"},
      {R"({"type":"integer","minimum":5,"maximum":4})", "no integer lies between"},
      {R"({"allOf":[{"type":"string"},{"type":"integer"}]})",
       "allOf: no type satisfies every part"},
      {R"({"type":"string","format":"date","maxLength":5})", "'format' together with"},
      {R"({"$ref":"#"})", "references loop without reaching a schema"},
      {R"(false)", "the schema false accepts no value"},
      {R"({"type":"objekt"})", "unknown type 'objekt'"},
      {"{not json", "not valid JSON"},
      {R"({"allOf":[{"type":"integer","minimum":"a"},{"minimum":1}]})",
       "'minimum' must be a number"},
      {R"({"type":"object","properties":5})", "'properties' must be an object"},
      {R"({"type":"string","minLength":-1})", "'minLength' must be a non-negative integer"},
  };
  for (auto [schema, message] : cases) {
    const std::string e = error_of(schema);
    EXPECT_NE(e.find(message), std::string::npos) << schema << " gave: " << e;
  }
}

TEST(JsonSchema, EveryTestSchemaCompiles) {
  const auto cases = nlohmann::json::parse(test::read_file(
      std::filesystem::path(SLUICE_SOURCE_DIR) / "tests/data/structured/schemas.json"));
  ASSERT_GE(cases.size(), 30u);
  for (const auto& c : cases) EXPECT_EQ(error_of(c["schema"].dump()), "") << c["name"];
}
