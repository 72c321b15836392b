// End-to-end tests of the web page at / and GET /engine (issue 32): the page and its files come
// from the binary with a Content-Security-Policy and without the API key; /engine needs the key
// and reports the expert cache of a streaming run (every expert on disk, resident or prefetched,
// and counts that grow as a request runs); then the page in headless Chromium
// (tests/node/web_page.mjs: streaming, Stop, reload, the heat map, hostile model output).
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>

#include "serve_client.h"

using namespace sluice::test::serve;

namespace {

const std::string kMoe = kSource + "/models/sluice-moe-128.gguf";

// sluice-moe-128's 1,024 experts (about 80 MB) stream through a 12 MiB cache: most reads miss. The
// context is past the trained 512 (a warning) so that a reply runs long enough to be stopped.
std::vector<std::string> streamed_args() {
  return {"--parallel", "1", "--api-key", kKey, "--experts", "stream", "--ssd-streaming-cache-experts", "12MiB",
          "--no-mlock", "-c", "2048"};
}

TEST(ServeWeb, PageAndFilesAreServedFromTheBinaryWithoutTheKey) {
  Server server({"--api-key", kKey});
  ASSERT_GT(server.port(), 0) << "server did not start; log: " << server.log();
  const Http page = http(server.port(), "GET", "/", "", "");
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_NE(page.headers.find("Content-Type: text/html"), std::string::npos) << page.headers;
  EXPECT_NE(page.headers.find("Content-Security-Policy: default-src 'none'; script-src 'self'"), std::string::npos)
      << page.headers;
  EXPECT_NE(page.body.find("<script src=\"/web/app.js\""), std::string::npos);
  for (const std::string path : {"/web/app.js", "/web/app.css", "/web/vendor/marked.umd.js", "/web/vendor/purify.min.js"}) {
    const Http h = http(server.port(), "GET", path, "", "");
    EXPECT_EQ(h.status, 200) << path;
    EXPECT_GT(h.body.size(), 1000u) << path;
  }
  EXPECT_EQ(http(server.port(), "GET", "/web/nothing.js", "", "").status, 404);
  // The data is not public: /engine and the API need the key.
  expect_error(http(server.port(), "GET", "/engine", "", ""), 401, "");
  expect_error(http(server.port(), "POST", "/", "{}"), 405, "");
}

TEST(ServeWeb, EngineReportsTheStreamingExpertCache) {
  Server server(streamed_args(), kMoe);
  ASSERT_GT(server.port(), 0) << "server did not start; log: " << server.log();
  const json a = http(server.port(), "GET", "/engine").j();
  ASSERT_EQ(a["object"], "sluice.engine") << a.dump();
  EXPECT_EQ(a["model"]["experts_mode"], "stream");
  const json& cache = a["cache"];
  ASSERT_EQ(cache["n_layer"], 8);
  ASSERT_EQ(cache["n_expert"], 128);
  ASSERT_EQ(cache["state"].size(), 8u);
  // The warm start filled the cache: some experts resident, most on disk; nothing counted yet.
  int resident = 0, on_disk = 0;
  for (const auto& row : cache["state"]) {
    const std::string s = row;
    ASSERT_EQ(s.size(), 128u);
    for (char c : s) {
      resident += c == 'r' || c == 'p';
      on_disk += c == 'd';
      EXPECT_NE(std::string("dlrp").find(c), std::string::npos) << s;
    }
  }
  EXPECT_GT(resident, 8);
  EXPECT_GT(on_disk, 512);
  EXPECT_EQ(a["experts"]["requests"], 0);
  EXPECT_EQ(a["slots"].size(), 1u);

  const json body = {{"messages", json::array({{{"role", "user"}, {"content", "In the beginning"}}})},
                     {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
  ASSERT_EQ(http(server.port(), "POST", "/v1/chat/completions", body.dump()).status, 200);
  const json b = http(server.port(), "GET", "/engine").j();
  EXPECT_EQ(b["scheduler"]["generated_tokens"], 12);
  EXPECT_EQ(b["scheduler"]["active"], 0);
  // The per-expert counts add up to the store's totals: the map is the store's own state, taken
  // after the last step.
  uint64_t hits = 0, misses = 0;
  for (int l = 0; l < 8; ++l)
    for (int e = 0; e < 128; ++e) {
      hits += b["cache"]["hits"][l][e].get<uint64_t>();
      misses += b["cache"]["misses"][l][e].get<uint64_t>();
    }
  EXPECT_EQ(hits + misses, b["experts"]["requests"].get<uint64_t>()) << b["experts"].dump();
  EXPECT_EQ(misses, b["experts"]["misses"].get<uint64_t>());
  EXPECT_GT(misses, 0u);
  EXPECT_GT(b["experts"]["bytes_read"].get<uint64_t>(), 0u);
  // What is in the cache fits in it: 12 MiB of 96 KiB slots.
  int cached = 0;
  for (const auto& row : b["cache"]["state"])
    for (char c : row.get<std::string>()) cached += c != 'd';
  EXPECT_LE(cached, 128);
  EXPECT_GT(cached, 8);
}

TEST(ServeWeb, EngineInRamModeShowsEveryExpertResident) {
  Server server({"--api-key", kKey, "--experts", "ram"});
  ASSERT_GT(server.port(), 0) << "server did not start; log: " << server.log();
  const json body = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 3}};
  ASSERT_EQ(http(server.port(), "POST", "/v1/chat/completions", body.dump()).status, 200);
  const json j = http(server.port(), "GET", "/engine").j();
  ASSERT_EQ(j["cache"]["n_layer"], j["model"]["n_layer"]) << j.dump();
  for (const auto& row : j["cache"]["state"]) EXPECT_EQ(row.get<std::string>().find_first_not_of('r'), std::string::npos) << row;
  uint64_t hits = 0;
  for (const auto& row : j["cache"]["hits"])
    for (const auto& v : row) hits += v.get<uint64_t>();
  EXPECT_EQ(hits, j["experts"]["hits"].get<uint64_t>());
  EXPECT_GT(hits, 0u);
}

TEST(ServeWeb, PageWorksInHeadlessChromium) {
  const std::filesystem::path node_dir = kSource + "/tests/node";
  std::string chromium = sluice::test::sh("command -v chromium").out;
  while (!chromium.empty() && std::isspace(static_cast<unsigned char>(chromium.back()))) chromium.pop_back();
  if (chromium.empty())
    GTEST_SKIP() << "chromium is not installed (apt-get install chromium, or scripts/install-deps): the page's "
                    "browser test cannot run";
  if (!std::filesystem::exists(node_dir / "node_modules/puppeteer-core") || std::system("node --version > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "node or tests/node/node_modules missing (scripts/install-deps)";
  Server server(streamed_args(), kMoe);
  ASSERT_GT(server.port(), 0) << "server did not start; log: " << server.log();
  const std::filesystem::path shots = sluice::test::scratch_dir() / "web-shots";
  const std::string cmd = "cd '" + node_dir.string() + "' && timeout 90 node web_page.mjs http://127.0.0.1:" +
                          std::to_string(server.port()) + "/ " + kKey + " '" + shots.string() + "' '" + chromium + "' 2>&1";
  const auto r = sluice::test::sh(cmd);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok   nothing from model output ran"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(shots / "web-heatmap.png"));
}

}  // namespace
