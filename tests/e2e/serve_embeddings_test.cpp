// End-to-end tests of /v1/embeddings (issue 32): OpenAI's response shape, float and base64
// encodings, string, array and token-id inputs; identical inputs give identical vectors, different
// inputs different ones, every vector has unit norm; --pooling mean, last and cls agree on a
// one-token input and cls (the first token, which under causal attention sees only itself) is the
// same for inputs that start alike; bad requests and a bad --pooling are precise errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "serve_client.h"

using namespace sluice::test::serve;

namespace {

std::vector<float> vec(const json& j) { return j.get<std::vector<float>>(); }

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  return d;
}

std::vector<float> from_base64(const std::string& s) {
  auto digit = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::string bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    const int d = digit(c);
    if (d < 0) break;
    acc = acc << 6 | static_cast<uint32_t>(d);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

json embed(int port, const json& body) {
  const Http h = http(port, "POST", "/v1/embeddings", body.dump());
  EXPECT_EQ(h.status, 200) << h.body;
  return h.j();
}

TEST(ServeEmbeddings, ShapeDeterminismAndUnitNorm) {
  Server server({"--api-key", kKey});
  ASSERT_GT(server.port(), 0) << "server did not start; log: " << server.log();
  const json a = embed(server.port(), {{"input", "In the beginning God created the heaven"}, {"model", "x"}});
  ASSERT_EQ(a["object"], "list") << a.dump();
  ASSERT_EQ(a["data"].size(), 1u);
  EXPECT_EQ(a["data"][0]["object"], "embedding");
  EXPECT_EQ(a["data"][0]["index"], 0);
  EXPECT_EQ(a["model"], "sluice-tiny-moe");
  EXPECT_GT(a["usage"]["prompt_tokens"].get<int>(), 4);
  EXPECT_EQ(a["usage"]["total_tokens"], a["usage"]["prompt_tokens"]);
  const std::vector<float> va = vec(a["data"][0]["embedding"]);
  ASSERT_EQ(va.size(), 256u);  // the model's width
  EXPECT_NEAR(norm(va), 1.0, 1e-5);

  // Identical inputs, identical vectors (also in a batch, whose items keep their order).
  const json batch = embed(server.port(), {{"input", {"And the earth was without form", "In the beginning God created the heaven"}}});
  ASSERT_EQ(batch["data"].size(), 2u);
  EXPECT_EQ(batch["data"][1]["index"], 1);
  EXPECT_EQ(vec(batch["data"][1]["embedding"]), va);
  const std::vector<float> vb = vec(batch["data"][0]["embedding"]);
  EXPECT_NEAR(norm(vb), 1.0, 1e-5);
  EXPECT_GT(max_diff(va, vb), 1e-3) << "different inputs gave the same vector";
  EXPECT_EQ(vec(embed(server.port(), {{"input", "In the beginning God created the heaven"}})["data"][0]["embedding"]), va);

  // base64: the same floats, little-endian.
  const json b64 = embed(server.port(), {{"input", "In the beginning God created the heaven"}, {"encoding_format", "base64"}});
  EXPECT_EQ(from_base64(b64["data"][0]["embedding"]), va);

  // Token ids: the same tokens /tokenize gives (with BOS) embed to the same vector.
  const Http tok = http(server.port(), "POST", "/tokenize",
                        json{{"content", "In the beginning God created the heaven"}, {"add_special", true}}.dump());
  ASSERT_EQ(tok.status, 200) << tok.body;
  const json ids = tok.j()["tokens"];
  EXPECT_EQ(vec(embed(server.port(), {{"input", ids}})["data"][0]["embedding"]), va);
  EXPECT_EQ(vec(embed(server.port(), {{"input", json::array({ids})}})["data"][0]["embedding"]), va);

  // Errors name the field.
  auto post = [&](const json& body) { return http(server.port(), "POST", "/v1/embeddings", body.dump()); };
  expect_error(post(json::object()), 400, "input");
  expect_error(post({{"input", ""}}), 400, "input");
  expect_error(post({{"input", json::array()}}), 400, "input");
  expect_error(post({{"input", {1, -2}}}), 400, "input");
  expect_error(post({{"input", "x"}, {"encoding_format", "int8"}}), 400, "encoding_format");
  expect_error(post({{"input", "x"}, {"dimensions", 64}}), 400, "dimensions");
  expect_error(post({{"input", "x"}, {"frobnicate", 1}}), 400, "frobnicate");
  std::string long_text;
  for (int i = 0; i < 200; ++i) long_text += "and the earth ";
  expect_error(post({{"input", long_text}}), 400, "input");
  expect_error(http(server.port(), "GET", "/v1/embeddings"), 405, "");
  // /embeddings without /v1, as llama-server answers it.
  EXPECT_EQ(http(server.port(), "POST", "/embeddings", json{{"input", "x"}}.dump()).status, 200);
}

TEST(ServeEmbeddings, PoolingFlag) {
  const json one = {{"input", json::array({1234})}};  // a single token: every pooling is that row
  const json two = {{"input", {"In the beginning", "In the end of days"}}};  // the same first token
  std::vector<std::vector<float>> single;
  std::vector<float> mean_a;
  for (const char* pooling : {"mean", "last", "cls"}) {
    Server server({"--api-key", kKey, "--pooling", pooling});
    ASSERT_GT(server.port(), 0) << "server did not start; log: " << server.log();
    single.push_back(vec(embed(server.port(), one)["data"][0]["embedding"]));
    const json j = embed(server.port(), two);
    const std::vector<float> a = vec(j["data"][0]["embedding"]), b = vec(j["data"][1]["embedding"]);
    EXPECT_NEAR(norm(a), 1.0, 1e-5) << pooling;
    if (std::string(pooling) == "cls") {
      // Both inputs start with the same token, and position 0 sees only itself.
      EXPECT_LT(max_diff(a, b), 1e-6) << "cls pooling differs between inputs that share their first token";
    } else {
      EXPECT_GT(max_diff(a, b), 1e-3) << pooling;
    }
    if (std::string(pooling) == "mean") mean_a = a;
    if (std::string(pooling) == "last") EXPECT_GT(max_diff(a, mean_a), 1e-3) << "last pooling equals mean";
  }
  EXPECT_LT(max_diff(single[0], single[1]), 1e-6);
  EXPECT_LT(max_diff(single[0], single[2]), 1e-6);

  const auto r = sluice::test::sh(std::string(SLUICE_BIN) + " serve -m " + kModel + " --port 0 --pooling sum");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--pooling"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sum"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mean"), std::string::npos) << r.out;
}

}  // namespace
