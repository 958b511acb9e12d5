// View > Depth scrubber: a slider over loop depth for one prompt. The prompt is prefilled once
// (a ResumeHandle); every move answers at the new depth through resume_generate without
// recomputing the prompt (deeper: only the new passes run; shallower: free), and shows the token
// diff from the previous depth. The computation is DepthScrubber (tinyloop_analysis/depth_scrubber.h).
#pragma once

#include <memory>
#include <vector>

#include <tinyloop_analysis/depth_scrubber.h>
#include "views/analysis_window.h"

class QLineEdit;
class QSlider;
class QSpinBox;
class QTableWidget;
class QTextBrowser;
class QLabel;

namespace tlui {

class DepthScrubberView : public AnalysisWindow {
    Q_OBJECT
public:
    DepthScrubberView(WorkbenchAccess* workbench, QWidget* parent);
    ~DepthScrubberView() override;

    nlohmann::json data() const override;
    void run() override;  // (re)prefills the prompt and answers at the slider's depth

    void setPrompt(const QString& text);
    void setMaxTokens(int n);
    void setDepth(int depth);  // moves the slider (answers through the handle)
    // Moves the slider without answering: the depth the next Run (prefill) starts at.
    void setStartDepth(int depth);
    int depth() const;

    struct Step {
        ScrubAnswer answer;
        int previousDepth = 0;  // 0 for the first answer
        std::vector<DiffOp> diff;  // from the previous answer to this one
        std::vector<QString> diffPieces;  // text of each diff op's token
        size_t handle_bytes = 0;
    };
    const std::vector<Step>& history() const { return m_history; }

private:
    struct State;
    void answer(int depth);
    void showStep(const Step& s);

    std::shared_ptr<State> m_state;  // the scrubber; touched only by jobs on the worker thread
    std::vector<Step> m_history;
    int m_pendingDepth = 0;  // a move made while a job was running
    bool m_inFlight = false;
    bool m_prefilled = false;
    QLineEdit* m_prompt;
    QSpinBox* m_maxTokens;
    QSlider* m_slider;
    QLabel* m_depthLabel;
    QLabel* m_info;
    QTextBrowser* m_answer;
    QTextBrowser* m_diff;
    QTableWidget* m_table;
    QCustomPlot* m_plot;
};

}  // namespace tlui
