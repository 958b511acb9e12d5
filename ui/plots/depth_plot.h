// Loop depth used by each emitted token (bars), with the run's requested depth as a line; for a
// model with a learned exit gate (Ouro), below it the gate of one token (the hovered bar, else
// the latest): its exit probability λ per pass that ran, the cumulative exit probability, the
// threshold q of a gate run and the pass the token exited at. addToken / addEvent append;
// refresh() (window timer, ~30 Hz) redraws.
#pragma once

#include <vector>

#include <QString>
#include <QVector>
#include <QWidget>

#include <tinyloop/tinyloop.h>

class QCustomPlot;
class QCPBars;
class QCPGraph;
class QCPTextElement;

namespace tlui {

class DepthPlot : public QWidget {
    Q_OBJECT
public:
    explicit DepthPlot(QWidget* parent = nullptr);
    void clear(int loops);
    void addToken(int index, int depth);
    // The token's depth and, when the event carries it (a gated model), its exit gate per pass.
    void addEvent(const tinyloop::TokenEvent& ev);
    // The run's gate threshold q when it exits by the gate (gate_stop / gate_select: criterion is
    // its name), else q <= 0 (no threshold line; the gate is still drawn when recorded).
    void setGateThreshold(double q, const QString& criterion = QString());
    // The token whose gate is drawn (-1: the latest one); hovering a bar selects it too.
    void selectToken(int index);
    void refresh();
    int count() const { return static_cast<int>(m_depths.size()); }
    QCustomPlot* plot() const { return m_plot; }
    QCustomPlot* gatePlot() const { return m_gate; }
    // Whether any token carries the gate (the gate plot is shown), and the token it shows (-1: none).
    bool hasGate() const { return m_gateTokens > 0; }
    int gateToken() const;

private:
    void drawGate();

    QCustomPlot* m_plot = nullptr;
    QCPBars* m_bars = nullptr;
    QCPBars* m_selectedBar = nullptr;
    QCPGraph* m_requested = nullptr;
    QVector<double> m_depths;
    int m_loops = 1;
    bool m_dirty = false;

    QCustomPlot* m_gate = nullptr;
    QCPTextElement* m_gateTitle = nullptr;
    QCPBars* m_lambda = nullptr;
    QCPGraph* m_cdf = nullptr;
    QCPGraph* m_threshold = nullptr;
    QCPGraph* m_exit = nullptr;
    std::vector<std::vector<float>> m_lambdas, m_cdfs;  // per token index
    int m_gateTokens = 0;
    int m_selected = -1;
    double m_q = 0;
    QString m_criterion;
};

}  // namespace tlui
