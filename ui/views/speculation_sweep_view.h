// View > Speculation tuning sweep: a grid draft_loops x draft_ahead (x branches for tree) on a
// prompt set, run one at a time and repeated, with progress and cancel; heatmaps of measured median
// speedup (against greedy at the verify depth, same prompts, same repeats) and acceptance, rows only
// for draft depths below the verify depth; predicted speedup (from the agreement maps' acceptance)
// against measured, with the repeats' range as whiskers; a best cell only when it beats greedy
// beyond the noise (timing_stats.h), then offered as a preset. The computation is run_sweep.
#pragma once

#include <memory>

#include <tinyloop_analysis/speculation_sweep.h>
#include "base/preset_store.h"
#include "views/analysis_window.h"

class QComboBox;
class QLineEdit;
class QPlainTextEdit;
class QSpinBox;
class QTableWidget;
class QLabel;
class QPushButton;

namespace tlui {

// The sweep's best cell as a workbench preset (mode, max_tokens, knobs; named after the cell,
// described by its measurement); an empty preset when no cell finished.
Preset bestPreset(const SweepResult& r);

class SpeculationSweepView : public AnalysisWindow {
    Q_OBJECT
public:
    SpeculationSweepView(WorkbenchAccess* workbench, QWidget* parent);

    nlohmann::json data() const override;
    void run() override;

    // Inputs (tests): prompts one per line; lists as "1,2,3".
    void setPrompts(const QStringList& prompts);
    void setMaxTokens(int n);
    void setVerifyLoops(int v);
    void setGrid(const QString& draft_loops, const QString& draft_ahead, const QString& branches);
    void setRepeats(int n);
    // Shows a computed result as if the sweep had just run (tests, screenshots).
    void showSweep(const SweepResult& r);
    std::optional<SweepSpec> spec(QString* error) const;
    const SweepResult* result() const { return m_result.get(); }
    // Saves the best cell as a preset in the workbench's preset store; returns its name ("" on
    // failure, and a refusal in `error` when no cell is faster than greedy beyond the noise).
    QString saveBestPreset(QString* error = nullptr);
    // "Save as the model's recommendation": the best cell's knobs written into `outPath`'s metadata
    // as the speculation recommendation (recommendation_save.h; the button writes the open model's
    // file after a confirmation). Refused, with the reason in `error`, without a result, when no
    // cell is faster than greedy beyond the noise, or when the file cannot be written; else the
    // write runs on the lane and the status line reports it (workFinished).
    bool saveRecommendation(const QString& outPath, QString* error = nullptr);
    QString bestText() const;
    QCustomPlot* speedupMap() const { return m_speedMap; }
    QCustomPlot* scatterPlot() const { return m_scatter; }

private:
    void showResult();
    void fitCellLabels(QCustomPlot* plot);  // each cell's label within its cell (afterLayout)

    std::shared_ptr<SweepResult> m_result;
    QPlainTextEdit* m_prompts;
    QSpinBox* m_maxTokens;
    QSpinBox* m_verify;
    QSpinBox* m_repeats;
    QLineEdit* m_draftLoops;
    QLineEdit* m_draftAhead;
    QLineEdit* m_branches;
    QComboBox* m_kPick;
    QCustomPlot* m_speedMap;
    QCustomPlot* m_accMap;
    QCustomPlot* m_scatter;
    QTableWidget* m_table;
    QLabel* m_best;
    QPushButton* m_saveBest;
    QPushButton* m_saveRecommendation;
};

}  // namespace tlui
