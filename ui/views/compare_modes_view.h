// View > Compare decode modes: several modes with their settings on one prompt, run one after
// another (concurrently only when asked: concurrent runs share the cores and time each other),
// each repeated (median of the repeats, whiskers from fastest to slowest); the texts aligned with
// the first divergence from a chosen baseline highlighted; a table and bars of tokens/s, time to
// first token (its own plot: milliseconds and tokens/s never share an axis), mean depth with
// acceptance on its own % axis, and the time split; the status and the table's speedup column say
// which modes beat the baseline and by how much, and which are too close to call. The computation
// is run_comparison (tinyloop_analysis/compare_modes.h).
#pragma once

#include <memory>
#include <vector>

#include <tinyloop_analysis/compare_modes.h>
#include "views/analysis_window.h"

class QCheckBox;
class QComboBox;
class QLineEdit;
class QListWidget;
class QSpinBox;
class QTableWidget;
class QTextBrowser;

namespace tlui {

// Who won against the baseline and by how much (speedup = the baseline's ms per token over the
// mode's, i.e. tokens/s over tokens/s, median and range of the repeats), by timing_stats' noise
// rule: "Against the baseline greedy L=6: early exit won, 1.9x as fast beyond the noise; too close
// to call: ...". Empty when the baseline has no timing.
QString compareVerdict(const tinyloop::analysis::CompareResult& r);

class CompareModesView : public AnalysisWindow {
    Q_OBJECT
public:
    CompareModesView(WorkbenchAccess* workbench, QWidget* parent);

    nlohmann::json data() const override;
    void run() override;

    // Inputs (tests, screenshots).
    void setPrompt(const QString& text);
    void setMaxTokens(int n);
    void setConcurrent(bool on);
    void setRepeats(int n);
    void setModes(const std::vector<ModeSpec>& modes);  // all checked
    std::vector<ModeSpec> checkedModes() const;
    void setBaseline(int index);

    const CompareResult* result() const { return m_result.get(); }
    QTextBrowser* textsView() const { return m_texts; }
    QTableWidget* table() const { return m_table; }
    bool concurrent() const;
    int repeats() const;
    QCustomPlot* speedPlot() const { return m_speed; }
    QCustomPlot* firstTokenPlot() const { return m_first; }
    QCustomPlot* depthPlot() const { return m_depth; }
    QCustomPlot* splitPlot() const { return m_split; }

private:
    void addMode(const ModeSpec& m, bool checked);
    void showResult();

    std::vector<ModeSpec> m_specs;  // parallel to m_modes' rows
    std::shared_ptr<CompareResult> m_result;
    std::vector<std::vector<QString>> m_pieces;  // per run, per token: its text
    QLineEdit* m_prompt;
    QSpinBox* m_maxTokens;
    QCheckBox* m_concurrent;
    QSpinBox* m_repeats;
    QComboBox* m_baseline;
    QListWidget* m_modes;
    QTextBrowser* m_texts;
    QTableWidget* m_table;
    QCustomPlot* m_speed;
    QCustomPlot* m_first;
    QCustomPlot* m_depth;
    QCustomPlot* m_split;
};

}  // namespace tlui
