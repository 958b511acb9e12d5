// KV provenance view: for one decode of the workbench prompt (plain, early exit, or from a
// prefix cache), a map of execution layer x position coloured by where each key/value row came
// from (computed, propagated from an exited state, reused from the cache, never written), and
// the KV memory as the cache fills against what the call allocated (tinyloop_analysis/kv_provenance.h).
#pragma once

#include <tinyloop_analysis/kv_provenance.h>
#include "views/analysis_window.h"

class QComboBox;
class QCustomPlot;
class QDoubleSpinBox;
class QLabel;
class QSpinBox;

namespace tlui {

class KvProvenanceView : public AnalysisWindow {
    Q_OBJECT
public:
    KvProvenanceView(WorkbenchAccess* workbench, QWidget* parent);

    nlohmann::json data() const override;
    void run() override;

    void setSetup(KvSetup s);
    void setMaxTokens(int n);
    void setLoops(int loops);     // 0 = default
    void setThreshold(double t);  // early exit (hidden_l2)
    void setPrefixLen(int n);
    bool hasRun() const { return m_has; }
    const KvRun& kvRun() const { return m_run; }
    // kv_sharing on the run's tokens (its prompt prefilled, its output fed one at a time), one per
    // mode: bytes per token and the NLL change against per-pass (FORMAT.md §1c).
    const std::vector<tinyloop::KVSharingScore>& sharing() const { return m_sharing; }
    QCustomPlot* mapPlot() const { return m_map; }

private:
    void redraw();

    QComboBox* m_setup;
    QSpinBox* m_maxTokens;
    QSpinBox* m_loops;
    QDoubleSpinBox* m_threshold;
    QSpinBox* m_prefix;
    QCustomPlot* m_map;
    QCustomPlot* m_mem;
    QLabel* m_summary;
    QLabel* m_sharingLabel;
    bool m_has = false;
    KvRun m_run;
    std::vector<tinyloop::KVSharingScore> m_sharing;
};

}  // namespace tlui
