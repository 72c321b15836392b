// Eviction policies of the streaming expert cache: one interface, three rules. The store tells a
// policy what happens (a layer request starts, an expert is requested, a slot is filled or used)
// and asks it for each candidate slot's keep value; it evicts the candidate valued least. Which
// slots are candidates (unpinned, loaded, of the needed size) is the store's business.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sluice/types.h"

namespace sluice {

// Keys are layer · n_expert + expert.
class Evictor {
 public:
  virtual ~Evictor() = default;
  // A request of n_ids experts of layer il starts.
  virtual void begin_request(int il, size_t n_ids) = 0;
  // The current request asks for `key`.
  virtual void requested(int32_t key) = 0;
  // Slot s now holds a freshly read `key`.
  virtual void filled(int32_t s, int32_t key) = 0;
  // Slot s served a request from memory.
  virtual void used(int32_t s) = 0;
  // How much slot s (holding `key`) is worth keeping; the least valued candidate is evicted.
  virtual double keep_value(int32_t s, int32_t key) const = 0;
};

std::unique_ptr<Evictor> make_evictor(EvictionPolicy p, int n_layer, int n_expert, int n_slots);

}  // namespace sluice
