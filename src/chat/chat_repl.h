// The `sluice chat` conversation loop, kept apart from the terminal so it can be driven by any
// line source (libedit on a TTY, plain lines from a pipe, a string in a test). Each turn renders
// the whole conversation through the model's chat template and hands the token ids to one
// long-lived Session; the Session reuses its longest cached common prefix, so only the new
// suffix (the user's message and the generation prompt) is prefilled. When the context fills
// (before a turn, or during a reply) the oldest turns after the system prompt are dropped and the
// shorter conversation evaluated again (a context shift, as llama.cpp does), said on `err`;
// ChatConfig::context_shift false stops instead and asks for /clear or /ctx. An error of a command
// or a message is reported and leaves the conversation as it was.
//
// Prompts come from chat_prompt_tokens (sluice/serving.h), the server's builder: the template,
// or for models without one the plain fallback format
//   SYSTEM\n\nUser: MESSAGE\nAssistant: REPLY\nUser: MESSAGE\nAssistant:
// with chat_stop_strings() ("\nUser:") as stop strings.
#pragma once

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>

#include "sluice/serving.h"

namespace sluice::chat {

// One read from the user: a line, Ctrl+C at the prompt (`line` holds what was typed so far, now
// discarded), or end of input (Ctrl+D, EOF).
struct InputEvent {
  enum Kind { kLine, kInterrupt, kEof } kind = kEof;
  std::string line;
};

class LineReader {
 public:
  virtual ~LineReader() = default;
  virtual InputEvent read(const std::string& prompt) = 0;
};

struct ChatConfig {
  GenerateOptions generate;  // max_tokens per reply, sampling
  std::string system;        // system prompt; empty: none
  std::string prompt = "you> ";
  // When the context fills: drop the oldest messages after the system prompt and go on (the
  // context is evaluated again), as llama.cpp does; false: stop and ask for /clear or /ctx.
  bool context_shift = true;
};

// Statistics of the last turn and of the whole session, shown by /stats.
struct TurnStats {
  int prompt_tokens = 0, reused = 0, evaluated = 0, generated = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  FinishReason finish = FinishReason::kLength;
  int drafted = 0, accepted = 0, steps = 0;  // speculative decoding
};

class ChatRepl {
 public:
  // `cancel` is set asynchronously (by a SIGINT handler) to stop the reply being generated; the
  // token callback polls it, and each reply starts by clearing it. `out` receives replies and command output, `err` errors and notes.
  ChatRepl(Engine& engine, ChatConfig config, std::atomic<bool>& cancel, std::ostream& out,
           std::ostream& err);
  ~ChatRepl();

  // Reads and answers until /quit, end of input, or Ctrl+C twice at an empty prompt. Returns the
  // process exit code (0).
  int run(LineReader& in);
  // Handles one input line (a message or a slash command); false once the user asked to quit.
  // An error while handling it is reported on err and leaves the conversation as it was.
  bool handle_line(const std::string& line);

  bool has_template() const { return !template_source_.empty(); }
  bool template_has_thinking_switch() const { return thinking_switch_; }
  const nlohmann::ordered_json& messages() const { return messages_; }
  const TurnStats& last_turn() const { return last_; }
  // The conversation and its KV state to a file, and back (/save FILE, /load FILE, --session).
  // load_state returns why a file that does not fit was not restored ("" when it was; a run's
  // file, which holds no conversation, does not fit); a file that is not a valid state throws
  // sluice::Error.
  void save_state(const std::string& path);
  std::string load_state(const std::string& path);

 private:
  void command(const std::string& name, const std::string& arg);
  void send(const std::string& user_text);
  // Drops the oldest messages (never the last one, the message being answered) until the prompt
  // is at most `target` tokens or only that message is left; returns the prompt and sets
  // `dropped` to the number of messages dropped.
  std::vector<int32_t> shift_context(int target, int& dropped);
  // The conversation (system prompt first) through chat_prompt_tokens, the server's builder.
  std::vector<int32_t> prompt_tokens() const;
  void set_thinking(bool on);
  void print_stats();
  void print_help();

  Engine& engine_;
  ChatConfig config_;
  std::atomic<bool>& cancel_;
  std::ostream& out_;
  std::ostream& err_;
  std::unique_ptr<Session> session_;
  std::string template_source_;  // empty: the fallback format
  bool thinking_switch_ = false;
  std::optional<bool> enable_thinking_;  // unset: the template's default
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();  // without the system prompt
  TurnStats last_;
  uint64_t total_reused_ = 0, total_evaluated_ = 0, total_generated_ = 0;
  int turns_ = 0;
};

}  // namespace sluice::chat
