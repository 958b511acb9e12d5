// View > Step mode: generate one token at a time. Each step shows the engine's proposal (the
// token the config's decoder would emit: greedy argmax, or the seeded sample) and that step's lens
// row (top candidates at every depth); the person takes the proposal or any candidate (or types
// an id) and continues. Taking the proposal every time is plain generation (Stepper,
// tinyloop_analysis/step_mode.h).
#pragma once

#include <memory>

#include <tinyloop_analysis/step_mode.h>
#include "views/analysis_window.h"

class QDoubleSpinBox;
class QLineEdit;
class QSpinBox;
class QTableWidget;
class QTextBrowser;
class QPushButton;

namespace tlui {

class StepModeView : public AnalysisWindow {
    Q_OBJECT
public:
    StepModeView(WorkbenchAccess* workbench, QWidget* parent);

    nlohmann::json data() const override;
    void run() override;  // starts (or restarts) step mode on the prompt

    void setPrompt(const QString& text);
    void setConfig(int loops, double temperature, quint64 seed, int max_tokens);
    // Commits the proposal (token < 0) or the given id, then proposes the next step.
    void take(int32_t token = -1);
    // Takes the proposal `n` times in one job (the "Run N" button).
    void takeProposals(int n);

    struct Snapshot {  // what the GUI shows; copied from the worker after each job
        std::vector<int32_t> prompt;
        std::vector<StepRecord> steps;
        std::optional<tinyloop::TokenEvent> proposal;
        std::vector<QString> stepPieces;            // chosen token texts
        std::vector<std::vector<QString>> lensText;  // proposal lens: [depth][rank]
        QString proposalText;
        QString text;
        bool finished = false;
        QString stop_reason;
        nlohmann::json json;
    };
    const Snapshot& snapshot() const { return m_snap; }

private:
    struct State;
    void submitSteps(std::vector<int32_t> tokens, int proposals);
    void showSnapshot();

    std::shared_ptr<State> m_state;
    Snapshot m_snap;
    QLineEdit* m_prompt;
    QSpinBox* m_loops;
    QDoubleSpinBox* m_temp;
    QSpinBox* m_seed;
    QSpinBox* m_maxTokens;
    QTextBrowser* m_text;
    QTableWidget* m_lens;
    QPushButton* m_accept;
    QPushButton* m_takeSel;
    QPushButton* m_run10;
    QLineEdit* m_tokenId;
    QPushButton* m_takeId;  // like the other take buttons: enabled only while a decoder is started
};

}  // namespace tlui
