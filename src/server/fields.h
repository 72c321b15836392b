// Request fields beyond the ones a route implements. Clients written for OpenAI, Anthropic,
// llama-server and Ollama send fields that change nothing in sluice's answer (metadata, user,
// store, cache_prompt, ...): those are accepted and dropped, so such clients work on their first
// request. llama-server's spellings of implemented fields (n_predict, repeat_last_n, samplers) are
// renamed to the field sluice implements. A sampler field sluice does not implement is accepted at
// its neutral value only (typical_p 1, mirostat 0, ...); any other value, and any unknown field,
// is a 400 naming it, because ignoring it would change the result behind the client's back.
// The lists are in README.md ("serve request fields").
#pragma once

#include <nlohmann/json.hpp>

#include "api.h"

namespace sluice::server {

// Checks every field of `body` for `api` and returns the body with ignored fields removed and
// synonyms renamed to their canonical field. Throws ApiError (400) naming a field that is unknown,
// mistyped, or set to a value that sluice would have to honour and does not.
nlohmann::json normalize_fields(const nlohmann::json& body, Api api);

}  // namespace sluice::server
