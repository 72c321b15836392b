// `run --session` and `chat --session` / `/load` / `/save` / `/read` as a new user meets them
// (issue 34), through the binary on the shipped model:
// - a directory where a file is expected is said to be one (it crashed with std::bad_alloc), and
//   in chat no error of a command ends the conversation;
// - a session file that was not restored (another KV type) is left as it was unless
//   --session-overwrite says otherwise;
// - `run --session` continues the saved text: the new prompt is appended to it and only the
//   prompt is evaluated.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "../unit/test_util.h"

namespace fs = std::filesystem;
using sluice::test::read_file;
using sluice::test::scratch_dir;
using sluice::test::sh;

namespace {

const std::string kModel = std::string(SLUICE_SOURCE_DIR) + "/models/sluice-tiny-moe.gguf";
const std::string kBin = std::string(SLUICE_BIN) + " ";

fs::path fresh(const std::string& name) {
  const fs::path p = scratch_dir() / name;
  fs::remove_all(p);
  return p;
}

int number(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return -1;
  return std::stoi(m[1]);
}

}  // namespace

TEST(SessionCli, ADirectoryIsSaidToBeOneAndNothingCrashes) {
  const fs::path dir = fresh("session-dir");
  fs::create_directories(dir);
  auto r = sh(kBin + "run -m " + kModel + " --session " + dir.string() + " -p x -n 2");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("'" + dir.string() + "' is a directory"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("unexpected error"), std::string::npos) << r.out;
  r = sh("printf 'hi\\n' | " + kBin + "chat -m " + kModel + " -n 2 --session " + dir.string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("'" + dir.string() + "' is a directory"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("unexpected error"), std::string::npos) << r.out;
  // A --session file in a directory that does not exist is refused before the work, not at exit.
  r = sh(kBin + "run -m " + kModel + " --session /nonexistent/dir/s.kv -p x -n 2");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("'/nonexistent/dir' is not a directory"), std::string::npos) << r.out;
}

TEST(SessionCli, ErrorsOfChatCommandsLeaveTheConversationAlive) {
  const fs::path dir = fresh("chat-dir");
  fs::create_directories(dir);
  const std::string d = dir.string();
  const auto r =
      sh("printf 'Once upon a time\\n/load " + d + "\\n/read " + d + "\\n/save " + d +
         "\\nThe end\\n/stats\\n' | " + kBin + "chat -m " + kModel + " --temp 0 -n 4 -t 2");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("/load: KV state '" + d + "' is a directory"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/read: '" + d + "' is a directory; nothing sent"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("/save: '" + d + "' is a directory"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("unexpected error"), std::string::npos) << r.out;
  // Both messages were answered, and the first one's turn is still in the conversation.
  EXPECT_EQ(number(r.out, R"(session: (\d+) turns)"), 2) << r.out;
  EXPECT_EQ(number(r.out, R"(cached; (\d+) messages)"), 4) << r.out;
}

TEST(SessionCli, AFileThatWasNotRestoredIsNotOverwrittenUnlessAsked) {
  const fs::path file = fresh("other-kv.session");
  const std::string f = file.string();
  auto r =
      sh(kBin + "run -m " + kModel + " --session " + f + " -p 'In the beginning' -n 4 --temp 0");
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string saved = read_file(file);
  ASSERT_FALSE(saved.empty());
  // Another KV type cannot restore it: it starts fresh, says so, and leaves the file alone.
  r = sh(kBin + "run -m " + kModel + " -ctk f16 --session " + f +
         " -p 'And God said' -n 4 --temp 0");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("session: not restored: "), std::string::npos) << r.out;
  EXPECT_NE(
      r.out.find("session: not saved: '" + f + "' holds a state this session could not restore"),
      std::string::npos)
      << r.out;
  EXPECT_EQ(read_file(file), saved);
  r = sh("printf 'Hello\\n' | " + kBin + "chat -m " + kModel + " -ctk f16 -n 4 --session " + f);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(read_file(file), saved) << r.out;
  // --session-overwrite replaces it; the f16 run then restores what it saved.
  r = sh(kBin + "run -m " + kModel + " -ctk f16 --session " + f +
         " --session-overwrite -p 'And God said' -n 4 --temp 0");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(read_file(file), saved);
  r = sh(kBin + "run -m " + kModel + " -ctk f16 --session " + f + " -p ' and' -n 2 --temp 0");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("session: restored "), std::string::npos) << r.out;
}

TEST(SessionCli, RunContinuesTheSavedText) {
  const fs::path file = fresh("continue.session");
  const std::string f = file.string();
  auto r =
      sh(kBin + "run -m " + kModel + " --session " + f + " -p 'In the beginning' -n 6 --temp 0");
  ASSERT_EQ(r.status, 0) << r.out;
  const int first = number(r.out, R"(session: saved (\d+) tokens)");
  ASSERT_GT(first, 6) << r.out;
  // The second prompt follows the saved text: all of it is reused, only " and the" is evaluated,
  // and the saved context grows by the prompt and the new tokens.
  r = sh(kBin + "run -m " + kModel + " --session " + f + " -p ' and the' -n 5 --temp 0");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(number(r.out, R"(session: restored (\d+) tokens)"), first) << r.out;
  EXPECT_EQ(number(r.out, R"(session: (\d+) prompt tokens reused)"), first) << r.out;
  const int evaluated = number(r.out, R"(prompt tokens reused, (\d+) evaluated)");
  EXPECT_GE(evaluated, 1) << r.out;
  EXPECT_LE(evaluated, 3) << r.out;
  EXPECT_EQ(number(r.out, R"(session: saved (\d+) tokens)"), first + evaluated + 5) << r.out;
}

// A chat's session file is not continued by run, which would save it back without the
// conversation; nor a run's by chat, which has no conversation to take from it.
TEST(SessionCli, RunAndChatLeaveEachOthersSessionAlone) {
  const fs::path file = fresh("chat.session");
  const std::string f = file.string();
  auto r = sh("printf 'Hello\\n' | " + kBin + "chat -m " + kModel + " --temp 0 -n 4 --session " + f);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string saved = read_file(file);
  ASSERT_FALSE(saved.empty()) << r.out;
  r = sh(kBin + "run -m " + kModel + " --session " + f + " -p ' and' -n 2 --temp 0");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("holds a chat conversation (sluice chat --session continues it)"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(file), saved);
  const fs::path run_file = fresh("run.session");
  const std::string rf = run_file.string();
  r = sh(kBin + "run -m " + kModel + " --session " + rf + " -p 'Once' -n 2 --temp 0");
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string run_saved = read_file(run_file);
  ASSERT_FALSE(run_saved.empty()) << r.out;
  r = sh("printf 'Hello\\n' | " + kBin + "chat -m " + kModel + " --temp 0 -n 2 --session " + rf);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("holds no chat conversation (sluice run --session continues it)"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(run_file), run_saved);
}

// A /read whose file does not fit the context fails after the context shift has dropped the older
// turns to make room: the conversation is put back as it was, not left holding only the file.
TEST(SessionCli, AFailedReadLeavesTheConversationAsItWas) {
  const fs::path big = fresh("big.txt");
  std::string words;
  for (int i = 0; i < 300; ++i) words += "and the earth was without form ";
  std::ofstream(big) << words;
  const auto r = sh("printf 'Once upon a time\\n/read " + big.string() + "\\n/stats\\n' | " + kBin + "chat -m " +
                    kModel + " --temp 0 -n 4 -c 64 -t 2");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("the context holds 64"), std::string::npos) << r.out;
  EXPECT_EQ(number(r.out, R"(session: (\d+) turns)"), 1) << r.out;
  EXPECT_EQ(number(r.out, R"(cached; (\d+) messages)"), 2) << r.out;
}
