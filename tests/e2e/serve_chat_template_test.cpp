// End-to-end tests of the chat template flags (issue 32, item 3): on serve, seen through
// llama-server's /apply-template; on chat, through the prompt a turn evaluates.
#include <gtest/gtest.h>

#include <fstream>

#include "serve_client.h"

using namespace sluice::test::serve;

namespace {

// --chat-template NAME|TEXT and --chat-template-file replace the model's template (seen through
// /apply-template); --jinja is accepted; a template that is neither a name nor Jinja, or that does
// not render, stops the server at startup with exit 2 naming the flag.
TEST(ServeChatTemplate, FlagsReplaceTheModelsTemplate) {
  const std::string hi = R"({"messages":[{"role":"user","content":"hi"}]})";
  {
    Server server({"--chat-template", "chatml", "--jinja"});
    ASSERT_GT(server.port(), 0) << server.log();
    EXPECT_EQ(http(server.port(), "POST", "/apply-template", hi, "").j()["prompt"],
              "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  }
  const auto file = sluice::test::scratch_dir() / "template.jinja";
  {
    std::ofstream(file) << "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant]";
  }
  {
    Server server({"--chat-template-file", file.string()});
    ASSERT_GT(server.port(), 0) << server.log();
    EXPECT_EQ(http(server.port(), "POST", "/apply-template", hi, "").j()["prompt"], "[user] hi\n[assistant]");
    const Http chat = http(server.port(), "POST", "/v1/chat/completions",
                           R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1})", "");
    EXPECT_EQ(chat.status, 200) << chat.body;
  }
  const std::string serve = std::string(SLUICE_BIN) + " serve -m " + kModel + " --port 0 ";
  const auto named = sluice::test::sh(serve + "--chat-template nonsense");
  EXPECT_EQ(named.status, 2) << named.out;
  EXPECT_NE(named.out.find("--chat-template"), std::string::npos) << named.out;
  const auto broken = sluice::test::sh(serve + "--chat-template '{% for m in messages %}'");
  EXPECT_EQ(broken.status, 2) << broken.out;
  EXPECT_NE(broken.out.find("does not render"), std::string::npos) << broken.out;
}

// A template that renders only the message's text: chat's prompt is the text's own tokens, and
// the reply is the raw continuation (the fallback "User: ...\nAssistant:" format is not used).
TEST(ChatTemplateFlag, ChatRendersTheGivenTemplate) {
  const auto file = sluice::test::scratch_dir() / "content-only.jinja";
  {
    std::ofstream(file) << "{% for m in messages %}{{ m.content }}{% endfor %}";
  }
  const auto r = sluice::test::sh("printf 'And God said\\n/stats\\n' | " + std::string(SLUICE_BIN) + " chat -m " + kModel +
                                  " --temp 0 -n 4 -t 1 --chat-template-file " + file.string());
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("has no chat template"), std::string::npos) << r.out;
  // "And God said" is three tokens of this vocabulary (sluice tokenize), with no BOS.
  EXPECT_NE(r.out.find("last turn: prompt 3 tokens"), std::string::npos) << r.out;
}

}  // namespace
