// The logit lens as a token x depth colour map (QCPColorMap). During a run it is filled from the
// TokenEvents' lens rows (top-k: probability of the final token is known only inside the top-k,
// KL not at all); after the run the worker's score_logit_lens over prompt + output replaces every
// cell with the exact value. The x axis names the tokens (thinned so labels never overlap; see
// token_axis.h). Each token's exit depth is traced by a step line (dark outline, light core) that
// reads at any size, with a marker per cell only where the cells are big enough to hold one, so
// hundreds of tokens never merge into a band. Data is appended by addEvent / setExactLens and drawn
// by refresh() on the window's ~30 Hz timer.
#pragma once

#include <array>
#include <vector>

#include <QStringList>
#include <QWidget>

#include <tinyloop/tinyloop.h>

class QCustomPlot;
class QMouseEvent;
class QCPColorMap;
class QCPColorScale;
class QCPGraph;
class QComboBox;
class QLabel;

namespace tlui {

enum class LensMetric { ProbFinal = 0, ProbEmitted = 1, Entropy = 2, KLToFinal = 3 };

class LensHeatmap : public QWidget {
    Q_OBJECT
public:
    explicit LensHeatmap(QWidget* parent = nullptr);

    void setVocab(const QStringList& v) { m_vocab = v; }
    void clear(int loops);
    void addEvent(const tinyloop::TokenEvent& ev);
    // Exact cells: column k = the lens at position promptLen + k - 1 (the one that predicted token k).
    void setExactLens(const tinyloop::LensResult& lens, int promptLen);
    void refresh();  // redraw when something changed
    void setMetric(LensMetric m);
    LensMetric metric() const { return m_metric; }

    int tokenCount() const { return static_cast<int>(m_exitDepth.size()); }
    int depthCount() const { return m_loops; }
    bool isExact() const { return m_exact; }
    double value(LensMetric m, int token, int depth) const;  // NaN where unknown
    QString cellTooltip(int token, int depth) const;
    QCustomPlot* plot() const { return m_plot; }
    QCPColorMap* colorMap() const { return m_map; }
    QCPGraph* exitLine() const { return m_exits; }
    // The exit marker's size in pixels at the current size (0: cells too small, the line alone).
    int exitMarkerSize() const { return m_markerPx; }

private:
    void onMouseMove(QMouseEvent* e);
    struct TopK {
        std::vector<int32_t> ids;
        std::vector<float> probs;
    };
    void ensureDepth(int d);
    void fitExitMarkers();  // marker size to the current cell size, before each replot

    QCustomPlot* m_plot = nullptr;
    QCPColorMap* m_map = nullptr;
    QCPColorScale* m_scale = nullptr;
    QCPGraph* m_exits = nullptr;
    QCPGraph* m_exitsOutline = nullptr;
    class TokenAxisTicker* m_ticker = nullptr;  // owned by the x axis
    int m_markerPx = 0;
    QComboBox* m_metricBox = nullptr;
    QLabel* m_note = nullptr;
    QStringList m_vocab;
    LensMetric m_metric = LensMetric::ProbEmitted;
    int m_loops = 1;
    bool m_exact = false;
    bool m_dirty = false;
    std::array<std::vector<std::vector<double>>, 4> m_values;  // [metric][token][depth-1]
    std::vector<std::vector<TopK>> m_top;                      // [token][depth-1]
    std::vector<int> m_exitDepth;
    std::vector<int32_t> m_tokens;
};

}  // namespace tlui
