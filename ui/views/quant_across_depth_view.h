// Quantization across depth view: a second file of the workbench's model (e.g. its q4 next to
// its f32) reads the workbench prompt and the first model's greedy continuation; the lens
// trajectories of both per depth (probability of each one's final argmax, top-1 agreement) and
// their divergence (KL, max |logit difference|) at each depth, as means and per token
// (tinyloop_analysis/quant_across_depth.h).
#pragma once

#include <tinyloop_analysis/quant_across_depth.h>
#include "views/analysis_window.h"

class QCPColorScale;
class QCustomPlot;
class QLineEdit;
class QSpinBox;

namespace tlui {

class QuantAcrossDepthView : public AnalysisWindow {
    Q_OBJECT
public:
    QuantAcrossDepthView(WorkbenchAccess* workbench, QWidget* parent);

    nlohmann::json data() const override;
    void run() override;

    void setSecondPath(const QString& path);
    QString secondPath() const;
    void setMaxTokens(int n);  // 0: the prompt alone
    void setLoops(int loops);  // 0 = default
    bool hasData() const { return m_has; }
    const QuantData& quantData() const { return m_data; }

private:
    void redraw();
    void clearPlots();  // after a failed run: nothing of the previous pair stays

    QLineEdit* m_second;
    QSpinBox* m_maxTokens;
    QSpinBox* m_loops;
    QCustomPlot* m_traj;
    QCustomPlot* m_div;
    QCPColorScale* m_heatScale = nullptr;
    QCustomPlot* m_heat;
    bool m_has = false;
    QuantData m_data;
};

// The file beside `path` the view offers first: model-f32 -> model-q4 (else q8), q4/q8 -> f32.
QString suggestedSecondModel(const QString& path);

}  // namespace tlui
