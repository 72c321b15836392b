// The `sluice chat` conversation loop (see chat_repl.h): slash commands, prompts built by the
// server's chat_prompt_tokens, prefix-reusing generation through one Session, and per-turn
// statistics.
#include "chat/chat_repl.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace sluice::chat {

namespace {

const char* finish_name(FinishReason f) {
  switch (f) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop string";
    case FinishReason::kEog: return "end of generation";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kGrammar: return "grammar complete";
  }
  return "?";
}

double rate(int n, double seconds) { return n / std::max(seconds, 1e-9); }

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

ChatRepl::ChatRepl(Engine& engine, ChatConfig config, std::atomic<bool>& cancel, std::ostream& out,
                   std::ostream& err)
    : engine_(engine), config_(std::move(config)), cancel_(cancel), out_(out), err_(err) {
  template_source_ = engine_.info().chat_template;
  // Templates read the switch as a plain variable; a template that never names it ignores it.
  thinking_switch_ = template_source_.find("enable_thinking") != std::string::npos;
  for (std::string& stop : chat_stop_strings(engine_)) config_.generate.stop.push_back(std::move(stop));
  session_ = engine_.new_session();
}

ChatRepl::~ChatRepl() = default;

int ChatRepl::run(LineReader& in) {
  bool interrupted_empty = false;  // the previous read was Ctrl+C at an empty prompt
  for (;;) {
    InputEvent ev = in.read(config_.prompt);
    if (ev.kind == InputEvent::kEof) break;
    if (ev.kind == InputEvent::kInterrupt) {
      if (ev.line.empty() && interrupted_empty) break;
      interrupted_empty = ev.line.empty();
      if (interrupted_empty) err_ << "(press Ctrl+C again or Ctrl+D to quit)\n" << std::flush;
      continue;
    }
    interrupted_empty = false;
    if (!handle_line(ev.line)) break;
  }
  return 0;
}

bool ChatRepl::handle_line(const std::string& raw) {
  std::string line = raw;
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (trim(line).empty()) return true;
  // A message that fails (or a /read that sends one) may have added it and shifted turns out.
  const nlohmann::ordered_json before = messages_;
  if (line.rfind("//", 0) == 0 || line[0] != '/') {  // "//text" sends "/text" as a message
    try {
      send(line[0] == '/' ? line.substr(1) : line);
    } catch (const Error& e) {  // worded for the user already
      messages_ = before;
      err_ << e.what() << "\n";
    } catch (const std::exception& e) {
      messages_ = before;
      err_ << fmt::format("the message failed: {} (the conversation is as it was)\n", e.what());
    }
    return true;
  }
  const size_t sp = line.find_first_of(" \t");
  const std::string name = line.substr(0, sp);
  const std::string arg = sp == std::string::npos ? "" : trim(line.substr(sp + 1));
  if (name == "/quit" || name == "/exit") return false;
  // Whatever a command runs into (a file that is a directory, memory for a /ctx that is too
  // large), the conversation is worth more than the command: report it and read the next line.
  try {
    command(name, arg);
  } catch (const std::exception& e) {
    messages_ = before;
    err_ << fmt::format("{}: {}\n", name, e.what());
  }
  return true;
}

void ChatRepl::command(const std::string& name, const std::string& arg) {
  if (name == "/help") {
    print_help();
  } else if (name == "/think" || name == "/nothink") {
    set_thinking(name == "/think");
  } else if (name == "/system") {
    config_.system = arg;
    out_ << (arg.empty() ? "system prompt removed" : "system prompt set")
         << "; the conversation is kept and re-evaluated from the changed prefix next turn\n";
  } else if (name == "/clear") {
    messages_ = nlohmann::ordered_json::array();
    session_->clear();
    out_ << "conversation cleared (system prompt kept)\n";
  } else if (name == "/ctx") {
    int n = 0;
    const char* b = arg.c_str();
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(b, &end, 10);
    if (arg.empty() || *end != '\0' || errno != 0 || v < 1 || v > (1 << 24)) {
      err_ << fmt::format("/ctx: expected a context size in tokens (1 to {}), got '{}'\n", 1 << 24, arg);
      return;
    }
    n = static_cast<int>(v);
    const int old_ctx = session_->n_ctx();
    session_.reset();  // free the old KV cache before allocating the new one
    try {
      session_ = engine_.new_session(n);
    } catch (...) {
      // The conversation needs a session: the old size again (its cache is evaluated anew).
      session_ = engine_.new_session(old_ctx);
      throw;
    }
    const int n_train = engine_.info().n_ctx_train;
    out_ << fmt::format("context is now {} tokens{}: new session, the cache is empty; the conversation ({} messages) "
                        "is kept and evaluated again next turn\n",
                        session_->n_ctx(), n_train > 0 && n > n_train ? fmt::format(" (beyond the trained {}: output may degrade)", n_train) : "",
                        messages_.size());
  } else if (name == "/read") {
    if (arg.empty()) {
      err_ << "/read: give a file name: /read FILE\n";
      return;
    }
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      err_ << fmt::format("/read: '{}' is a directory; nothing sent\n", arg);
      return;
    }
    std::ifstream f(arg, std::ios::binary);
    if (!f) {
      err_ << fmt::format("/read: cannot open '{}': {}\n", arg, std::strerror(errno));
      return;
    }
    std::ostringstream ss;
    ss << f.rdbuf();
    if (f.bad()) {
      err_ << fmt::format("/read: cannot read '{}'\n", arg);
      return;
    }
    if (trim(ss.str()).empty()) {
      err_ << fmt::format("/read: '{}' is empty; nothing sent\n", arg);
      return;
    }
    out_ << fmt::format("(sending '{}', {} bytes)\n", arg, ss.str().size());
    send(ss.str());
  } else if (name == "/save" || name == "/load") {
    if (arg.empty()) {
      err_ << fmt::format("{}: give a file name: {} FILE\n", name, name);
      return;
    }
    if (name == "/save") {
      save_state(arg);
    } else if (const std::string why = load_state(arg); !why.empty()) {
      err_ << fmt::format("/load: not restored: {}; the conversation is as it was\n", why);
    }
  } else if (name == "/stats") {
    print_stats();
  } else {
    err_ << fmt::format("unknown command '{}' (/help lists the commands; start a message with // to send a "
                        "leading /)\n",
                        name);
  }
}

void ChatRepl::save_state(const std::string& path) {
  session_->save(path, messages_.dump());
  out_ << fmt::format("saved {} messages ({} tokens) to '{}'\n", messages_.size(), session_->tokens().size(), path);
}

std::string ChatRepl::load_state(const std::string& path) {
  std::string data;
  const std::string why = session_->load(path, &data);
  if (!why.empty()) return why;
  nlohmann::ordered_json m = nlohmann::ordered_json::parse(data, nullptr, false);
  // A run's file: not restored, so that --session leaves it as it was (as run does a chat's).
  if (!m.is_array()) {
    session_->clear();
    return fmt::format("'{}' holds no chat conversation (sluice run --session continues it)", path);
  }
  messages_ = std::move(m);
  out_ << fmt::format("restored {} messages ({} tokens) from '{}'\n", messages_.size(), session_->tokens().size(), path);
  return "";
}

void ChatRepl::print_help() {
  out_ << "commands:\n"
          "  /think, /nothink  turn the template's thinking mode on or off (enable_thinking)\n"
          "  /system TEXT      set the system prompt (no TEXT: remove it)\n"
          "  /ctx N            start a new session with a context of N tokens (conversation kept)\n"
          "  /read FILE        send the file's content as your message\n"
          "  /clear            forget the conversation\n"
          "  /save FILE        save the conversation and its KV cache to FILE\n"
          "  /load FILE        continue a conversation saved with /save (or --session)\n"
          "  /stats            tokens, speeds, prefix reuse and expert-cache statistics\n"
          "  /quit             leave (also Ctrl+D, or Ctrl+C twice at an empty prompt)\n"
          "Ctrl+C while the model writes stops the reply; //text sends a message starting with /.\n";
}

void ChatRepl::set_thinking(bool on) {
  if (!thinking_switch_) {
    out_ << fmt::format("this model's chat template has no enable_thinking switch; /{} has no effect\n",
                        on ? "think" : "nothink");
    return;
  }
  enable_thinking_ = on;
  out_ << fmt::format("thinking {} (enable_thinking={} from the next turn)\n", on ? "on" : "off", on);
}

std::vector<int32_t> ChatRepl::prompt_tokens() const {
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  if (!config_.system.empty()) msgs.push_back({{"role", "system"}, {"content", config_.system}});
  for (const auto& m : messages_) msgs.push_back(m);
  return chat_prompt_tokens(engine_, msgs.dump(), "", nullptr, {.enable_thinking = enable_thinking_, .reasoning_effort = {}});
}

std::vector<int32_t> ChatRepl::shift_context(int target, int& dropped) {
  dropped = 0;
  std::vector<int32_t> prompt = prompt_tokens();
  // Whole turns go: a user message with the replies after it, so the rest still starts with one.
  while (static_cast<int>(prompt.size()) > target && messages_.size() > 1) {
    do {
      messages_.erase(messages_.begin());
      ++dropped;
    } while (messages_.size() > 1 && messages_.front().value("role", "") != "user");
    prompt = prompt_tokens();
  }
  return prompt;
}

// Errors leave through handle_line, which puts the conversation back as it was.
void ChatRepl::send(const std::string& user_text) {
  messages_.push_back({{"role", "user"}, {"content", user_text}});
  std::vector<int32_t> prompt = prompt_tokens();
  const int n_ctx = session_->n_ctx();
  const int max_tokens = config_.generate.max_tokens;
  std::vector<std::string> notes;  // said after the reply, so that it is not cut in two
  // A turn needs room for a reply: a quarter of the context (or -n, when smaller). With the shift,
  // the oldest turns make way down to half the context, so the next turns find room too.
  const int room = std::max(1, std::min(max_tokens, n_ctx / 4));
  if (config_.context_shift && static_cast<int>(prompt.size()) + room > n_ctx) {
    int dropped = 0;
    prompt = shift_context(n_ctx / 2, dropped);
    if (dropped > 0)
      err_ << fmt::format("[context: dropped the {} oldest message(s) to make room; {} tokens are evaluated again]\n",
                          dropped, prompt.size());
  }
  if (static_cast<int>(prompt.size()) >= n_ctx)
    fail("the {} is {} tokens, the context holds {}: {}/ctx N for a larger context (message not sent)",
         messages_.size() > 1 ? "conversation" : "message", prompt.size(), n_ctx,
         messages_.size() > 1 ? "/clear to start over or " : "");
  cancel_.store(false);
  GenerateOptions go = config_.generate;
  std::vector<int32_t> reply;  // the reply's tokens so far
  std::string text;
  TurnStats t;
  for (;;) {
    std::vector<int32_t> input = prompt;
    input.insert(input.end(), reply.begin(), reply.end());
    GenerateResult r;
    try {
      r = session_->generate(input, go, [&](int32_t, std::string_view piece) {
        out_.write(piece.data(), static_cast<std::streamsize>(piece.size()));
        out_.flush();
        return !cancel_.load(std::memory_order_relaxed);
      });
    } catch (const std::exception&) {
      out_ << "\n";
      throw;
    }
    reply.insert(reply.end(), r.tokens.begin(), r.tokens.end());
    text += r.text;
    t = {static_cast<int>(prompt.size()), t.reused + r.n_reused, t.evaluated + r.n_prompt, static_cast<int>(reply.size()),
         t.prefill_seconds + r.prefill_seconds, t.decode_seconds + r.decode_seconds, r.finish,
         t.drafted + r.n_drafted, t.accepted + r.n_accepted, t.steps + r.n_steps};
    const bool full = r.finish == FinishReason::kLength && static_cast<int>(session_->tokens().size()) + 1 >= n_ctx;
    if (!full) {
      if (r.finish == FinishReason::kCancelled) notes.push_back("[stopped]");
      else if (r.finish == FinishReason::kLength) notes.push_back(fmt::format("[reply cut at {} tokens (-n)]", max_tokens));
      break;
    }
    if (!config_.context_shift) {
      notes.push_back(fmt::format("[context full at {} tokens: /clear or /ctx N]", n_ctx));
      break;
    }
    if (static_cast<int>(reply.size()) >= max_tokens) {
      notes.push_back(fmt::format("[reply cut at {} tokens (-n)]", max_tokens));
      break;
    }
    // The reply goes on after the oldest turns are dropped: the shorter conversation, then the
    // reply's tokens so far, evaluated again (a stop string across the seam is not seen).
    int dropped = 0;
    prompt = shift_context(n_ctx / 2, dropped);
    if (dropped == 0 || static_cast<int>(prompt.size() + reply.size()) + 1 >= n_ctx) {
      notes.push_back(fmt::format("[context full at {} tokens: this message and its reply fill it; /ctx N for a larger "
                                  "context]",
                                  n_ctx));
      break;
    }
    notes.push_back(fmt::format("[context full: dropped the {} oldest message(s) and evaluated {} tokens again]", dropped,
                                prompt.size() + reply.size()));
    go.max_tokens = max_tokens - static_cast<int>(reply.size());
  }
  out_ << "\n";
  out_.flush();
  for (const std::string& note : notes) err_ << note << "\n";
  err_.flush();
  // The reply is kept as produced (thinking included); the template decides what of it the next
  // prompt shows. A stopped reply is kept too, so the next turn continues from what was seen.
  messages_.push_back({{"role", "assistant"}, {"content", text}});
  last_ = t;
  total_reused_ += t.reused;
  total_evaluated_ += t.evaluated;
  total_generated_ += t.generated;
  ++turns_;
}

void ChatRepl::print_stats() {
  if (turns_ == 0) {
    out_ << "no turns yet\n";
  } else {
    const TurnStats& t = last_;
    out_ << fmt::format(
        "last turn: prompt {} tokens: {} reused from the cache, {} evaluated; prefill {:.1f} t/s ({:.3f} s); "
        "decode {} tokens, {:.1f} t/s ({:.3f} s); finish: {}\n",
        t.prompt_tokens, t.reused, t.evaluated, rate(t.evaluated, t.prefill_seconds), t.prefill_seconds, t.generated,
        rate(t.generated, t.decode_seconds), t.decode_seconds, finish_name(t.finish));
    out_ << fmt::format("drafts: {} drafted, {} accepted ({:.1f} %), {:.2f} tokens per forward pass\n", t.drafted,
                        t.accepted, t.drafted ? 100.0 * t.accepted / t.drafted : 0.0,
                        t.steps ? static_cast<double>(t.generated) / t.steps : 0.0);
    out_ << fmt::format("session: {} turns, {} prompt tokens reused, {} evaluated, {} generated\n", turns_,
                        total_reused_, total_evaluated_, total_generated_);
  }
  out_ << fmt::format("context: {} of {} tokens cached; {} messages{}{}\n", session_->tokens().size(),
                      session_->n_ctx(), messages_.size(), config_.system.empty() ? "" : " + system prompt",
                      enable_thinking_ ? fmt::format("; enable_thinking={}", *enable_thinking_) : "");
  const ExpertStats es = engine_.expert_stats();
  out_ << fmt::format(
      "experts ({}): {} requests, hit rate {:.1f} %, {} misses, {:.1f} MiB read in {:.3f} s, stall {:.3f} s, "
      "prefetch {} issued / {} used\n",
      engine_.info().experts_mode, es.requests, es.requests ? 100.0 * es.hits / es.requests : 0.0, es.misses,
      es.bytes_read / 1048576.0, es.read_seconds, es.stall_seconds, es.prefetch_issued, es.prefetch_used);
}

}  // namespace sluice::chat
