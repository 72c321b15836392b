// Hub environment, file listing and quant selection (hub/hub.h).
#include "hub/hub.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <regex>
#include <set>

#include "core/error.h"
#include "gguf/gguf.h"
#include "hub/remote_source.h"

namespace sluice::hub {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

bool is_gguf(const std::string& path) {
  const std::string u = upper(path);
  return u.ends_with(".GGUF") && u.find("MMPROJ") == std::string::npos;
}

// "-00002-of-00003.gguf" parts other than the first.
bool is_later_part(const std::string& path) {
  static const std::regex later(R"(-(\d{5})-of-\d{5}\.gguf$)", std::regex::icase);
  std::smatch m;
  return std::regex_search(path, m, later) && m[1] != "00001";
}

// The parts of the split model whose first part is `first` (just `first` when not split).
std::vector<RepoFile> with_parts(const std::vector<RepoFile>& files, const RepoFile& first) {
  static const std::regex split(R"(-00001-of-(\d{5})\.gguf$)", std::regex::icase);
  std::smatch m;
  if (!std::regex_search(first.path, m, split)) return {first};
  const int count = std::stoi(m[1]);
  std::vector<RepoFile> out{first};
  for (int k = 2; k <= count; ++k) {
    const std::string name = gguf::split_part_path(first.path, k, count).value();
    const auto it = std::find_if(files.begin(), files.end(), [&](const RepoFile& f) { return f.path == name; });
    if (it == files.end()) fail("{} is part 1 of {}, but the repository lacks {}", first.path, count, name);
    out.push_back(*it);
  }
  return out;
}

// The URL of `Link: <URL>; rel="next"`, else "".
std::string next_page(const std::string& link) {
  static const std::regex next(R"re(<([^>]+)>\s*;\s*rel="?next"?)re");
  std::smatch m;
  return std::regex_search(link, m, next) ? m[1].str() : std::string();
}

void append_listing(const std::string& url, const std::string& body, std::vector<RepoFile>& out);

}  // namespace

HubConfig HubConfig::from_env() {
  HubConfig c;
  if (const std::string e = env("HF_ENDPOINT"); !e.empty()) c.endpoint = e;
  while (c.endpoint.ends_with('/')) c.endpoint.pop_back();
  c.token = env("HF_TOKEN");
  const std::string off = upper(env("HF_HUB_OFFLINE"));
  c.offline = off == "1" || off == "TRUE" || off == "YES" || off == "ON";
  if (const std::string d = env("HF_HUB_CACHE"); !d.empty()) {
    c.cache_dir = d;
  } else if (const std::string h = env("HF_HOME"); !h.empty()) {
    c.cache_dir = std::filesystem::path(h) / "hub";
  } else {
    const std::string xdg = env("XDG_CACHE_HOME");
    c.cache_dir = std::filesystem::path(!xdg.empty() ? xdg : env("HOME") + "/.cache") / "huggingface" / "hub";
  }
  return c;
}

RepoRef RepoRef::parse(const std::string& text) {
  RepoRef r;
  const size_t colon = text.find(':');
  r.repo = text.substr(0, colon);
  if (colon != std::string::npos) r.quant = text.substr(colon + 1);
  static const std::regex name(R"([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)");
  if (!std::regex_match(r.repo, name) || r.repo.find("..") != std::string::npos)
    fail("'{}' is not a hub repository: expected ORG/NAME[:QUANT]", text);
  if (colon != std::string::npos && r.quant.empty()) fail("'{}': the quant after ':' is empty", text);
  return r;
}

std::string resolve_url(const HubConfig& cfg, const std::string& repo, const std::string& path,
                        const std::string& revision) {
  return fmt::format("{}/{}/resolve/{}/{}", cfg.endpoint, repo, revision, path);
}

std::vector<RepoFile> list_files(HttpClient& client, const HubConfig& cfg, const std::string& repo,
                                 const std::string& revision) {
  std::vector<RepoFile> out;
  // The hub pages long listings: each page names the next in `Link: <URL>; rel="next"`.
  for (std::string url = fmt::format("{}/api/models/{}/tree/{}?recursive=true", cfg.endpoint, repo, revision);
       !url.empty();) {
    HttpRequest req;
    req.url = url;
    const HttpResponse resp = client.send(req);
    if (resp.status != 200) fail_status(req.url, resp.status);
    url = next_page(resp.header("link"));
    append_listing(req.url, resp.body, out);
  }
  return out;
}

namespace {

void append_listing(const std::string& url, const std::string& body, std::vector<RepoFile>& out) {
  try {
    for (const auto& e : nlohmann::json::parse(body)) {
      if (e.value("type", "") != "file") continue;
      RepoFile f;
      f.path = e.at("path").get<std::string>();
      f.size = e.value("size", uint64_t{0});
      if (e.contains("lfs") && e["lfs"].is_object()) {
        f.sha256 = e["lfs"].value("oid", "");
        f.size = e["lfs"].value("size", f.size);
      }
      out.push_back(std::move(f));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: the file listing is not the hub's JSON: {}", url, e.what());
  }
}

}  // namespace

std::string quant_of(const std::string& path) {
  static const std::regex tag(R"(^(I?Q[1-8](_[A-Z0-9]+)*|T?Q[12]_0|F16|BF16|F32|MXFP4(_MOE)?)$)");
  std::string stem = path.substr(path.rfind('/') + 1);
  static const std::regex tail(R"((-\d{5}-of-\d{5})?\.gguf$)", std::regex::icase);
  stem = std::regex_replace(stem, tail, "");
  std::string found;
  size_t start = 0;
  for (size_t i = 0; i <= stem.size(); ++i) {
    if (i == stem.size() || stem[i] == '-' || stem[i] == '.') {
      const std::string token = upper(stem.substr(start, i - start));
      if (std::regex_match(token, tag)) found = token;  // the last one: "Q8_0-Q4_K_M" names Q4_K_M
      start = i + 1;
    }
  }
  return found;
}

std::vector<RepoFile> select_gguf(const std::vector<RepoFile>& files, const RepoRef& ref, const std::string& file) {
  if (!file.empty()) {
    const auto it = std::find_if(files.begin(), files.end(), [&](const RepoFile& f) { return f.path == file; });
    if (it == files.end()) fail("{} has no file '{}'", ref.repo, file);
    return with_parts(files, *it);
  }
  std::set<std::string> quants;
  std::vector<const RepoFile*> firsts;
  for (const auto& f : files)
    if (is_gguf(f.path) && !is_later_part(f.path)) {
      firsts.push_back(&f);
      if (const std::string q = quant_of(f.path); !q.empty()) quants.insert(q);
    }
  if (firsts.empty()) fail("{} has no GGUF files", ref.repo);
  const std::string list = quants.empty() ? std::string("none tagged") : fmt::format("{}", fmt::join(quants, ", "));
  std::string want = upper(ref.quant);
  if (want.empty()) {
    if (firsts.size() == 1) return with_parts(files, *firsts[0]);
    if (quants.size() != 1)
      fail("{} has several GGUFs; name one as {}:QUANT (its quants: {}) or with --hf-file", ref.repo, ref.repo, list);
    want = *quants.begin();
  }
  for (const RepoFile* f : firsts)
    if (quant_of(f->path) == want) return with_parts(files, *f);
  fail("{} has no {} GGUF; its quants: {}", ref.repo, ref.quant.empty() ? want : ref.quant, list);
}

}  // namespace sluice::hub
