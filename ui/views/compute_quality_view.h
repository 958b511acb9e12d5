// Compute against quality view: for a text, each setting's mean NLL per token against the loop
// passes per token it spends (or its decode time per token): fixed depths, early-exit
// thresholds and speculative settings on one chart (tinyloop_analysis/compute_quality.h), with the table.
// Times are medians of repeats with the range as whiskers; point labels are placed where they
// overlap nothing (the rest show on hover).
#pragma once

#include <tinyloop_analysis/compute_quality.h>
#include "views/analysis_window.h"

class QComboBox;
class QCPItemText;
class QMouseEvent;
class QCustomPlot;
class QPlainTextEdit;
class QSpinBox;
class QTableWidget;

namespace tlui {

class ComputeQualityView : public AnalysisWindow {
    Q_OBJECT
public:
    ComputeQualityView(WorkbenchAccess* workbench, QWidget* parent);

    nlohmann::json data() const override;
    void run() override;

    void setText(const QString& text);
    // Replaces the default settings (filled from the model on each run until set).
    void setSettings(const ComputeSettings& s);
    void setTimeAxis(bool time);
    const std::vector<ComputePoint>& points() const { return m_points; }
    int textTokens() const { return m_textTokens; }
    QCustomPlot* plot() const { return m_plot; }
    // Draws computed points as if a run had produced them (tests, screenshots).
    void showPoints(const std::vector<ComputePoint>& points, int textTokens);
    // The point labels on the chart (hidden ones: no free spot, shown on hover).
    const std::vector<QCPItemText*>& pointLabels() const { return m_labels; }
    // The hover text for the point nearest `pixel` (within a few pixels); empty when none.
    QString hoverText(const QPointF& pixel) const;

private:
    void redraw();
    void layoutLabels();  // re-places the point labels for the current ranges and size
    void onMouseMove(QMouseEvent* e);

    QPlainTextEdit* m_text;
    QComboBox* m_axis;
    QSpinBox* m_decodeTokens;
    QCustomPlot* m_plot;
    QTableWidget* m_table;
    bool m_customSettings = false;
    ComputeSettings m_settings;
    std::vector<ComputePoint> m_points;
    std::vector<QCPItemText*> m_labels;  // parallel to m_points
    int m_textTokens = 0;
};

}  // namespace tlui
