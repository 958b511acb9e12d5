// Early-exit calibration view: every criterion's signal per emitted token across depth (one
// trace per token) for a full-depth greedy run of the workbench prompt, a threshold line to drag,
// and the tokens whose output would change at that threshold flagged, all re-scored from the
// cached per-depth data (tinyloop_analysis/exit_calibration.h) without generating again.
#pragma once

#include <memory>

#include <tinyloop_analysis/exit_calibration.h>
#include "views/analysis_window.h"

class QComboBox;
class QCustomPlot;
class QCPItemStraightLine;
class QCPTextElement;
class QDoubleSpinBox;
class QLabel;
class QMouseEvent;
class QPushButton;
class QSpinBox;
class QTextBrowser;

namespace tlui {

class ExitCalibrationView : public AnalysisWindow {
    Q_OBJECT
public:
    ExitCalibrationView(WorkbenchAccess* workbench, QWidget* parent);

    nlohmann::json data() const override;
    void run() override;

    bool hasData() const { return m_data != nullptr; }
    const CalibData* calibData() const { return m_data.get(); }
    EarlyExitPolicy policy() const;
    void setCriterion(tinyloop::EarlyExitCriterion c);
    void setThreshold(double t);  // as the spin box or a drag of the line would
    void setMaxTokens(int n);
    void setLoops(int loops);     // 0 = the model's default
    const std::vector<CalibToken>& scored() const { return m_scored; }
    // "Save as the model's recommendation": the current policy (at the depth it was collected
    // at) written into `outPath`'s metadata as the early-exit recommendation (recommendation_save.h;
    // the button writes the open model's file after a confirmation). false with the reason in
    // `error` when there is nothing to save or the file cannot be written; else the write runs
    // on the lane and the status line reports it (workFinished).
    bool saveRecommendation(const QString& outPath, QString* error = nullptr);
    QCustomPlot* plot() const { return m_plot; }

private:
    void rescore();
    void redraw();
    void onMousePress(QMouseEvent* e);
    void onMouseMove(QMouseEvent* e);
    void onMouseRelease(QMouseEvent* e);

    std::shared_ptr<CalibData> m_data;
    std::vector<CalibToken> m_scored;
    QComboBox* m_criterion;
    QDoubleSpinBox* m_threshold;
    QSpinBox* m_patience;
    QSpinBox* m_minL;
    QSpinBox* m_peek;
    QSpinBox* m_maxTokens;
    QSpinBox* m_loops;
    QCustomPlot* m_plot;
    QCPItemStraightLine* m_line = nullptr;
    QCPTextElement* m_rule = nullptr;  // the exit rule, above the plot
    QTextBrowser* m_tokens;
    QLabel* m_summary;
    QPushButton* m_save;
    bool m_dragging = false;
};

}  // namespace tlui
