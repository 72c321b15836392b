// End-to-end tests of the chat template flags on serve (issue 32, item 3), seen through
// llama-server's /apply-template.
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

}  // namespace
