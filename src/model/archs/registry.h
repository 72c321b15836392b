// Registry of architecture loaders, one per archs/<family>.cpp, and the loader that dispatches on
// it. A plain table (not static self-registration) because libsluice is a static library and
// unreferenced registrars vanish; the families' loaders are declared beside the table
// (registry.cpp), so adding one touches its own file and that one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace sluice {

struct ArchEntry {
  const char* name;  // general.architecture
  std::unique_ptr<Model> (*load)(const gguf::File& file);
};

const std::vector<ArchEntry>& arch_registry();

// Loads the architecture named by general.architecture; throws naming unsupported ones.
std::unique_ptr<Model> load_model(const gguf::File& file);
std::vector<std::string> supported_architectures();

}  // namespace sluice
