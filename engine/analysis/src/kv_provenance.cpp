#include <tinyloop_analysis/kv_provenance.h>

#include <memory>

namespace tinyloop::analysis {

namespace {

[[noreturn]] void bad(const std::string& m) { throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, m); }

}  // namespace

const char* kv_setup_name(KvSetup s) {
    switch (s) {
        case KvSetup::Plain: return "plain";
        case KvSetup::EarlyExit: return "early exit";
        case KvSetup::PrefixCache: return "prefix cache";
    }
    return "?";
}

int KvRun::count(tinyloop::KVOrigin o) const {
    int n = 0;
    for (tinyloop::KVOrigin x : prov.origin) n += x == o;
    return n;
}

KvRun run_kv_provenance(tinyloop::Model* model, const std::vector<int32_t>& prompt, tinyloop::GenerateConfig c,
                        KvSetup setup, int prefix_len) {
    if (prompt.empty()) bad("prompt: must hold at least one token");
    KvRun run;
    run.setup = setup;
    tinyloop::GenerateOptions o;
    o.kv_provenance = &run.prov;
    c.beam_size = 0;
    tinyloop::GenerateResult g;
    const int n = static_cast<int>(prompt.size());
    switch (setup) {
        case KvSetup::Plain:  // Sample: the config's temperature (greedy at <= 0.01), early exit off
        case KvSetup::EarlyExit: {  // the engine refuses early_exit_patience < 1 here
            tinyloop::RunSpec spec;
            spec.mode = setup == KvSetup::Plain ? tinyloop::DecodeMode::Sample : tinyloop::DecodeMode::EarlyExit;
            spec.config = c;
            g = tinyloop::run_decode(model, prompt.data(), n, spec, o);
            break;
        }
        case KvSetup::PrefixCache: {
            if (prefix_len < 1 || prefix_len > n)
                bad("prefix_len: " + std::to_string(prefix_len) + " is outside [1, " + std::to_string(n) + "]");
            c.early_exit.patience = 0;
            tinyloop::Owned<tinyloop::PrefixCache> cache(
                tinyloop::create_prefix_cache(model, prompt.data(), prefix_len, c.loops, c.cache_window));
            run.prefix_len = prefix_len;
            run.prefix_cache_bytes = tinyloop::prefix_cache_bytes(cache.get());
            g = tinyloop::generate_with_prefix(model, cache.get(), prompt.data(), n, c, o);
            break;
        }
    }
    run.tokens = g.tokens;
    run.prompt_len = g.prompt_len;
    run.depth_per_token = g.stats.depth_per_token;
    for (int32_t t : run.tokens) run.pieces.push_back(tinyloop::detokenize_text(model, &t, 1));
    const tinyloop::KVProvenance& p = run.prov;
    size_t written = 0;
    for (tinyloop::KVOrigin x : p.origin) written += x != tinyloop::KVOrigin::None;
    const size_t row_bytes = written > 0 ? p.kv_bytes_written / written : 0;
    size_t acc = 0;
    for (int pos = 0; pos < p.n_positions; ++pos) {
        for (int e = 0; e < p.n_layers; ++e) acc += p.at(e, pos) != tinyloop::KVOrigin::None ? row_bytes : 0;
        run.live_bytes.push_back(acc);
    }
    return run;
}

nlohmann::json kv_json(const KvRun& r) {
    nlohmann::json j;
    j["view"] = "kv provenance";
    j["setup"] = kv_setup_name(r.setup);
    j["tokens"] = r.tokens;
    j["pieces"] = r.pieces;
    j["prompt_len"] = r.prompt_len;
    j["depth_per_token"] = r.depth_per_token;
    if (r.setup == KvSetup::PrefixCache) {
        j["prefix_len"] = r.prefix_len;
        j["prefix_cache_bytes"] = r.prefix_cache_bytes;
    }
    j["n_layers"] = r.prov.n_layers;
    j["n_pre_blocks"] = r.prov.n_pre_blocks;
    j["n_loop_layers"] = r.prov.n_loop_layers;
    j["n_positions"] = r.prov.n_positions;
    j["kv_bytes_allocated"] = r.prov.kv_bytes_allocated;
    j["kv_bytes_written"] = r.prov.kv_bytes_written;
    j["live_bytes"] = r.live_bytes;
    nlohmann::json grid = nlohmann::json::array();  // [layer][position] origin names
    for (int e = 0; e < r.prov.n_layers; ++e) {
        nlohmann::json row = nlohmann::json::array();
        for (int p = 0; p < r.prov.n_positions; ++p) row.push_back(tinyloop::kv_origin_name(r.prov.at(e, p)));
        grid.push_back(row);
    }
    j["origin"] = grid;
    j["counts"] = {{"computed", r.count(tinyloop::KVOrigin::Computed)},
                   {"propagated", r.count(tinyloop::KVOrigin::Propagated)},
                   {"reused", r.count(tinyloop::KVOrigin::Reused)},
                   {"none", r.count(tinyloop::KVOrigin::None)}};
    return j;
}

}  // namespace tinyloop::analysis
