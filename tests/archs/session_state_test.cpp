// Saved sessions: a second engine restoring a 1000-token context and continuing it prefills only
// the new tokens and gives the logits of one run over the whole text bit for bit (gpt-oss with its
// window rings; deepseek4 with its rings, pooled rows and compressor states, also when the
// continuation leaves the saved text within the rings' rollback); a state of another KV type is
// refused with a reason (fresh start); truncated, foreign and damaged files are errors naming what
// is wrong.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>

#include "sluice/sluice.h"

namespace fs = std::filesystem;
using namespace sluice;

namespace {

const fs::path kRef = fs::path(SLUICE_TESTDATA) / "reference";

std::unique_ptr<Engine> engine_for(const std::string& model, KvType t = KvType::kF32) {
  EngineOptions eo;
  eo.model_path = (kRef / (model + ".gguf")).string();
  eo.n_threads = 2;
  eo.n_ctx = 1200;
  eo.kv_type_k = eo.kv_type_v = t;
  return Engine::load(eo);
}

std::vector<int32_t> prompt2(const std::string& model) {
  std::ifstream in(kRef / (model + ".prompt2.json"));
  return nlohmann::json::parse(in)["tokens"].get<std::vector<int32_t>>();
}

// Bit-identical logits: the first differing one is named.
::testing::AssertionResult same_logits(std::span<const float> got, std::span<const float> want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " logits, expected " << want.size();
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i])
      return ::testing::AssertionFailure() << "logit " << i << ": " << got[i] << " vs " << want[i];
  return ::testing::AssertionSuccess();
}

std::string expect_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

}  // namespace

TEST(SessionState, ContinuingARestoredContextEqualsOneRun) {
  // gpt-oss: window rings (64 + 512 rows) are saved and restored too; q8_0 as a second layout.
  for (KvType t : {KvType::kF32, KvType::kQ8_0}) {
    SCOPED_TRACE(kv_type_name(t));
    const auto toks = prompt2("gptoss-f32");
    const std::vector<int32_t> head(toks.begin(), toks.begin() + 1000);
    const fs::path file = fs::temp_directory_path() / ("sluice_session_test_" + std::to_string(getpid()));
    {
      auto engine = engine_for("gptoss-f32", t);
      auto s = engine->new_session();
      s->evaluate(head);
      s->save(file.string());
    }
    auto engine = engine_for("gptoss-f32", t);
    auto restored = engine->new_session();
    ASSERT_EQ(restored->load(file.string()), "");
    EXPECT_EQ(restored->tokens(), head);
    const auto cont = restored->evaluate(toks);
    const std::vector<float> continued(cont.begin(), cont.end());
    EXPECT_EQ(restored->reused(), 1000);
    auto fresh = engine->new_session();
    const auto once = fresh->evaluate(toks);
    EXPECT_TRUE(same_logits(continued, once));

    // Another KV type: not restored, with the reason; the session stays as it was.
    auto other_engine = engine_for("gptoss-f32", t == KvType::kF32 ? KvType::kF16 : KvType::kF32);
    auto other = other_engine->new_session();
    const std::string why = other->load(file.string());
    EXPECT_NE(why.find("another type or layout"), std::string::npos) << why;
    EXPECT_TRUE(other->tokens().empty());
    // Another model: not restored either.
    auto mixtral = engine_for("mixtral-f32", t);
    EXPECT_NE(mixtral->new_session()->load(file.string()).find("another model"), std::string::npos);

    // Truncated, damaged and foreign files.
    std::ifstream in(file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto write = [&](const std::string& b) { std::ofstream(file, std::ios::binary | std::ios::trunc) << b; };
    write(bytes.substr(0, bytes.size() / 2));
    EXPECT_NE(expect_error([&] { restored->load(file.string()); }).find("truncated"), std::string::npos);
    std::string damaged = bytes;
    damaged[damaged.size() / 2] ^= 0x5a;
    write(damaged);
    EXPECT_NE(expect_error([&] { restored->load(file.string()); }).find("checksum"), std::string::npos);
    write("GGUF: some other file, long enough to hold a header");
    EXPECT_NE(expect_error([&] { restored->load(file.string()); }).find("not a sluice KV state"), std::string::npos);
    write("");
    EXPECT_NE(expect_error([&] { restored->load(file.string()); }).find("truncated"), std::string::npos);
    fs::remove(file);
  }
}

// With each stored key type: rings, compressor states and pooled/indexer rows restore exactly, and
// a quantized cache reads the same rounded keys whether they came from this batch or the cache.
TEST(SessionState, Deepseek4ContinuesARestoredContextExactly) {
  for (KvType t : {KvType::kF32, KvType::kQ8_0}) {
    SCOPED_TRACE(kv_type_name(t));
    const auto toks = prompt2("deepseek4-f32");
    const std::vector<int32_t> head(toks.begin(), toks.begin() + 1000);
    const fs::path file =
        fs::temp_directory_path() / ("sluice_session_ds4_" + std::to_string(getpid()));
    {
      auto engine = engine_for("deepseek4-f32", t);
      auto s = engine->new_session();
      s->evaluate(head);
      s->save(file.string());
    }
    auto engine = engine_for("deepseek4-f32", t);
    auto fresh = engine->new_session();
    const auto once_span = fresh->evaluate(toks);
    const std::vector<float> once(once_span.begin(), once_span.end());

    // The whole saved text, then the rest of prompt2: only the 117 new tokens are evaluated, and
    // the logits after the last one are those of one run.
    auto restored = engine->new_session();
    ASSERT_EQ(restored->load(file.string()), "");
    const auto cont = restored->evaluate(toks);
    EXPECT_EQ(restored->reused(), 1000);
    EXPECT_TRUE(same_logits(cont, once));

    // A continuation that leaves the saved text 10 tokens before its end: the rings still hold
    // position 990, so 990 tokens are reused and the logits are those of one run over that text.
    std::vector<int32_t> other(toks.begin(), toks.begin() + 990);
    other.insert(other.end(), toks.begin() + 1050, toks.begin() + 1080);
    auto fresh_other = engine->new_session();
    const auto want_span = fresh_other->evaluate(other);
    const std::vector<float> want(want_span.begin(), want_span.end());
    auto back = engine->new_session();
    ASSERT_EQ(back->load(file.string()), "");
    const auto got = back->evaluate(other);
    EXPECT_EQ(back->reused(), 990);
    EXPECT_TRUE(same_logits(got, want));
    fs::remove(file);
  }
}
