// libcurl behind HttpClient.
#include "hub/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <mutex>

#include "core/error.h"

namespace sluice::hub {

namespace {

struct Transfer {
  const HttpRequest* req;
  HttpResponse* resp;
};

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  if (t->req->sink) {
    if (!t->req->sink(data, bytes)) {
      t->resp->stopped = true;
      return 0;  // curl ends the transfer with CURLE_WRITE_ERROR
    }
  } else {
    t->resp->body.append(data, bytes);
  }
  return bytes;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string line(data, size * n);
  if (line.starts_with("HTTP/")) {
    t->resp->headers.emplace_back();
  } else if (const size_t colon = line.find(':'); colon != std::string::npos && !t->resp->headers.empty()) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    const auto trim = [](unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
    while (!value.empty() && trim(value.back())) value.pop_back();
    value.erase(0, std::find_if_not(value.begin(), value.end(), trim) - value.begin());
    t->resp->headers.back()[name] = value;
  }
  return size * n;
}

}  // namespace

std::string HttpResponse::header(std::string_view name) const {
  for (auto it = headers.rbegin(); it != headers.rend(); ++it)
    if (const auto f = it->find(std::string(name)); f != it->end()) return f->second;
  return "";
}

std::optional<uint64_t> content_range_total(const std::string& value) {
  const size_t slash = value.rfind('/');
  if (!value.starts_with("bytes ") || slash == std::string::npos || slash + 1 >= value.size()) return std::nullopt;
  uint64_t total = 0;
  for (size_t i = slash + 1; i < value.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(value[i]))) return std::nullopt;
    total = total * 10 + static_cast<uint64_t>(value[i] - '0');
  }
  return total;
}

HttpClient::HttpClient(std::string token) : token_(std::move(token)) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  curl_ = curl_easy_init();
  if (!curl_) fail("cannot start libcurl");
}

HttpClient::~HttpClient() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

HttpResponse HttpClient::send(const HttpRequest& req) {
  CURL* c = static_cast<CURL*>(curl_);
  curl_easy_reset(c);
  HttpResponse resp;
  Transfer t{&req, &resp};
  curl_easy_setopt(c, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, req.low_speed_seconds);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "sluice");
  if (req.head) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  std::string range;
  if (req.range) {
    range = std::to_string(req.range->first) + "-" + std::to_string(req.range->second);
    curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
  }
  curl_slist* headers = nullptr;
  if (!token_.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + token_).c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  const CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(headers);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
  if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && resp.stopped)) {
    if (resp.status == 0) fail("{}: {}", req.url, curl_easy_strerror(rc));
    resp.error = curl_easy_strerror(rc);
  }
  return resp;
}

}  // namespace sluice::hub
