// View > Draft-agreement map: for each emitted position (greedy at the final depth), the lens
// argmax at every depth and the first depth whose argmax equals the final one; from it, the
// acceptance each draft depth would get (per token, and replayed as chain speculation), shown next
// to the acceptance measured by actually speculating draft -> final on the same prompt.
#pragma once

#include <memory>
#include <vector>

#include <tinyloop_analysis/agreement_map.h>
#include "views/analysis_window.h"

class QLineEdit;
class QSpinBox;
class QTableWidget;

namespace tlui {

struct AgreementRow {
    int draft_depth = 0;
    double predicted = 0;       // predicted_acceptance(map, D)
    ChainReplay replay;         // the map replayed as chain speculation
    tinyloop::GenerateStats measured;  // speculative D -> final, same prompt
    bool sameText = false;      // the speculative text equals the greedy one
};

struct AgreementData {
    AgreementMap map;
    std::vector<QString> pieces;  // text of each continuation token
    int draft_ahead = 0;
    int max_tokens = 0;
    std::vector<AgreementRow> rows;
};

class AgreementMapView : public AnalysisWindow {
    Q_OBJECT
public:
    AgreementMapView(WorkbenchAccess* workbench, QWidget* parent);

    nlohmann::json data() const override;
    void run() override;

    void setPrompt(const QString& text);
    void setMaxTokens(int n);
    void setFinalDepth(int d);
    void setDraftAhead(int k);
    const AgreementData* result() const { return m_data.get(); }

private:
    void show_();

    std::shared_ptr<AgreementData> m_data;
    QLineEdit* m_prompt;
    QSpinBox* m_maxTokens;
    QSpinBox* m_final;
    QSpinBox* m_ahead;
    QCustomPlot* m_map;
    QCustomPlot* m_bars;
    QTableWidget* m_table;
};

}  // namespace tlui
