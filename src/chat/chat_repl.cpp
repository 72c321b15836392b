// The `sluice chat` conversation loop (see chat_repl.h): slash commands, prompts built by the
// server's chat_prompt_tokens, prefix-reusing generation through one Session, and per-turn
// statistics.
#include "chat/chat_repl.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
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
  if (line.rfind("//", 0) == 0) {  // "//text" sends "/text" as a message
    send(line.substr(1));
    return true;
  }
  if (line[0] != '/') {
    send(line);
    return true;
  }
  const size_t sp = line.find_first_of(" \t");
  const std::string name = line.substr(0, sp);
  const std::string arg = sp == std::string::npos ? "" : trim(line.substr(sp + 1));
  if (name == "/quit" || name == "/exit") return false;
  command(name, arg);
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
    session_.reset();  // free the old KV cache before allocating the new one
    session_ = engine_.new_session(n);
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
    try {
      if (name == "/save") save_state(arg);
      else load_state(arg);
    } catch (const Error& e) {
      err_ << fmt::format("{}: {}\n", name, e.what());
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

void ChatRepl::load_state(const std::string& path) {
  std::string data;
  const std::string why = session_->load(path, &data);
  if (!why.empty()) {
    err_ << fmt::format("not restored: {}\n", why);
    return;
  }
  nlohmann::ordered_json m = nlohmann::ordered_json::parse(data, nullptr, false);
  if (!m.is_array()) {
    session_->clear();
    fail("'{}' holds no chat conversation (saved by `sluice run`?)", path);
  }
  messages_ = std::move(m);
  out_ << fmt::format("restored {} messages ({} tokens) from '{}'\n", messages_.size(), session_->tokens().size(), path);
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

void ChatRepl::send(const std::string& user_text) {
  messages_.push_back({{"role", "user"}, {"content", user_text}});
  std::vector<int32_t> prompt;
  try {
    prompt = prompt_tokens();
  } catch (const Error& e) {
    messages_.erase(messages_.end() - 1);
    err_ << e.what() << "\n";
    return;
  }
  const int n_ctx = session_->n_ctx();
  if (static_cast<int>(prompt.size()) >= n_ctx) {
    messages_.erase(messages_.end() - 1);
    err_ << fmt::format("the conversation is {} tokens, the context holds {}: /clear to start over or /ctx N for a "
                        "larger context (message not sent)\n",
                        prompt.size(), n_ctx);
    return;
  }
  cancel_.store(false);
  GenerateResult r;
  try {
    r = session_->generate(prompt, config_.generate, [&](int32_t, std::string_view text) {
      out_.write(text.data(), static_cast<std::streamsize>(text.size()));
      out_.flush();
      return !cancel_.load(std::memory_order_relaxed);
    });
  } catch (const Error& e) {
    messages_.erase(messages_.end() - 1);
    out_ << "\n";
    err_ << "generation failed: " << e.what() << "\n";
    return;
  }
  out_ << "\n";
  if (r.finish == FinishReason::kCancelled) err_ << "[stopped]\n";
  else if (r.finish == FinishReason::kLength && static_cast<int>(session_->tokens().size()) + 1 >= n_ctx)
    err_ << fmt::format("[context full at {} tokens: /clear or /ctx N]\n", n_ctx);
  else if (r.finish == FinishReason::kLength)
    err_ << fmt::format("[reply cut at {} tokens (-n)]\n", config_.generate.max_tokens);
  out_.flush();
  err_.flush();
  // The reply is kept as produced (thinking included); the template decides what of it the next
  // prompt shows. A stopped reply is kept too, so the next turn continues from what was seen.
  messages_.push_back({{"role", "assistant"}, {"content", r.text}});
  last_ = {static_cast<int>(prompt.size()), r.n_reused, r.n_prompt, static_cast<int>(r.tokens.size()),
           r.prefill_seconds, r.decode_seconds, r.finish, r.n_drafted, r.n_accepted, r.n_steps};
  total_reused_ += r.n_reused;
  total_evaluated_ += r.n_prompt;
  total_generated_ += r.tokens.size();
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
      "experts ({}): {} requests, hit rate {:.1f} %, {} misses, {:.1f} MB read in {:.3f} s, stall {:.3f} s, "
      "prefetch {} issued / {} used\n",
      engine_.info().experts_mode, es.requests, es.requests ? 100.0 * es.hits / es.requests : 0.0, es.misses,
      es.bytes_read / 1e6, es.read_seconds, es.stall_seconds, es.prefetch_issued, es.prefetch_used);
}

}  // namespace sluice::chat
