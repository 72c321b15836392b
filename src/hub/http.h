// The HTTP client (libcurl) that remote GGUF headers, the hub's file listing and downloads go
// through: one request at a time per HttpClient, redirects followed, every response's headers
// kept so that the hub's X-Linked-Etag / X-Linked-Size on a redirect are visible after it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::hub {

struct HttpRequest {
  std::string url;
  bool head = false;
  std::optional<std::pair<uint64_t, uint64_t>> range;  // bytes [first, last], inclusive
  // Receives the body as it arrives (return false to stop the transfer); without it the body is
  // collected in HttpResponse::body.
  std::function<bool(const char*, size_t)> sink;
  long low_speed_seconds = 30;  // abort when under 1 byte/s for this long (a stalled peer)
};

struct HttpResponse {
  long status = 0;
  std::string body;
  std::string error;     // the transfer's error (a dropped connection), empty when complete
  bool stopped = false;  // the sink asked to stop
  // Headers of each response in the redirect chain, names lower-cased.
  std::vector<std::map<std::string, std::string>> headers;
  // The last response's value of `name` that has one (lower-case name), else "".
  std::string header(std::string_view name) const;
};

class HttpClient {
 public:
  // `token`: sent as "Authorization: Bearer TOKEN" (the hub's HF_TOKEN); empty for none.
  explicit HttpClient(std::string token = "");
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Fails (sluice::Error) only when no response came at all (no such host, refused); a transfer
  // cut after the status line comes back with `error` set.
  HttpResponse send(const HttpRequest& req);

 private:
  std::string token_;
  void* curl_;  // CURL*, reused so that connections are kept alive
};

// "bytes 0-99/1234" → 1234; nullopt when absent or malformed.
std::optional<uint64_t> content_range_total(const std::string& value);

}  // namespace sluice::hub
