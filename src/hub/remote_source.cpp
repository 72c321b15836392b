// HTTP range reads of a GGUF header (hub/remote_source.h).
#include "hub/remote_source.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace sluice::hub {

namespace {

// A GGUF header is its metadata (the vocabulary dominates: a few MB for 150k tokens) and the
// tensor infos; 256 KiB covers small ones in one request, larger ones take a few more.
constexpr uint64_t kFirstBlock = 256 << 10;

class RemoteSource final : public gguf::ByteSource {
 public:
  RemoteSource(HttpClient& client, std::string url, FetchStats& stats)
      : client_(client), url_(std::move(url)), stats_(stats) {
    fetch(kFirstBlock, true);
  }
  const std::string& name() const override { return url_; }
  uint64_t size() const override { return size_; }
  const std::byte* bytes(uint64_t offset, uint64_t n) override {
    if (offset + n > buf_.size()) fetch(std::max(offset + n, 2 * static_cast<uint64_t>(buf_.size())), false);
    return buf_.data() + offset;
  }

 private:
  // Extends the fetched prefix to `end` bytes (at most the file).
  void fetch(uint64_t end, bool first) {
    const uint64_t from = buf_.size();
    if (!first) end = std::min(end, size_);
    HttpRequest req;
    req.url = url_;
    req.range = std::make_pair(from, end - 1);
    uint64_t got = 0;
    const uint64_t want = end - from;
    req.sink = [&](const char* p, size_t n) {
      // A server that ignores Range sends the whole file: take what was asked and stop.
      const size_t keep = static_cast<size_t>(std::min<uint64_t>(n, want - got));
      const auto* b = reinterpret_cast<const std::byte*>(p);
      buf_.insert(buf_.end(), b, b + keep);
      got += keep;
      return got < want || keep == n;  // stop only a server sending more than asked
    };
    const HttpResponse resp = client_.send(req);
    stats_.requests += 1;
    stats_.bytes += got;
    if (resp.status != 206 && resp.status != 200) fail_status(url_, resp.status);
    if (resp.status == 200) fail("{}: the server ignored the range request (answered 200, not 206)", url_);
    if (!resp.error.empty()) fail("{}: {}", url_, resp.error);
    if (first) {
      const auto total = content_range_total(resp.header("content-range"));
      if (!total) fail("{}: no total size in Content-Range '{}'", url_, resp.header("content-range"));
      size_ = *total;
    }
    if (got != std::min(end, size_) - from)
      fail("{}: asked for bytes {}-{} and got {}", url_, from, end - 1, got);
  }

  HttpClient& client_;
  std::string url_;
  FetchStats& stats_;
  uint64_t size_ = 0;
  std::vector<std::byte> buf_;
};

}  // namespace

bool is_url(const std::string& s) { return s.starts_with("http://") || s.starts_with("https://"); }

void fail_status(const std::string& url, long status) {
  if (status == 401 || status == 403)
    fail("{}: HTTP {}: the repository is private or gated: set HF_TOKEN to a token that may read it", url, status);
  if (status == 404) fail("{}: HTTP 404: no such file", url);
  fail("{}: HTTP {}", url, status);
}

std::unique_ptr<gguf::ByteSource> open_remote(HttpClient& client, const std::string& url, FetchStats& stats) {
  return std::make_unique<RemoteSource>(client, url, stats);
}

}  // namespace sluice::hub
