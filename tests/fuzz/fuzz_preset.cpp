// libFuzzer target for the workbench's preset reader (ui/preset_store.cpp presetFromJson and the
// config/knob readers of ui/config_json.cpp): pure functions over JSON, linked without widgets.
// Byte 0 picks the reader; the rest is the JSON (or the panel's text form). Any ConfigError is a
// refusal; anything else escaping (a nlohmann::json exception, a crash) is a finding. A preset
// that is accepted must survive presetToJson -> presetFromJson unchanged.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/preset_store.h"

using nlohmann::json;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const int op = data[0] % 6;
    const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
    tlui::ConfigLimits lim;
    lim.max_loops = 16;
    lim.max_seq_len = 512;
    lim.vocab_size = 4096;
    try {
        if (op >= 3) {
            if (op == 3) tlui::idListsFromText("stop_sequences", text);
            if (op == 4) tlui::biasFromText("logit_bias", text);
            if (op == 5) tlui::stringsFromText("stop_strings", text);
            return 0;
        }
        const json j = json::parse(text, nullptr, false);
        if (j.is_discarded()) return 0;
        if (op == 0) {
            const tlui::Preset p = tlui::presetFromJson(j, lim);
            const tlui::Preset q = tlui::presetFromJson(tlui::presetToJson(p), lim);
            if (!tlui::presetsEqual(p, q)) {
                std::fprintf(stderr, "preset round trip differs\n");
                std::abort();
            }
        } else if (op == 1) {
            const tinyloop::GenerateConfig c = tlui::configFromJson(j, lim, "config.");
            const tinyloop::GenerateConfig d = tlui::configFromJson(tlui::configToJson(c), lim, "config.");
            if (!tlui::configsEqual(c, d)) {
                std::fprintf(stderr, "config round trip differs\n");
                std::abort();
            }
        } else {
            const tinyloop::SpeculationPolicy k = tlui::knobsFromJson(j, lim, "speculative.");
            if (!(tlui::knobsEqual(tlui::knobsFromJson(tlui::knobsToJson(k), lim), k))) {
                std::fprintf(stderr, "knobs round trip differs\n");
                std::abort();
            }
        }
    } catch (const tlui::ConfigError&) {
    }
    return 0;
}
