// The JSON the analysis exports write for a run's settings and statistics. The field names are
// the engine's (GenerateConfig, SpeculationKnobs, GenerateStats); decode_mode_name and
// stop_reason_name spell the enums. Export only: nothing here is read back.
#pragma once

#include <nlohmann/json.hpp>
#include <tinyloop/tinyloop.h>

namespace tinyloop::analysis {

// The config fields a view varies (depth, sampling, penalties, early exit, beam); the lists
// (stop sequences, bias, bad words) as counts.
nlohmann::json config_to_json(const GenerateConfig& c);
// {"mode", "config", "speculation"}; speculation only for the speculative modes.
nlohmann::json run_spec_to_json(const RunSpec& spec);
nlohmann::json stats_to_json(const GenerateStats& s);

}  // namespace tinyloop::analysis
