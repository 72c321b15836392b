// Chat templates against @huggingface/jinja: every real template in the shared test data ×
// every conversation in tests/data/chat/conversations must render byte-identically to the golden
// output the JS reference produced (tests/node/gen_chat_goldens.sh), or raise where it raised.
// A second test re-runs the reference live on a few pairs when node and its packages are present.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "core/error.h"
#include "test_util.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

// The clock gen_chat_goldens.sh pins for strftime_now().
constexpr std::time_t kGoldenNow = 1750000000;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

fs::path chat_data() { return fs::path(SLUICE_SOURCE_DIR) / "tests/data/chat"; }

std::vector<fs::path> files_in(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ext) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// A conversation file holds the whole template context; split it into the request fields.
chat::ChatRequest request_from(const nlohmann::ordered_json& ctx) {
  chat::ChatRequest r;
  for (const auto& [k, v] : ctx.items()) {
    if (k == "messages") r.messages = v;
    else if (k == "tools") r.tools = v;
    else if (k == "add_generation_prompt") r.add_generation_prompt = v.get<bool>();
    else if (k == "bos_token") r.bos_token = v.get<std::string>();
    else if (k == "eos_token") r.eos_token = v.get<std::string>();
    else r.extra[k] = v;
  }
  return r;
}

std::string first_difference(const std::string& a, const std::string& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  auto around = [&](const std::string& s) { return s.substr(i < 40 ? 0 : i - 40, 80); };
  return "first difference at byte " + std::to_string(i) + "\n  sluice: [" + around(a) + "]\n  golden: [" +
         around(b) + "]";
}

struct Outcome {
  bool raised = false;
  std::string text;
};

Outcome render(const std::string& tmpl, const chat::ChatRequest& req, bool strict) {
  jinja::RenderOptions opt;
  opt.now = kGoldenNow;
  opt.strict = strict;
  try {
    return {false, chat::render_chat(tmpl, req, opt)};
  } catch (const Error& e) {
    return {true, e.what()};
  }
}

std::string run_node(const fs::path& tmpl, const fs::path& context, bool* ok) {
  std::string cmd = "node '" + (fs::path(SLUICE_SOURCE_DIR) / "tests/node/render_jinja.mjs").string() + "' '" +
                    tmpl.string() + "' '" + context.string() + "' --now " + std::to_string(kGoldenNow) +
                    " 2>/dev/null";
  // The redirection inside the group drops node's stderr; only its stdout is read.
  test::ShellResult r = test::sh("{ " + cmd + "; }");
  *ok = r.status == 0;
  return r.out;
}

}  // namespace

TEST(ChatTemplateGolden, EveryTemplateAndConversationMatchesReference) {
  auto templates = files_in(test::testdata("chat-templates"), ".jinja");
  auto conversations = files_in(chat_data() / "conversations", ".json");
  ASSERT_GE(templates.size(), 15u) << "chat templates missing from " << test::testdata("chat-templates");
  ASSERT_GE(conversations.size(), 10u);
  int matched = 0, raised = 0;
  for (const auto& t : templates) {
    std::string source = slurp(t);
    for (const auto& c : conversations) {
      std::string pair = t.stem().string() + "__" + c.stem().string();
      fs::path golden = chat_data() / "golden" / pair;
      auto req = request_from(nlohmann::ordered_json::parse(slurp(c)));
      Outcome strict = render(source, req, true);
      if (fs::exists(golden.string() + ".txt")) {
        std::string want = slurp(golden.string() + ".txt");
        if (strict.raised) {
          ADD_FAILURE() << pair << ": raised but the reference rendered: " << strict.text;
          continue;
        }
        if (strict.text != want) {
          ADD_FAILURE() << pair << ": " << first_difference(strict.text, want);
          continue;
        }
        // Extensions only act where the reference raises, so rendered pairs are identical.
        Outcome lenient = render(source, req, false);
        EXPECT_EQ(lenient.text, want) << pair << " differs with Jinja2 extensions enabled";
        ++matched;
      } else if (fs::exists(golden.string() + ".error")) {
        EXPECT_TRUE(strict.raised) << pair << ": the reference raised (" << slurp(golden.string() + ".error")
                                   << ") but sluice rendered";
        if (strict.raised) ++raised;
      } else {
        ADD_FAILURE() << pair << ": no golden; run tests/node/gen_chat_goldens.sh";
      }
    }
  }
  std::printf("chat templates: %d pairs byte-identical, %d raise as in the reference (%zu templates x %zu conversations)\n",
              matched, raised, templates.size(), conversations.size());
}

TEST(ChatTemplateGolden, RaiseExceptionCarriesTemplateMessage) {
  auto req = request_from(nlohmann::ordered_json::parse(slurp(chat_data() / "conversations/roles_not_alternating.json")));
  Outcome o = render(slurp(test::testdata("chat-templates/google-gemma-2-2b-it.jinja")), req, true);
  ASSERT_TRUE(o.raised);
  EXPECT_NE(o.text.find("Conversation roles must alternate user/assistant/user/assistant/..."), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("line 1, column"), std::string::npos) << o.text;
}

TEST(ChatTemplateDifferential, LiveReferenceAgrees) {
  fs::path node_modules = fs::path(SLUICE_SOURCE_DIR) / "tests/node/node_modules/@huggingface/jinja";
  if (!fs::exists(node_modules) || std::system("command -v node >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "node or tests/node/node_modules missing (run npm ci in tests/node)";
  const std::pair<const char*, const char*> pairs[] = {
      {"openai-gpt-oss-120b", "tools_available"},
      {"Qwen3-Coder", "reasoning_with_tools"},
      {"deepseek-ai-DeepSeek-V3.1", "unicode_and_escapes"},
  };
  for (const auto& [t, c] : pairs) {
    fs::path tmpl = test::testdata(std::string("chat-templates/") + t + ".jinja");
    fs::path conv = chat_data() / "conversations" / (std::string(c) + ".json");
    bool ok = false;
    std::string want = run_node(tmpl, conv, &ok);
    ASSERT_TRUE(ok) << "reference failed on " << t << " × " << c;
    Outcome got = render(slurp(tmpl), request_from(nlohmann::ordered_json::parse(slurp(conv))), true);
    ASSERT_FALSE(got.raised) << got.text;
    EXPECT_EQ(got.text, want) << t << " × " << c << ": " << first_difference(got.text, want);
  }

  // A template exercising the trickier corners (whitespace control, loop variables, macros with
  // defaults and caller, slicing, JS number printing, tojson options) against the live reference.
  const std::string feature_template = R"J({# features #}
{%- macro tag(name, body='x', close=true) -%}<{{ name }}>{{ body }}{% if close %}</{{ name }}>{% endif %}{%- endmacro -%}
{%- macro wrap() -%}[{{ caller() }}]{%- endmacro -%}
{% for m in messages if m.role != 'system' -%}
  {{ loop.index }}/{{ loop.length }} {{ m.role | upper }} {{ m.content[:12] }}{{ '|' if not loop.last }}
{% else %}none
{% endfor %}
{%- set ns = namespace(n=0) -%}
{%- for k, v in {'a': 1, 'b': [1, 2.5, none]}.items() %}{% set ns.n = ns.n + 1 %}{{ k }}={{ v }};{% endfor %}
{{ ns.n }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1 / 4 }} {{ 3.0 }} {{ 1 if false else 0.1 + 0.2 }} {{ 1000000000000000000000.0 }} {{ 0.000001 * 0.1 }} {{ 10 / 4 * 2 }}
{{ tag('b') }}{{ tag('i', close=false) }}{% call wrap() %}in{% endcall %}
{{ messages | map(attribute='role') | join(', ') }} {{ 'a,b,,c'.split(',') }} {{ ' x  y '.split() | length }}
{{ {'k': ['v', {'n': 1}], 'é': 'ü'} | tojson(indent=2) }}
{{ messages[-1].content | tojson(ensure_ascii=true) }} {{ "it's" ~ ' ' ~ 5 ~ true }}
{{ 'Hello World'.replace('o', '0', 1) }} {{ 'abc'[::-1] }} {{ [3, 1, 2] | sort | reverse | list }}
{{- '  trimmed  ' | trim -}}
{% if messages is defined and messages | length > 2 %}many{% elif messages %}few{% endif %})J";
  fs::path scratch = test::scratch_dir();
  fs::path tmpl = scratch / "features.jinja";
  std::ofstream(tmpl, std::ios::binary) << feature_template;
  fs::path conv = chat_data() / "conversations/unicode_and_escapes.json";
  bool ok = false;
  std::string want = run_node(tmpl, conv, &ok);
  ASSERT_TRUE(ok) << "reference failed on the feature template";
  Outcome got = render(feature_template, request_from(nlohmann::ordered_json::parse(slurp(conv))), true);
  ASSERT_FALSE(got.raised) << got.text;
  EXPECT_EQ(got.text, want) << first_difference(got.text, want);
}

TEST(ChatTemplateCli, RenderTemplateWritesTheGolden) {
  fs::path out = test::scratch_dir() / "render_template_out.txt";
  std::string pair = "Qwen-Qwen3-0.6B__tool_call_roundtrip";
  std::string cmd = std::string("'") + SLUICE_BIN + "' render-template --strict --now " + std::to_string(kGoldenNow) +
                    " -t '" + test::testdata("chat-templates/Qwen-Qwen3-0.6B.jinja") + "' -c '" +
                    (chat_data() / "conversations/tool_call_roundtrip.json").string() + "' -o '" + out.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_EQ(slurp(out), slurp(chat_data() / "golden" / (pair + ".txt")));

  std::string bad = std::string("'") + SLUICE_BIN + "' render-template -t '" +
                    test::testdata("chat-templates/google-gemma-2-2b-it.jinja") + "' -c '" +
                    (chat_data() / "conversations/roles_not_alternating.json").string() + "' 2>/dev/null >/dev/null";
  EXPECT_NE(std::system(bad.c_str()), 0);
}
