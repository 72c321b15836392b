// Engine internals shared by the runtime's translation units (sessions, the batch scheduler).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "sluice/sluice.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

struct Engine::Impl {
  EngineOptions options;
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ThreadPool> pool;
  ModelInfo info;
  int n_ctx = 0;  // per-session context
  double load_seconds = 0;
};

// Withholds generated text that could be the start of a stop string, and reports a match.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Adds text; returns what is safe to emit (never part of a stop string).
  std::string push(const std::string& text);
  // End of generation: returns any withheld text.
  std::string flush(const std::string& text);
  bool matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool matched_ = false;
};

}  // namespace sluice
