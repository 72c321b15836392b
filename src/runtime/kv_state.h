// Saved KV state: the tokens a sequence holds, the logits after its last token and its KV rows,
// tagged with what they are only valid for (the model file's fingerprint and the cache layout).
// One format for `run/chat --session`, chat's /save and /load and the server's --kv-disk.
//
// File layout (little-endian): magic "SLUICEKV", u32 version, u32 zero; then strings (u64 length +
// bytes) model_id, kv_id and app_data; u64 n_tokens + i32 tokens; u64 n_logits + f32 logits; u64 n_bytes +
// KV bytes (KvCache::export_prefix); and a u64 FNV-1a checksum of everything before it. Reading
// checks every length against the bytes left, so a truncated, foreign or damaged file is an error
// naming what is wrong, never a crash or a huge allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kv/kv_cache.h"

namespace sluice {

struct KvState {
  std::string model_id;  // model_fingerprint() of the file the state was computed with
  std::string kv_id;     // KvCache::layout_id() of the cache it came from
  std::string app_data;  // the front end's own (chat: the conversation as JSON); may be empty
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // after the last token (n_vocab values); may be empty
  std::vector<std::byte> kv;
};

inline constexpr uint32_t kKvStateVersion = 1;

// The model file's identity: architecture, size, tensor names, types, shapes and offsets, and the
// first bytes of every tensor's data (another quantization or other weights change it).
std::string model_fingerprint(const gguf::File& file);

// Writes atomically (temporary file + rename); throws sluice::Error on I/O failure.
void write_kv_state(const std::string& path, const KvState& state);
// Throws sluice::Error naming the file and what is wrong with it.
KvState read_kv_state(const std::string& path);
// The same from bytes already read (`what` names them in messages).
KvState parse_kv_state(const std::vector<std::byte>& bytes, const std::string& what);

}  // namespace sluice
