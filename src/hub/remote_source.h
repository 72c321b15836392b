// A GGUF part on an HTTP server read as a gguf::ByteSource: the header is fetched with range
// requests as the parser reaches it (a first block, then doubling), never the tensor data, so
// `sluice inspect URL` sizes a 100 GB model from a few megabytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gguf/source.h"
#include "hub/http.h"

namespace sluice::hub {

// What the remote sources of one file fetched, all parts together.
struct FetchStats {
  uint64_t bytes = 0;
  uint64_t requests = 0;
};

// Throws sluice::Error when the server refuses (401 names HF_TOKEN), lacks the file or ignores
// Range. `stats` outlives the source.
std::unique_ptr<gguf::ByteSource> open_remote(HttpClient& client, const std::string& url, FetchStats& stats);

// The error for a response that is not the file: 401/403 name HF_TOKEN, 404 the URL.
[[noreturn]] void fail_status(const std::string& url, long status);

bool is_url(const std::string& s);

}  // namespace sluice::hub
