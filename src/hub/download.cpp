// Downloads into the hub cache (hub/download.h).
#include "hub/download.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/units.h"
#include "hub/cache.h"
#include "hub/remote_source.h"

namespace sluice::hub {

namespace fs = std::filesystem;

namespace {

// Files smaller than this come over one connection: more would only add round trips.
constexpr uint64_t kMinSplit = 16 << 20;
// A connection cut this many times in a row without a byte arriving fails the download.
constexpr int kMaxRetries = 5;

// A byte range of the file that one connection fetches; `done` advances as bytes are written.
struct Segment {
  uint64_t begin = 0, end = 0;
  std::atomic<uint64_t> done{0};
};

// What one file needs: where it comes from, what it must hash to, where it goes.
struct Wanted {
  RepoFile file;
  std::string url, sha256, commit;
  uint64_t size = 0;
  fs::path blob;
  bool have = false;
  uint64_t partial = 0;  // bytes of an interrupted download already on disk
};

std::string strip_etag(std::string e) {
  if (e.starts_with("W/")) e.erase(0, 2);
  e.erase(std::remove(e.begin(), e.end(), '"'), e.end());
  return e;
}

// The file's sha256, computed in order as its bytes land (from the page cache, while the
// connections still run), so verifying costs no second pass over the file at the end.
class InOrderHash {
 public:
  explicit InOrderHash(int fd) : fd_(fd), ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free), buf_(4 << 20) {
    EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr);
  }
  // Hashes [hashed, end): bytes the caller knows are on disk.
  void advance_to(uint64_t end) {
    while (hashed_ < end) {
      const ssize_t n = pread(fd_, buf_.data(), static_cast<size_t>(std::min<uint64_t>(buf_.size(), end - hashed_)),
                              static_cast<off_t>(hashed_));
      if (n <= 0) fail("cannot read back the download: {}", n < 0 ? std::strerror(errno) : "end of file");
      EVP_DigestUpdate(ctx_.get(), buf_.data(), static_cast<size_t>(n));
      hashed_ += static_cast<uint64_t>(n);
    }
  }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), md, &n);
    std::string out;
    for (unsigned int i = 0; i < n; ++i) out += fmt::format("{:02x}", md[i]);
    return out;
  }

 private:
  int fd_;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
  std::vector<char> buf_;
  uint64_t hashed_ = 0;
};

fs::path incomplete(const fs::path& blob) { return blob.string() + ".incomplete"; }
// The ranges still missing from an interrupted download: "begin done end" lines.
fs::path ranges_file(const fs::path& blob) { return blob.string() + ".incomplete.ranges"; }

// The segments of an interrupted download from its ranges file, else a prefix written by one
// stream (ours or another tool's) as one segment from its end; empty when nothing was fetched.
std::vector<std::pair<uint64_t, uint64_t>> missing_ranges(const fs::path& blob, uint64_t size, uint64_t* have) {
  std::error_code ec;
  const uint64_t on_disk = fs::exists(incomplete(blob), ec) ? fs::file_size(incomplete(blob), ec) : 0;
  std::vector<std::pair<uint64_t, uint64_t>> out;
  *have = 0;
  if (std::ifstream in(ranges_file(blob)); in && on_disk == size) {
    uint64_t b, d, e, missing = 0;
    while (in >> b >> d >> e)
      if (b <= d && d <= e && e <= size) {
        if (d < e) out.emplace_back(d, e);
        missing += e - d;
      }
    if (!out.empty() || missing == 0) {
      *have = size - std::min(size, missing);
      return out;
    }
  }
  const uint64_t prefix = std::min(on_disk, size);
  *have = prefix;
  out.emplace_back(prefix, size);
  return out;
}

void save_ranges(const fs::path& blob, const std::vector<std::unique_ptr<Segment>>& segs) {
  std::string text;
  for (const auto& s : segs) text += fmt::format("{} {} {}\n", s->begin, s->done.load(), s->end);
  AtomicFile f(ranges_file(blob).string());
  f.bytes(text.data(), text.size());
  f.close();
}

// Fetches one segment over its own connection, resuming with Range after a cut connection.
void fetch_segment(const std::string& url, const std::string& token, int fd, Segment& seg, const std::atomic<bool>& stop) {
  HttpClient client(token);
  int failures = 0;
  while (seg.done < seg.end && !stop) {
    const uint64_t before = seg.done;
    HttpRequest req;
    req.url = url;
    req.range = std::make_pair(seg.done.load(), seg.end - 1);
    std::string write_error;
    req.sink = [&](const char* p, size_t n) {
      const uint64_t room = seg.end - seg.done;
      n = static_cast<size_t>(std::min<uint64_t>(n, room));
      for (size_t off = 0; off < n;) {
        const ssize_t w = pwrite(fd, p + off, n - off, static_cast<off_t>(seg.done + off));
        if (w < 0) {
          write_error = std::strerror(errno);
          return false;
        }
        off += static_cast<size_t>(w);
      }
      seg.done += n;
      return !stop && seg.done < seg.end;
    };
    const HttpResponse resp = client.send(req);
    if (!write_error.empty()) fail("writing the download: {}", write_error);
    if (resp.status == 200 && before != 0) fail("{}: the server ignored the range request (answered 200, not 206)", url);
    if (resp.status != 200 && resp.status != 206) fail_status(url, resp.status);
    if (seg.done >= seg.end || stop) break;
    // Cut short: try again from where it stopped, giving up only when nothing arrives.
    failures = seg.done > before ? 0 : failures + 1;
    if (failures >= kMaxRetries) fail("{}: {} (tried {} times)", url, resp.error.empty() ? "connection closed early" : resp.error, failures);
    SLUICE_LOG_INFO("{}: connection cut at byte {} ({}); resuming", url, seg.done.load(),
                    resp.error.empty() ? "closed early" : resp.error);
    std::this_thread::sleep_for(std::chrono::milliseconds(200 * failures));
  }
}

// Fetches `w` into its .incomplete file, checks its sha256 and renames it to the blob.
uint64_t download(const Wanted& w, const std::string& token, int connections) {
  const fs::path part = incomplete(w.blob);
  uint64_t have = 0;
  const auto missing = missing_ranges(w.blob, w.size, &have);
  const int fd = ::open(part.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot write {}: {}", part.string(), std::strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(w.size)) != 0) {
    close(fd);
    fail("cannot size {} to {} bytes: {}", part.string(), w.size, std::strerror(errno));
  }
  // Each missing range is cut into pieces so that `connections` of them run at once.
  std::vector<std::unique_ptr<Segment>> segs;
  uint64_t left = 0;
  for (const auto& [b, e] : missing) left += e - b;
  const uint64_t piece = std::max<uint64_t>(kMinSplit, (left + connections - 1) / std::max(1, connections));
  for (const auto& [b, e] : missing)
    for (uint64_t at = b; at < e; at += piece) {
      auto s = std::make_unique<Segment>();
      s->begin = at;
      s->end = std::min(e, at + piece);
      s->done = at;
      segs.push_back(std::move(s));
    }
  std::atomic<bool> stop{false};
  std::exception_ptr error;
  std::mutex error_mu;
  std::atomic<size_t> next{0};
  const size_t n_workers = std::min<size_t>(segs.size(), static_cast<size_t>(std::max(1, connections)));
  std::vector<std::thread> workers;
  std::atomic<size_t> running{n_workers};
  for (size_t i = 0; i < n_workers; ++i)
    workers.emplace_back([&] {
      try {
        for (size_t k; (k = next++) < segs.size() && !stop;) fetch_segment(w.url, token, fd, *segs[k], stop);
      } catch (...) {
        std::lock_guard lock(error_mu);
        if (!error) error = std::current_exception();
        stop = true;
      }
      --running;
    });
  // Bytes outside the segments were on disk already; below the lowest unfinished segment's
  // `done` everything is there.
  InOrderHash hash(fd);
  const auto frontier = [&] {
    uint64_t f = w.size;
    for (const auto& s : segs)
      if (const uint64_t d = s->done; d < s->end) f = std::min(f, d);
    return f;
  };
  {
    Progress progress(fmt::format("downloading {}", w.file.path), w.size, "B");
    auto last_save = std::chrono::steady_clock::now();
    const auto done = [&] {
      uint64_t d = have;
      for (const auto& s : segs) d += s->done - s->begin;
      return d;
    };
    while (running > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      progress.update(done());
      if (!stop) {
        try {
          hash.advance_to(frontier());
        } catch (...) {
          std::lock_guard lock(error_mu);
          if (!error) error = std::current_exception();
          stop = true;
        }
      }
      if (std::chrono::steady_clock::now() - last_save > std::chrono::seconds(1)) {
        save_ranges(w.blob, segs);
        last_save = std::chrono::steady_clock::now();
      }
    }
    progress.update(done());  // a download shorter than one poll still reports its rate
  }
  for (auto& t : workers) t.join();
  uint64_t fetched = 0;
  for (const auto& s : segs) fetched += s->done - s->begin;
  std::string got;
  if (!error) {
    hash.advance_to(w.size);
    got = hash.hex();
  }
  const bool synced = fsync(fd) == 0;
  close(fd);
  if (error) {
    save_ranges(w.blob, segs);
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      fail("{}; {} of {} are kept and a new run resumes from there", e.what(), format_bytes(have + fetched),
           format_bytes(w.size));
    }
  }
  if (!synced) fail("cannot flush {}: {}", part.string(), std::strerror(errno));
  std::error_code ec;
  fs::remove(ranges_file(w.blob), ec);
  if (got != w.sha256) {
    fs::remove(part, ec);
    fail("{}: sha256 {} differs from the hub's {} (its LFS id): the download was removed", w.file.path, got, w.sha256);
  }
  fs::rename(part, w.blob, ec);
  if (ec) fail("cannot move {} into place: {}", part.string(), ec.message());
  return fetched;
}

}  // namespace

std::string sha256_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}", path.string());
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  std::vector<char> buf(4 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &n);
  std::string hex;
  for (unsigned int i = 0; i < n; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

std::vector<fs::path> fetch_model(const HubConfig& cfg, const RepoRef& ref, const std::string& file,
                                  DownloadStats* stats, int connections) {
  const RepoCache cache(cfg.cache_dir, ref.repo);
  std::vector<fs::path> paths;
  if (cfg.offline) {
    const auto files = cache.snapshot_files();
    if (files.empty())
      fail("HF_HUB_OFFLINE is set and {} is not in the cache ({})", ref.repo, cache.dir().string());
    for (const RepoFile& f : select_gguf(files, ref, file)) paths.push_back(cache.snapshot(*cache.ref()) / f.path);
    if (stats) stats->cached += static_cast<int>(paths.size());
    return paths;
  }
  HttpClient client(cfg.token);
  std::vector<Wanted> wanted;
  for (const RepoFile& f : select_gguf(list_files(client, cfg, ref.repo), ref, file)) {
    Wanted w;
    w.file = f;
    w.url = resolve_url(cfg, ref.repo, f.path);
    HttpRequest head;
    head.url = w.url;
    head.head = true;
    const HttpResponse resp = client.send(head);
    if (resp.status != 200) fail_status(w.url, resp.status);
    w.sha256 = strip_etag(resp.header("x-linked-etag"));
    if (w.sha256.empty()) w.sha256 = f.sha256;
    if (w.sha256.size() != 64) fail("{}: the hub gives no sha256 for it (not an LFS file)", w.url);
    const std::string linked = resp.header("x-linked-size");
    w.size = linked.empty() ? f.size : std::stoull(linked);
    w.commit = resp.header("x-repo-commit");
    if (w.commit.empty()) fail("{}: the hub's answer has no X-Repo-Commit", w.url);
    w.blob = cache.blob(w.sha256);
    std::error_code ec;
    w.have = fs::exists(w.blob, ec) && fs::file_size(w.blob, ec) == w.size;
    if (!w.have) missing_ranges(w.blob, w.size, &w.partial);
    wanted.push_back(std::move(w));
  }
  // Free space first, from the announced sizes: failing after gigabytes helps nobody.
  uint64_t need = 0;
  for (const Wanted& w : wanted)
    if (!w.have) need += w.size - w.partial;
  fs::create_directories(cache.dir() / "blobs");
  if (need > 0) {
    const fs::space_info space = fs::space(cache.dir() / "blobs");
    if (need > space.available)
      fail("{} needs {} more on disk but {} has {} free (set HF_HUB_CACHE to another disk)", ref.repo,
           format_bytes(need), cache.dir().string(), format_bytes(space.available));
  }
  const auto start = std::chrono::steady_clock::now();
  for (const Wanted& w : wanted) {
    if (w.have) {
      if (stats) ++stats->cached;
      continue;
    }
    const uint64_t got = download(w, cfg.token, connections);
    if (stats) {
      stats->bytes += got;
      ++stats->downloaded;
    }
  }
  if (stats) stats->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const Wanted& w : wanted) paths.push_back(cache.link(w.commit, w.file.path, w.sha256));
  cache.set_ref(wanted.front().commit);
  return paths;
}

}  // namespace sluice::hub
