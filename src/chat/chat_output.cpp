// Chat output parsing (see sluice/chat_output.h): the one place that knows each model family's
// tool-call and reasoning markers. Detection reads the chat template, because the template is what
// taught the model its syntax. Parsing is a small state machine over the generated text: a
// suffix that could still become a marker is held back, so markers never reach the client.
#include "sluice/chat_output.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>

namespace sluice {

namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kDsBegin = "<｜tool▁calls▁begin｜>", kDsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCall = "<｜tool▁call▁begin｜>", kDsSep = "<｜tool▁sep｜>",
                           kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsmlBegin = "<｜DSML｜tool_calls>", kDsmlEnd = "</｜DSML｜tool_calls>";
constexpr std::string_view kDsmlFnBegin = "<｜DSML｜function_calls>",
                           kDsmlFnEnd = "</｜DSML｜function_calls>";
constexpr std::string_view kKimiBegin = "<|tool_calls_section_begin|>",
                           kKimiEnd = "<|tool_calls_section_end|>";
constexpr std::string_view kKimiCall = "<|tool_call_begin|>",
                           kKimiArgs = "<|tool_call_argument_begin|>",
                           kKimiCallEnd = "<|tool_call_end|>";
constexpr std::string_view kHarmonyMessage = "<|message|>", kHarmonyChannel = "<|channel|>";
constexpr std::string_view kHarmonyEnds[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};

struct Block {
  std::string_view begin, end;
};

Block tool_block(ChatSyntax s) {
  switch (s) {
    case ChatSyntax::kHermes:
    case ChatSyntax::kGlm:
      return {"<tool_call>", "</tool_call>"};
    case ChatSyntax::kDeepSeek:
      return {kDsBegin, kDsEnd};
    case ChatSyntax::kDsml:
      return {kDsmlBegin, kDsmlEnd};
    case ChatSyntax::kDsmlFunctions:
      return {kDsmlFnBegin, kDsmlFnEnd};
    case ChatSyntax::kKimi:
      return {kKimiBegin, kKimiEnd};
    default:
      return {};
  }
}

// Turn markers of each family that never belong in a reply's text (the model's end-of-turn token
// ends generation and has no text; these are what a confused model may still write).
std::span<const std::string_view> stray_markers(ChatSyntax s) {
  static constexpr std::string_view hermes[] = {"<|im_start|>", "<|im_end|>", "<|endoftext|>"};
  static constexpr std::string_view deepseek[] = {
      "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>"};
  static constexpr std::string_view glm[] = {"<|user|>",        "<|assistant|>", "<|system|>",
                                             "<|observation|>", "[gMASK]",       "<sop>"};
  static constexpr std::string_view kimi[] = {"<|im_end|>", "<|im_user|>", "<|im_assistant|>",
                                              "<|im_system|>", "<|im_middle|>"};
  static constexpr std::string_view harmony[] = {"<|constrain|>", "<|endoftext|>"};
  switch (s) {
    case ChatSyntax::kHermes:
      return hermes;
    case ChatSyntax::kDeepSeek:
    case ChatSyntax::kDsml:
    case ChatSyntax::kDsmlFunctions:
      return deepseek;
    case ChatSyntax::kGlm:
      return glm;
    case ChatSyntax::kKimi:
      return kimi;
    case ChatSyntax::kHarmony:
      return harmony;
    default:
      return {};
  }
}

std::string_view trim(std::string_view s) {
  const auto ws = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

std::string_view trim_end(std::string_view s) {
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

// Bytes of `buf` that can be released: all but a tail that is a proper prefix of a marker.
// (`also`: further markers, the family's stray turn markers.)
template <typename Markers>
size_t releasable(std::string_view buf, const Markers& markers,
                  std::span<const std::string_view> also = {}) {
  for (size_t k = 0; k < buf.size(); ++k) {
    const std::string_view tail = buf.substr(k);
    auto prefix = [&](std::string_view m) {
      return !m.empty() && tail.size() < m.size() && m.starts_with(tail);
    };
    if (std::any_of(std::begin(markers), std::end(markers), prefix) ||
        std::any_of(also.begin(), also.end(), prefix))
      return k;
  }
  return buf.size();
}

// The text between `open` and `close` starting the search at `pos`; advances pos past `close`.
std::optional<std::string_view> between(std::string_view s, std::string_view open,
                                        std::string_view close, size_t& pos) {
  const size_t a = s.find(open, pos);
  if (a == std::string_view::npos) return std::nullopt;
  const size_t b = s.find(close, a + open.size());
  if (b == std::string_view::npos) return std::nullopt;
  pos = b + close.size();
  return s.substr(a + open.size(), b - a - open.size());
}

// An arguments object from JSON text (an object, or a string holding one); nullopt if neither.
std::optional<json> args_object(std::string_view text) {
  json j = json::parse(trim(text), nullptr, false);
  if (j.is_string()) j = json::parse(j.get<std::string>(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

// A parameter value written as text: JSON when it parses as a non-string value, else the text.
json loose_value(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  return j.is_discarded() ? json(std::string(text)) : j;
}

struct Call {
  std::string name, id;
  json args;
};

std::optional<std::vector<Call>> parse_calls(ChatSyntax syntax, std::string_view block) {
  std::vector<Call> calls;
  size_t pos = 0;
  switch (syntax) {
    case ChatSyntax::kHermes: {
      json j = json::parse(trim(block), nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string())
        return std::nullopt;
      std::optional<json> args =
          j.contains("arguments") ? args_object(j["arguments"].dump()) : json::object();
      if (!args) return std::nullopt;
      calls.push_back({j["name"].get<std::string>(), "", *args});
      break;
    }
    case ChatSyntax::kGlm: {
      const size_t first = block.find("<arg_key>");
      Call c{std::string(trim(block.substr(0, first))), "", json::object()};
      if (c.name.empty()) return std::nullopt;
      pos = first == std::string_view::npos ? block.size() : first;
      while (auto key = between(block, "<arg_key>", "</arg_key>", pos)) {
        auto value = between(block, "<arg_value>", "</arg_value>", pos);
        if (!value) return std::nullopt;
        c.args[std::string(trim(*key))] = loose_value(*value);
      }
      calls.push_back(std::move(c));
      break;
    }
    case ChatSyntax::kDeepSeek:
      while (auto call = between(block, kDsCall, kDsCallEnd, pos)) {
        const size_t sep = call->find(kDsSep);
        if (sep == std::string_view::npos) return std::nullopt;
        std::string_view name = trim(call->substr(0, sep)),
                         rest = call->substr(sep + kDsSep.size());
        // DeepSeek V3 writes "function<｜tool▁sep｜>NAME\n```json\nARGS\n```".
        if (const size_t fence = rest.find("```json");
            name == "function" && fence != std::string_view::npos) {
          name = trim(rest.substr(0, fence));
          rest = rest.substr(fence + 7);
          rest = rest.substr(0, rest.rfind("```"));
        }
        std::optional<json> args = args_object(rest);
        if (!args || name.empty()) return std::nullopt;
        calls.push_back({std::string(name), "", *args});
      }
      break;
    case ChatSyntax::kDsml:
    case ChatSyntax::kDsmlFunctions:
      while (auto invoke = between(block, "<｜DSML｜invoke name=\"", "</｜DSML｜invoke>", pos)) {
        const size_t q = invoke->find("\">");
        if (q == std::string_view::npos) return std::nullopt;
        Call c{std::string(invoke->substr(0, q)), "", json::object()};
        size_t p = q;
        while (auto param =
                   between(*invoke, "<｜DSML｜parameter name=\"", "</｜DSML｜parameter>", p)) {
          const size_t nq = param->find('"'), gt = param->find('>');
          if (nq == std::string_view::npos || gt == std::string_view::npos || gt < nq)
            return std::nullopt;
          const std::string_view attrs = param->substr(nq, gt - nq), value = param->substr(gt + 1);
          c.args[std::string(param->substr(0, nq))] =
              attrs.find("string=\"true\"") != std::string_view::npos ? json(std::string(value))
                                                                      : loose_value(value);
        }
        calls.push_back(std::move(c));
      }
      break;
    case ChatSyntax::kKimi:
      while (auto call = between(block, kKimiCall, kKimiCallEnd, pos)) {
        const size_t a = call->find(kKimiArgs);
        if (a == std::string_view::npos) return std::nullopt;
        const std::string_view id = trim(call->substr(0, a));
        std::string_view name = id;
        if (name.starts_with("functions.")) name.remove_prefix(10);
        name = name.substr(0, name.rfind(':'));
        std::optional<json> args = args_object(call->substr(a + kKimiArgs.size()));
        if (!args || name.empty()) return std::nullopt;
        calls.push_back({std::string(name), std::string(id), *args});
      }
      break;
    default:
      return std::nullopt;
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

}  // namespace

ChatSyntax chat_syntax(std::string_view t) {
  // The most specific markers first: DSML templates also mention <think>, GLM's also <tool_call>.
  if (t.find("｜DSML｜") != std::string_view::npos)
    return t.find("function_calls>") != std::string_view::npos ? ChatSyntax::kDsmlFunctions
                                                               : ChatSyntax::kDsml;
  if (t.find(kDsBegin) != std::string_view::npos) return ChatSyntax::kDeepSeek;
  if (t.find("<|tool_calls_section_begin|>") != std::string_view::npos) return ChatSyntax::kKimi;
  if (t.find("<|channel|>") != std::string_view::npos &&
      t.find("<|message|>") != std::string_view::npos)
    return ChatSyntax::kHarmony;
  if (t.find("<arg_key>") != std::string_view::npos) return ChatSyntax::kGlm;
  if (t.find("<tool_call>") != std::string_view::npos &&
      t.find("\"arguments\"") != std::string_view::npos)
    return ChatSyntax::kHermes;
  return ChatSyntax::kPlain;
}

const char* chat_syntax_name(ChatSyntax s) {
  switch (s) {
    case ChatSyntax::kHermes:
      return "hermes";
    case ChatSyntax::kDeepSeek:
      return "deepseek";
    case ChatSyntax::kDsml:
      return "dsml";
    case ChatSyntax::kDsmlFunctions:
      return "dsml-functions";
    case ChatSyntax::kGlm:
      return "glm";
    case ChatSyntax::kHarmony:
      return "harmony";
    case ChatSyntax::kKimi:
      return "kimi";
    default:
      return "plain";
  }
}

ChatOutputParser::ChatOutputParser(ChatSyntax syntax, const ChatOutputOptions& options)
    : syntax_(syntax),
      options_(options),
      state_(syntax == ChatSyntax::kHarmony ? State::kHarmonyHeader
             : options.starts_in_reasoning  ? State::kReasoning
                                            : State::kStart),
      id_prefix_(fmt::format("call_{:08x}", std::random_device{}())) {}

std::vector<ChatDelta> ChatOutputParser::push(std::string_view text) {
  buf_.append(text);
  std::vector<ChatDelta> out;
  step(out, false);
  return out;
}

std::vector<ChatDelta> ChatOutputParser::finish() {
  std::vector<ChatDelta> out;
  step(out, true);
  return out;
}

void ChatOutputParser::emit(std::vector<ChatDelta>& out, ChatDelta::Kind kind,
                            std::string_view text) {
  std::string clean;
  if (kind != ChatDelta::Kind::kToolCall) {
    clean.assign(text);
    for (std::string_view m : stray_markers(syntax_))
      for (size_t at = clean.find(m); at != std::string::npos; at = clean.find(m, at))
        clean.erase(at, m.size());
    text = clean;
  }
  if (text.empty()) return;
  if (!out.empty() && out.back().kind == kind && kind != ChatDelta::Kind::kToolCall)
    out.back().text += text;
  else
    out.push_back({kind, std::string(text), "", "", 0});
}

bool ChatOutputParser::calls(std::vector<ChatDelta>& out, std::string_view block,
                             std::string_view raw) {
  auto parsed = parse_calls(syntax_, block);
  if (!parsed) {
    emit(out, ChatDelta::Kind::kContent, held_space_ + std::string(raw));
    held_space_.clear();
    return false;
  }
  held_space_.clear();
  for (Call& c : *parsed) {
    ChatDelta d{ChatDelta::Kind::kToolCall, c.args.dump(), c.id, c.name, n_calls_};
    if (d.id.empty()) d.id = fmt::format("{}_{}", id_prefix_, n_calls_);
    ++n_calls_;
    out.push_back(std::move(d));
  }
  return true;
}

void ChatOutputParser::step(std::vector<ChatDelta>& out, bool final) {
  const Block block = options_.tools ? tool_block(syntax_) : Block{};
  for (;;) {
    if (syntax_ == ChatSyntax::kHarmony) {
      if (!step_harmony(out, final)) return;
      continue;
    }
    switch (state_) {
      case State::kStart: {
        // Whitespace before a first <think> waits for what follows; whitespace after </think> or a
        // tool block is the template's separator, not content.
        const size_t ws = std::min(buf_.find_first_not_of(" \n\r\t"), buf_.size());
        const std::string_view rest = std::string_view(buf_).substr(ws);
        if (at_start_) {
          if (rest.starts_with(kThinkOpen)) {
            buf_.erase(0, ws + kThinkOpen.size());
            state_ = State::kReasoning;
            continue;
          }
          if (!final && kThinkOpen.starts_with(rest)) return;
        } else {
          buf_.erase(0, ws);
          if (buf_.empty() && !final) return;
        }
        state_ = State::kText;
        continue;
      }
      case State::kReasoning:
      case State::kText: {
        // Reasoning loses the newlines around it (templates add them), and text loses the
        // whitespace before a tool call; both are held back until something else follows.
        const bool reasoning = state_ == State::kReasoning;
        const ChatDelta::Kind kind =
            reasoning ? ChatDelta::Kind::kReasoning : ChatDelta::Kind::kContent;
        const std::string_view marker = reasoning ? kThinkClose : block.begin;
        if (reasoning && !reasoning_started_) {
          buf_.erase(0, std::min(buf_.find_first_not_of(" \n\r\t"), buf_.size()));
          if (buf_.empty() && !final) return;
          reasoning_started_ = true;
        }
        at_start_ = false;
        const size_t end = marker.empty() ? std::string::npos : buf_.find(marker);
        if (end != std::string::npos) {
          const std::string_view before = std::string_view(buf_).substr(0, end),
                                 kept = trim_end(before);
          emit(out, kind, kept);
          if (!reasoning)
            held_space_ = before.substr(kept.size());  // restored if the call does not parse
          buf_.erase(0, end + marker.size());
          state_ = reasoning ? State::kStart : State::kToolBlock;
          continue;
        }
        size_t n = buf_.size();
        if (!final) {
          n = releasable(buf_, std::array{marker}, stray_markers(syntax_));
          if (reasoning || !block.begin.empty())
            n = trim_end(std::string_view(buf_).substr(0, n)).size();
        }
        emit(out, kind, std::string_view(buf_).substr(0, n));
        buf_.erase(0, n);
        return;
      }
      case State::kToolBlock: {
        const size_t end = buf_.find(block.end);
        if (end == std::string::npos && !final) return;
        // A generation that ended inside the block (end of turn before the closing marker) is
        // parsed as far as it got.
        const std::string_view body = std::string_view(buf_).substr(0, std::min(end, buf_.size()));
        const std::string raw =
            std::string(block.begin) +
            buf_.substr(0, end == std::string::npos ? buf_.size() : end + block.end.size());
        const bool parsed = calls(out, body, raw);
        buf_.erase(0, end == std::string::npos ? buf_.size() : end + block.end.size());
        state_ = parsed ? State::kStart : State::kText;
        continue;
      }
      default:
        return;
    }
  }
}

// Harmony: messages are "<|channel|>NAME[ to=functions.F][ <|constrain|>json]<|message|>BODY" ended
// by
// <|end|>, <|call|> or <|return|>; a later message starts with "<|start|>assistant". The generation
// prompt already opened the first message's header.
bool ChatOutputParser::step_harmony(std::vector<ChatDelta>& out, bool final) {
  if (state_ == State::kHarmonyHeader) {
    const size_t m = buf_.find(kHarmonyMessage);
    if (m == std::string::npos) {
      if (final) buf_.clear();  // an unfinished header carries no text
      return false;
    }
    const std::string_view header = std::string_view(buf_).substr(0, m);
    std::string channel;
    if (const size_t c = header.find(kHarmonyChannel); c != std::string_view::npos) {
      std::string_view name = header.substr(c + kHarmonyChannel.size());
      channel = std::string(name.substr(0, std::min(name.find(' '), name.find('<'))));
    }
    if (const size_t to = header.find("to=functions.");
        to != std::string_view::npos && options_.tools) {
      std::string_view name = header.substr(to + 13);
      const size_t stop = std::min({name.find(' '), name.find('<'), name.size()});
      channel = "tool:" + std::string(name.substr(0, stop));
    }
    harmony_channel_ = channel;
    buf_.erase(0, m + kHarmonyMessage.size());
    state_ = State::kHarmonyBody;
    return true;
  }
  size_t end = std::string::npos, end_len = 0;
  for (std::string_view e : kHarmonyEnds)
    if (const size_t p = buf_.find(e); p < end) end = p, end_len = e.size();
  const bool tool = harmony_channel_.starts_with("tool:");
  if (tool) {
    if (end == std::string::npos && !final) return false;
    const std::string_view body = std::string_view(buf_).substr(0, std::min(end, buf_.size()));
    std::optional<json> args = args_object(body);
    if (args) {
      ChatDelta d{ChatDelta::Kind::kToolCall, args->dump(),
                  fmt::format("{}_{}", id_prefix_, n_calls_), harmony_channel_.substr(5), n_calls_};
      ++n_calls_;
      out.push_back(std::move(d));
    } else {
      emit(out, ChatDelta::Kind::kContent, body);
    }
  } else {
    const ChatDelta::Kind kind =
        harmony_channel_ == "analysis" ? ChatDelta::Kind::kReasoning : ChatDelta::Kind::kContent;
    if (end == std::string::npos) {
      const size_t n = final ? buf_.size() : releasable(buf_, kHarmonyEnds, stray_markers(syntax_));
      emit(out, kind, std::string_view(buf_).substr(0, n));
      buf_.erase(0, n);
      return false;
    }
    emit(out, kind, std::string_view(buf_).substr(0, end));
  }
  buf_.erase(0, end == std::string::npos ? buf_.size() : end + end_len);
  // "<|start|>assistant" opens the next header; the end markers leave it to follow.
  state_ = State::kHarmonyHeader;
  return end != std::string::npos;
}

void ChatOutput::add(const std::vector<ChatDelta>& deltas) {
  for (const ChatDelta& d : deltas) {
    if (d.kind == ChatDelta::Kind::kContent)
      content += d.text;
    else if (d.kind == ChatDelta::Kind::kReasoning)
      reasoning += d.text;
    else
      tool_calls.push_back(d);
  }
}

}  // namespace sluice
