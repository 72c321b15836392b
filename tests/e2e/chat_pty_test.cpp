// `sluice chat` driven through a pseudo-terminal (forkpty), as a user at a terminal would: turns
// on the reference qwen3moe model (Qwen3 chat template with enable_thinking) and on the shipped
// tiny model (no template: plain fallback format), prefix reuse shown by /stats, the slash
// commands, Ctrl+C stopping a long reply, Ctrl+C at the prompt, history file, and a piped
// (non-TTY) session.
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "../unit/test_util.h"

namespace {

using Clock = std::chrono::steady_clock;

const std::string kTiny = std::string(SLUICE_SOURCE_DIR) + "/models/sluice-tiny-moe.gguf";

// A child `sluice chat` on the slave side of a pty; the test reads and writes the master side.
class PtyChat {
 public:
  explicit PtyChat(const std::vector<std::string>& args) {
    home_ = sluice::test::scratch_dir() / ("chat-home-" + std::to_string(counter_++));
    std::filesystem::create_directories(home_);
    struct winsize ws {};
    ws.ws_row = 40;
    ws.ws_col = 200;
    pid_ = forkpty(&fd_, nullptr, nullptr, &ws);
    if (pid_ == 0) {
      setenv("TERM", "xterm", 1);
      setenv("XDG_CACHE_HOME", home_.c_str(), 1);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(SLUICE_BIN));
      argv.push_back(const_cast<char*>("chat"));
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(SLUICE_BIN, argv.data());
      _exit(127);
    }
  }
  ~PtyChat() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }

  void send(const std::string& s) { ASSERT_EQ(write(fd_, s.data(), s.size()), static_cast<ssize_t>(s.size())); }

  // Reads until `needle` appears after position `from` of the transcript; returns its position or
  // npos on timeout or EOF.
  size_t wait_for(const std::string& needle, size_t from, double seconds = 10) {
    size_t at = std::string::npos;
    read_until([&] { return (at = out_.find(needle, from)) != std::string::npos; }, seconds);
    return at;
  }
  // Reads until the transcript holds at least `size` bytes; false on timeout or EOF.
  bool wait_for_bytes(size_t size, double seconds = 10) {
    return read_until([&] { return out_.size() >= size; }, seconds);
  }
  // Sends a line, then waits for the next prompt; returns the output in between.
  std::string turn(const std::string& line, double seconds = 10) {
    const size_t from = out_.size();
    send(line + "\r");
    const size_t echo = wait_for("\n", from, seconds);  // the echoed line ends first
    EXPECT_NE(echo, std::string::npos) << out_;
    const size_t at = wait_for(kPrompt, echo, seconds);
    EXPECT_NE(at, std::string::npos) << "no prompt after '" << line << "':\n" << out_.substr(from);
    return out_.substr(from, at == std::string::npos ? std::string::npos : at - from);
  }
  int wait_exit(double seconds = 10) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < deadline) {
      wait_for("\x01never", out_.size(), 0.05);  // drain output so the child never blocks on it
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
    }
    return -1;
  }
  const std::string& transcript() const { return out_; }
  const std::filesystem::path& home() const { return home_; }

  static constexpr const char* kPrompt = "you> ";

 private:
  // Appends the child's output to the transcript until done() holds (true), or the deadline
  // passes or the child closes the terminal (false).
  template <class Done>
  bool read_until(Done done, double seconds) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      if (done()) return true;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      std::array<char, 4096> buf;
      const ssize_t n = read(fd_, buf.data(), buf.size());
      if (n <= 0) return false;  // EIO: the child closed the terminal
      out_.append(buf.data(), static_cast<size_t>(n));
    }
  }
  static inline int counter_ = 0;
  std::filesystem::path home_;
  pid_t pid_ = -1;
  int fd_ = -1;
  bool reaped_ = false;
  std::string out_;
};

int stat_number(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return -1;
  return std::stoi(m[1]);
}

}  // namespace

TEST(ChatPty, ReferenceModelTurnsCommandsAndPrefixReuse) {
  const std::string model = sluice::test::testdata("reference/qwen3moe-f32.gguf");
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " is absent";
  PtyChat chat({"-m", model, "--temp", "0", "-n", "12", "-t", "2"});
  ASSERT_NE(chat.wait_for(PtyChat::kPrompt, 0), std::string::npos) << chat.transcript();
  EXPECT_EQ(chat.transcript().find("no chat template"), std::string::npos);

  chat.turn("Hello there");
  std::string stats = chat.turn("/stats");
  const int first_prompt = stat_number(stats, R"(prompt (\d+) tokens)");
  EXPECT_GT(first_prompt, 5) << stats;
  EXPECT_EQ(stat_number(stats, R"((\d+) reused)"), 0) << stats;

  chat.turn("How are you?");
  stats = chat.turn("/stats");
  const int reused = stat_number(stats, R"((\d+) reused from the cache)");
  const int evaluated = stat_number(stats, R"((\d+) evaluated;)");
  const int prompt = stat_number(stats, R"(prompt (\d+) tokens)");
  // The first turn's prompt is cached, so only the reply's tail and the new message are prefilled.
  EXPECT_GE(reused, first_prompt) << stats;
  EXPECT_EQ(reused + evaluated, prompt) << stats;
  EXPECT_LT(evaluated, prompt / 2) << stats;
  EXPECT_NE(stats.find("experts (ram): "), std::string::npos) << stats;

  EXPECT_NE(chat.turn("/nothink").find("thinking off"), std::string::npos);
  EXPECT_NE(chat.turn("/system You are terse.").find("system prompt set"), std::string::npos);
  chat.turn("Third message");
  stats = chat.turn("/stats");
  EXPECT_NE(stats.find("+ system prompt; enable_thinking=false"), std::string::npos) << stats;
  EXPECT_EQ(stat_number(stats, R"((\d+) messages)"), 6) << stats;

  const auto file = sluice::test::scratch_dir() / "chat-read.txt";
  std::ofstream(file) << "Contents of a file for the model.\n";
  EXPECT_NE(chat.turn("/read " + file.string()).find("(sending '" + file.string() + "', 34 bytes)"), std::string::npos);
  EXPECT_NE(chat.turn("/read /nonexistent/x.txt").find("/read: cannot open '/nonexistent/x.txt': No such file"),
            std::string::npos);
  EXPECT_NE(chat.turn("/frobnicate").find("unknown command '/frobnicate'"), std::string::npos);
  EXPECT_NE(chat.turn("/ctx zero").find("/ctx: expected a context size"), std::string::npos);
  EXPECT_NE(chat.turn("/clear").find("conversation cleared"), std::string::npos);
  stats = chat.turn("/stats");
  EXPECT_NE(stats.find("context: 0 of 4096 tokens cached; 0 messages"), std::string::npos) << stats;

  // Ctrl+C at the prompt drops the typed text; a second one on the empty line quits.
  size_t from = chat.transcript().size();
  chat.send("half a line\x03");
  ASSERT_NE(chat.wait_for(PtyChat::kPrompt, from + 1), std::string::npos) << chat.transcript().substr(from);
  from = chat.transcript().size();
  chat.send("\x03");
  const size_t note = chat.wait_for("press Ctrl+C again", from);
  ASSERT_NE(note, std::string::npos) << chat.transcript().substr(from);
  // The prompt is drawn once the editor owns the terminal; a ^C before that is a plain SIGINT.
  ASSERT_NE(chat.wait_for(PtyChat::kPrompt, note), std::string::npos) << chat.transcript().substr(from);
  chat.send("\x03");
  EXPECT_EQ(chat.wait_exit(), 0) << chat.transcript();

  std::ifstream hist(chat.home() / "sluice" / "chat_history");
  std::string h((std::istreambuf_iterator<char>(hist)), std::istreambuf_iterator<char>());
  EXPECT_NE(h.find("How\\040are\\040you?"), std::string::npos) << h;  // libedit's vis(3) encoding
  EXPECT_EQ(h.find("half a line"), std::string::npos) << h;
}

TEST(ChatPty, CtrlCStopsALongReply) {
  const std::string model = sluice::test::testdata("reference/qwen3moe-f32.gguf");
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " is absent";
  PtyChat chat({"-m", model, "--temp", "0", "-n", "4000", "-t", "2"});
  ASSERT_NE(chat.wait_for(PtyChat::kPrompt, 0), std::string::npos) << chat.transcript();
  size_t from = chat.transcript().size();
  chat.send("Tell me a long story\r");
  // Interrupt once the reply has started: this reference model writes thousands of tokens a second,
  // so a fixed pause could outlast the whole reply and leave nothing to stop.
  const size_t echo = chat.wait_for("\n", from);
  ASSERT_NE(echo, std::string::npos) << chat.transcript().substr(from);
  ASSERT_TRUE(chat.wait_for_bytes(echo + 64)) << chat.transcript().substr(from);
  const size_t before = chat.transcript().size();
  chat.send("\x03");
  const auto t0 = Clock::now();
  ASSERT_NE(chat.wait_for("[stopped]", before, 5), std::string::npos) << chat.transcript().substr(from);
  ASSERT_NE(chat.wait_for(PtyChat::kPrompt, before, 5), std::string::npos) << chat.transcript().substr(from);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 3.0);
  const std::string stats = chat.turn("/stats");
  EXPECT_NE(stats.find("finish: cancelled"), std::string::npos) << stats;
  EXPECT_LT(stat_number(stats, R"(decode (\d+) tokens)"), 4000) << stats;
  chat.send("/quit\r");
  EXPECT_EQ(chat.wait_exit(), 0) << chat.transcript();
}

TEST(ChatPty, TinyModelUsesTheFallbackFormat) {
  PtyChat chat({"-m", kTiny, "--temp", "0", "-n", "8", "-t", "2"});
  ASSERT_NE(chat.wait_for(PtyChat::kPrompt, 0), std::string::npos) << chat.transcript();
  EXPECT_NE(chat.transcript().find("note: the model has no chat template"), std::string::npos) << chat.transcript();
  EXPECT_NE(chat.turn("/think").find("has no enable_thinking switch; /think has no effect"), std::string::npos);
  chat.turn("Once upon a time");
  chat.turn("Then");
  const std::string stats = chat.turn("/stats");
  EXPECT_GT(stat_number(stats, R"((\d+) reused from the cache)"), 0) << stats;
  chat.send("\x04");  // Ctrl+D
  EXPECT_EQ(chat.wait_exit(), 0) << chat.transcript();
}

TEST(ChatPipe, ReadsPlainLinesWithoutATerminal) {
  const std::string cmd = std::string("printf 'Once upon a time\\n/stats\\n/bogus\\nThe end\\n' | ") + SLUICE_BIN +
                          " chat -m " + kTiny + " --temp 0 -n 6 -t 2";
  const auto [status, out] = sluice::test::sh(cmd);
  ASSERT_NE(status, -1) << out;
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out.find("you> "), std::string::npos) << out;  // no prompt in a pipe
  EXPECT_NE(out.find("last turn: prompt "), std::string::npos) << out;
  EXPECT_NE(out.find("unknown command '/bogus'"), std::string::npos) << out;
}

namespace {

// `sluice chat` on the tiny model with `lines` piped in; stdout and stderr together.
sluice::test::ShellResult piped_chat(const std::string& lines, const std::string& flags) {
  return sluice::test::sh("printf '" + lines + "' | " + SLUICE_BIN + " chat -m " + kTiny + " --temp 0 -t 2 " + flags);
}

}  // namespace

// A full context drops the oldest turns and goes on, as llama.cpp does (it stopped and asked for
// /clear): here in the middle of the second and third replies (each reply is the whole -n 60, the
// context 128), the reply continuing after the shorter conversation.
TEST(ChatPipe, AFullContextShiftsOutTheOldestTurnsByDefault) {
  const auto r = piped_chat("Hi\\nThen\\nAnd\\n/stats\\n", "-n 60 -c 128");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("[context full: dropped the 2 oldest message(s) and evaluated "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("/clear"), std::string::npos) << r.out;
  EXPECT_EQ(stat_number(r.out, R"(session: (\d+) turns)"), 3) << r.out;
  EXPECT_EQ(stat_number(r.out, R"(decode (\d+) tokens)"), 60) << r.out;  // the last reply went on to -n
  EXPECT_EQ(stat_number(r.out, R"(cached; (\d+) messages)"), 2) << r.out;
  // Before a turn that would leave no room for a reply, too.
  const auto before = piped_chat(
      "In the beginning God created the heaven and the earth\\nAnd the earth was without form\\n"
      "And God said let there be light\\n/stats\\n",
      "-n 20 -c 64");
  ASSERT_EQ(before.status, 0) << before.out;
  EXPECT_NE(before.out.find("[context: dropped the 2 oldest message(s) to make room;"), std::string::npos) << before.out;
  EXPECT_EQ(stat_number(before.out, R"(session: (\d+) turns)"), 3) << before.out;
}

// --no-context-shift keeps the old behaviour: stop, and ask for /clear or /ctx.
TEST(ChatPipe, NoContextShiftStopsAndAsksForClear) {
  const auto r = piped_chat("Hi\\nThen\\nAnd\\n/stats\\n", "-n 60 -c 128 --no-context-shift");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("[context full at 128 tokens: /clear or /ctx N]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the context holds 128: /clear to start over or /ctx N for a larger context (message not sent)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("dropped the"), std::string::npos) << r.out;
  EXPECT_EQ(stat_number(r.out, R"(session: (\d+) turns)"), 2) << r.out;
}
