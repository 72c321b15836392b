// The model a command names on the Hugging Face hub: -hf/--hf-repo ORG/NAME[:QUANT] and
// --hf-file NAME (llama.cpp's spellings), resolved through src/hub into a local file, or for
// `inspect` into a header read remotely with range requests.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "cli/options.h"
#include "gguf/gguf.h"
#include "hub/remote_source.h"

namespace sluice::cli {

// Adds -hf (--hf-repo) and --hf-file; they exclude -m and the MODEL argument when those exist.
void add_hub_flags(CLI::App& app, HubFlags& h);

// The local path of the hub model (its first part), downloaded into the cache when missing.
std::string hub_model_path(const HubFlags& h, int connections = 4);

// A model's header for inspect: `path` (a local file or an http(s) URL) or the hub's file when
// -hf was given; a hub file is read from the cache when it is there, else remotely.
struct InspectedModel {
  std::unique_ptr<gguf::File> file;
  bool remote = false;
  // What the remote header cost; shared with the file's sources, as is the client they read through.
  std::shared_ptr<hub::FetchStats> fetched = std::make_shared<hub::FetchStats>();
  std::shared_ptr<hub::HttpClient> client;
};
InspectedModel open_inspected(const std::string& path, const HubFlags& h);

}  // namespace sluice::cli
