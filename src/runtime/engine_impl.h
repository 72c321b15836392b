// Engine internals shared by the runtime's translation units (sessions, the batch scheduler).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "core/thread_pool.h"
#include "experts/expert_store.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "runtime/grammar_cache.h"
#include "runtime/request.h"
#include "runtime/stage_link.h"
#include "sluice/sluice.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

class RoutingTraceRecorder;  // runtime/routing_taps.h

struct Engine::Impl {
  EngineOptions options;
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<gguf::File> mtp_file;  // EngineOptions::mtp_path; the model views its tensors
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<GrammarCache> grammars;  // GenerateOptions::grammar, compiled for the vocabulary
  std::unique_ptr<ThreadPool> pool;
  // Owned here and passed to every forward call. One user at a time: a running Scheduler holds
  // it for its whole life, a Session for each evaluation; a second user fails instead of racing
  // on the cache (and the thread pool).
  std::unique_ptr<ExpertStore> experts;
  std::atomic<bool> experts_busy{false};
  // EngineOptions::routing_trace / replay_routing; the model calls it during forward passes.
  std::unique_ptr<RoutingTap> routing;
  const RoutingTraceRecorder* recorder = nullptr;  // `routing` when it writes a trace
  ModelInfo info;
  std::shared_ptr<StageLink> link;  // pipeline stages; null: the whole model here
  int n_ctx = 0;  // per-session context
  KvCacheConfig kv_config;  // stored types and the step bound (engine_kv_config)
  std::unique_ptr<KvCache> make_kv_cache(int ctx) const { return model->make_kv_cache(ctx, kv_config); }
  // model_fingerprint of the file, computed on first use (it reads a few bytes of every tensor).
  const std::string& model_id();
  std::once_flag model_id_once;
  std::string model_id_value;
  double load_seconds = 0;
};

Engine::Impl& engine_impl(Engine& engine);

// Exclusive use of an engine's expert store and pool for a scope; throws sluice::Error naming
// `user` when another user holds them.
class ExpertsLease {
 public:
  ExpertsLease(Engine::Impl& engine, const char* user);
  ~ExpertsLease() { busy_.store(false); }
  ExpertsLease(const ExpertsLease&) = delete;
  ExpertsLease& operator=(const ExpertsLease&) = delete;

 private:
  std::atomic<bool>& busy_;
};

}  // namespace sluice
