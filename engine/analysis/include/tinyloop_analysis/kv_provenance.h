// KV provenance, the data behind its view (no Qt): one decode of a prompt with
// GenerateOptions::kv_provenance, in one of three set-ups, and what its cache holds.
//   plain        run_decode Sample (greedy at temperature <= 0.01) at the config's depth: every
//                row computed
//   early exit   run_decode EarlyExit with the config's policy: a row that exits at e has the
//                layers of passes e+1.. propagated from its frozen state
//   prefix cache the prompt's first prefix_len tokens prefilled once into a PrefixCache, then
//                generate_with_prefix: those positions' rows are reused
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <tinyloop/tinyloop.h>

namespace tinyloop::analysis {

enum class KvSetup { Plain, EarlyExit, PrefixCache };
const char* kv_setup_name(KvSetup s);  // "plain", "early exit", "prefix cache"

struct KvRun {
    KvSetup setup = KvSetup::Plain;
    std::vector<int32_t> tokens;
    int prompt_len = 0;
    int prefix_len = 0;                  // prefix cache only
    size_t prefix_cache_bytes = 0;       // prefix cache only: what the cache itself holds
    std::vector<std::string> pieces;
    std::vector<int> depth_per_token;
    tinyloop::KVProvenance prov;
    // Per position p: bytes of the rows written for positions 0..p (the cache as it fills).
    std::vector<size_t> live_bytes;
    int count(tinyloop::KVOrigin o) const;
};

// `config` supplies depth, max_tokens and (for EarlyExit, which needs early_exit_patience >= 1)
// the policy; Plain and PrefixCache run it with early exit off. prefix_len: 1..prompt length.
// Throws tinyloop::Error naming the field.
KvRun run_kv_provenance(tinyloop::Model* model, const std::vector<int32_t>& prompt, tinyloop::GenerateConfig config,
                        KvSetup setup, int prefix_len = 0);

nlohmann::json kv_json(const KvRun& run);

}  // namespace tinyloop::analysis
