// Compute against quality view: for a text, each setting's mean NLL per token against the loop
// passes per token it spends (or its decode time per token): fixed depths, early-exit
// thresholds and speculative settings on one chart (tinyloop_analysis/compute_quality.h), with the table.
#pragma once

#include <tinyloop_analysis/compute_quality.h>
#include "views/analysis_window.h"

class QComboBox;
class QCustomPlot;
class QPlainTextEdit;
class QSpinBox;
class QTableWidget;

namespace tlui {

class ComputeView : public AnalysisWindow {
    Q_OBJECT
public:
    ComputeView(WorkbenchAccess* workbench, QWidget* parent);

    nlohmann::json data() const override;
    void run() override;

    void setText(const QString& text);
    // Replaces the default settings (filled from the model on each run until set).
    void setSettings(const ComputeSettings& s);
    void setTimeAxis(bool time);
    const std::vector<ComputePoint>& points() const { return m_points; }
    int textTokens() const { return m_textTokens; }
    QCustomPlot* plot() const { return m_plot; }

private:
    void redraw();

    QPlainTextEdit* m_text;
    QComboBox* m_axis;
    QSpinBox* m_decodeTokens;
    QCustomPlot* m_plot;
    QTableWidget* m_table;
    bool m_customSettings = false;
    ComputeSettings m_settings;
    std::vector<ComputePoint> m_points;
    int m_textTokens = 0;
};

}  // namespace tlui
