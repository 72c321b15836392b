// The HTTP API's request and response shapes: OpenAI chat/completions and completions, and
// Anthropic messages. Parsing validates every field it reads and throws ApiError naming the field,
// so the routes never see a malformed request; formatting builds the JSON bodies and SSE events.
// Uses only the public API (sluice/sluice.h).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "sluice/chat_output.h"
#include "sluice/sluice.h"

namespace sluice::server {

// An error returned to the client: HTTP status plus the OpenAI error object
// {"error": {"message", "type", "param", "code"}} (Anthropic routes reshape it). The body takes
// `message`, not what(): a C string would end at a NUL the client sent.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string type, std::string param = {},
           std::string code = {})
      : std::runtime_error(message),
        message(std::move(message)),
        status(status),
        type(std::move(type)),
        param(std::move(param)),
        code(std::move(code)) {}
  std::string message;
  int status;
  std::string type, param, code;
};

enum class Api { kChat, kCompletion, kMessages };

struct ParsedRequest {
  Api api = Api::kChat;
  CompletionRequest request;  // prompt tokens and generation options
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string prompt_field;    // the field named when the prompt does not fit: messages or prompt
  ChatSyntax syntax = ChatSyntax::kPlain;  // chat and messages: how the reply is read back
  ChatOutputOptions output;
  int max_tool_calls = -1;  // parallel_tool_calls false: 1; else unbounded
  int n = 1;                // choices (OpenAI's n): requests sharing the prompt
  std::string rendered;     // chat and messages: the prompt text the chat template rendered
};

// Parses and validates a request body for `api`; tokenizes the prompt (chat: through the model's
// chat template). Throws ApiError (400) on malformed JSON, wrong types or values out of range.
ParsedRequest parse_request(Api api, const std::string& body, Engine& engine);

// Serializes for the wire; invalid UTF-8 (never expected) becomes U+FFFD instead of throwing.
inline std::string to_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Error bodies: OpenAI shape, or Anthropic's {"type":"error","error":{"type","message"}}.
nlohmann::json error_body(Api api, const ApiError& e);

// One reply shape (OpenAI, Anthropic, llama-server, Ollama): what a route sends for one choice of
// a completion, whole or as a stream. Stateful (parsers, open blocks): one per choice, one thread.
class Reply {
 public:
  virtual ~Reply() = default;
  virtual const char* stream_type() const { return "text/event-stream"; }
  virtual nlohmann::json full(const GenerateResult& r) = 0;  // non-streaming body
  virtual std::string stream_begin() = 0;
  virtual std::string stream_text(const std::string& text,
                                  const std::vector<TokenLogprob>& logprobs) = 0;
  // The stream's last events (a single choice).
  virtual std::string stream_end(const GenerateResult& r, bool include_usage) = 0;
  // Several choices in one stream (OpenAI's n): each choice's last event, then one close.
  virtual std::string stream_choice_end(const GenerateResult& r) { return stream_end(r, false); }
  virtual std::string stream_close(bool /*include_usage*/, int /*n_generated*/) { return {}; }
  virtual std::string stream_error(const ApiError& e) const = 0;
};

// Response formatting for one request. `id` and `created` are fixed per request. For chat and
// messages the generated text goes through the model family's ChatOutputParser, so reasoning and
// tool calls leave as their own fields (reasoning_content / thinking, tool_calls / tool_use).
// Stateful (the parser, Anthropic's open content block): one per request, used from one thread.
class ResponseFormat : public Reply {
 public:
  Api api = Api::kChat;
  int index = 0;            // the choice's index (OpenAI's n)
  std::string id, model;
  int64_t created = 0;
  int n_prompt_tokens = 0;  // the whole prompt (cached prefix included), for usage
  ChatSyntax syntax = ChatSyntax::kPlain;
  ChatOutputOptions output;
  int max_tool_calls = -1;
  const Engine* engine = nullptr;  // token texts for logprobs (GenerateOptions::logprobs ≥ 0)

  nlohmann::json full(const GenerateResult& r) override;  // non-streaming body
  // SSE events, each a complete "data: ...\n\n" (or "event: ...\ndata: ...\n\n") block.
  std::string stream_begin() override;
  std::string stream_text(const std::string& text,
                          const std::vector<TokenLogprob>& logprobs) override;
  std::string stream_end(const GenerateResult& r, bool include_usage) override;
  std::string stream_choice_end(const GenerateResult& r) override;
  std::string stream_close(bool include_usage, int n_generated) override;
  std::string stream_error(const ApiError& e) const override;
  // Bodies of several choices of one request as one: their choices, usage summed.
  static nlohmann::json merge(const std::vector<nlohmann::json>& bodies);

 private:
  bool parsed() const { return api != Api::kCompletion; }
  std::vector<ChatDelta> read(const std::string& text, bool final);
  nlohmann::json logprobs_json(const std::vector<TokenLogprob>& lps);
  std::string chat_chunk(nlohmann::json delta, nlohmann::json logprobs) const;
  std::string anthropic_block(const ChatDelta& d);
  std::string anthropic_close();
  std::string stream_deltas(const std::vector<ChatDelta>& deltas, nlohmann::json logprobs);

  std::shared_ptr<ChatOutputParser> parser_;
  int n_calls_ = 0;  // tool calls passed on (max_tool_calls drops the rest)
  int block_ = -1;   // Anthropic: index of the open content block, −1 when none
  int next_block_ = 0;
  ChatDelta::Kind block_kind_ = ChatDelta::Kind::kContent;
  size_t text_offset_ = 0;  // completions logprobs: bytes of text before the next token
};

}  // namespace sluice::server
