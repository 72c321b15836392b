// The web page's files (src/server/web), embedded into the binary at build time by
// cmake/embed_web.cmake: served by web_routes.cpp, never read from disk at run time.
#pragma once

#include <cstddef>
#include <vector>

namespace sluice::server {

struct WebAsset {
  const char* path;  // "/web/app.js"
  const char* content_type;
  const unsigned char* data;
  size_t size;
};

const std::vector<WebAsset>& web_assets();

}  // namespace sluice::server
