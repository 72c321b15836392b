// The public grammar functions (sluice/grammar.h) over the grammar engine.
#include "grammar/automaton.h"
#include "grammar/json_schema.h"
#include "sluice/grammar.h"

namespace sluice {

std::string json_schema_grammar(std::string_view schema_json) {
  return grammar::json_schema_to_gbnf(schema_json);
}

void check_grammar(std::string_view gbnf) {
  grammar::Automaton a(grammar::parse_gbnf(gbnf));
}

}  // namespace sluice
