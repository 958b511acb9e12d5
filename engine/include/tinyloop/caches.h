// TinyLoop public API, caches: reuse of prefill state across calls (PrefixCache, ResumeHandle, PrefixPool).
// Part of tinyloop/tinyloop.h, which includes every part: include that one.
#pragma once

// GenerateConfig, GenerateResult, GenerateOptions, TokenEvent: tinyloop.h includes this part
// after them, and this include brings them in when the part is included first.
#include "tinyloop/tinyloop.h"

namespace tinyloop {

// ---------------------------------------------------------------------------------------------
// Caches (reuse of prefill state across calls)
// ---------------------------------------------------------------------------------------------

// A prefix prefilled once at one depth (and cache_window); reused by any prompt that starts with it.
struct PrefixCache;
PrefixCache* create_prefix_cache(Model* model, const int32_t* prefix, int n, int loops = 0, int cache_window = 0);
void free_prefix_cache(PrefixCache* cache);
template <>
struct Deleter<PrefixCache> {
    void operator()(PrefixCache* cache) const noexcept { free_prefix_cache(cache); }
};
size_t prefix_cache_bytes(const PrefixCache* cache);
int prefix_cache_length(const PrefixCache* cache);
// Generates as generate_ex would; the prompt must start with the cache's prefix and the config's
// loops and cache_window must equal the cache's. Only the rest of the prompt is prefilled.
GenerateResult generate_with_prefix(Model* model, const PrefixCache* cache, const int32_t* prompt,
                                    int prompt_len, const GenerateConfig& config,
                                    const GenerateOptions& options = {});

// A prompt prefilled at some depth, kept with its states so it can be answered at another depth
// without recomputing the prompt: deeper by running only the new passes, shallower for free
// (with coda blocks, FORMAT.md §1b, a shallower depth computes the prompt again: its coda reads
// the states of that depth, which the handle does not keep).
struct ResumeHandle;
ResumeHandle* create_resume_handle(Model* model, const int32_t* prompt, int prompt_len, int loops = 0);
void free_resume_handle(ResumeHandle* handle);
template <>
struct Deleter<ResumeHandle> {
    void operator()(ResumeHandle* handle) const noexcept { free_resume_handle(handle); }
};
int resume_handle_loops(const ResumeHandle* handle);   // deepest depth computed so far
size_t resume_handle_bytes(const ResumeHandle* handle);
// Generates from the handle's prompt at config.loops (0 = the handle's depth). When deeper than
// the handle, passes handle+1 .. loops run over the prompt and the handle keeps the deeper state.
GenerateResult resume_generate(ResumeHandle* handle, const GenerateConfig& config,
                               const GenerateOptions& options = {});

// Registered prefixes at one depth; a request reuses the longest one its prompt starts with.
struct PrefixPool;
PrefixPool* create_prefix_pool(Model* model, int loops = 0);
void free_prefix_pool(PrefixPool* pool);
template <>
struct Deleter<PrefixPool> {
    void operator()(PrefixPool* pool) const noexcept { free_prefix_pool(pool); }
};
int prefix_pool_add(PrefixPool* pool, const int32_t* prefix, int n);  // returns its index
size_t prefix_pool_bytes(const PrefixPool* pool);
// reused_tokens (optional) receives the length of the prefix that was reused (0 if none).
GenerateResult generate_with_pool(PrefixPool* pool, const int32_t* prompt, int prompt_len,
                                  const GenerateConfig& config, const GenerateOptions& options = {},
                                  int* reused_tokens = nullptr);

}  // namespace tinyloop
