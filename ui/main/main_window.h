// The workbench window: prompt and output, the config and preset editors, the model panel, the
// plots, and the EngineHost on its own QThread. The GUI thread never calls the engine.
#pragma once

#include <QMainWindow>
#include <QPointer>

#include "record/session.h"
#include "views/workbench_access.h"
#include "worker/engine_host.h"

class QAction;
class QComboBox;
class QLabel;
class QMenu;
class QMessageBox;
class QProgressBar;
class QPushButton;
class QTabWidget;
class QThread;
class QTimer;
class QCustomPlot;

namespace tlui {

class ConfigPanel;
class DepthPlot;
class LensHeatmap;
class ModelPanel;
class PresetsPanel;
class PromptEditor;
class SpeculativePlot;
class TimingPlot;
class TokenView;
class Tour;

struct WindowOptions {
    QString presetDir;  // empty: QStandardPaths::AppConfigLocation/presets
    bool errorDialogs = true;
};

class AnalysisJobs;
class AnalysisViews;

class MainWindow : public QMainWindow, public WorkbenchAccess {
    Q_OBJECT
public:
    explicit MainWindow(const WindowOptions& opts = {}, QWidget* parent = nullptr);
    ~MainWindow() override;

    void openModel(const QString& path, bool randomFallback = false);
    // The back end models are loaded on ("auto", "cpu", "cuda"; remembered across runs). Setting
    // another reloads the open model on it; a refused load keeps the model and its back end.
    void setBackend(const QString& name);
    QString backend() const { return m_backend; }
    void setPrompt(const QString& text);
    // Applies preset `name` now and, while no model is in yet (or one is loading), again once it
    // is: the model's defaults, set on load, would otherwise replace the early-exit fields the
    // preset names (the workbench's --preset). False, with the reason, for a preset it cannot apply.
    bool applyPreset(const QString& name, QString* error = nullptr);
    bool generate();  // false (and the reason in the status bar) when it cannot start
    void stop();

    bool isRunning() const { return m_currentRun != 0; }
    quint64 currentRunId() const { return m_currentRun; }  // the run generate() started (0: none)
    bool isLoading() const { return m_loading; }
    bool hasModel() const { return m_hasModel; }
    QString modelPath() const override { return m_modelPath; }
    QString lastError() const { return m_lastError; }
    const Session& session() const { return m_session; }
    QString speedText() const;

    bool exportSessionJson(const QString& path, QString* error = nullptr) const;
    // Reloads a saved session (exportSessionJson's file) into the window: prompt, config, output,
    // events, lens and plots, without running. False, with the reason, for a bad file (the window
    // keeps what it showed) or while a run is in progress.
    bool openSession(const QString& path, QString* error = nullptr);
    bool exportSessionMarkdown(const QString& path, QString* error = nullptr) const;
    QList<QPair<QString, QCustomPlot*>> plots() const;
    bool exportPlot(const QString& name, const QString& path, QString* error = nullptr);

    ConfigPanel* configPanel() const { return m_config; }
    PresetsPanel* presetsPanel() const { return m_presets; }
    LensHeatmap* heatmap() const { return m_heatmap; }
    DepthPlot* depthPlot() const { return m_depth; }
    TokenView* tokenView() const { return m_output; }
    ModelPanel* modelPanel() const { return m_modelPanel; }
    EngineHost* worker() const { return m_worker; }
    QTabWidget* plotTabs() const { return m_plotTabs; }

    AnalysisViews* analysisViews() const { return m_views; }
    // Help -> Tour: shows the tour panel and runs step `step` (0-based); the tour is made on first use.
    Tour* startTour(int step = 0);
    Tour* tour() const { return m_tour; }

    // WorkbenchAccess, for the analysis windows
    QString promptText() const override;
    std::shared_ptr<tinyloop::Model> loadedModel() const override;
    AnalysisJobs* analysisJobs() const override { return m_jobs; }
    std::optional<tinyloop::analysis::ModeSpec> configuredRun(QString* error) const override;
    bool savePreset(const Preset& preset, QString* error) override;

signals:
    // to the worker (queued)
    void requestLoad(const QString& path, const QString& backend);
    void requestGenerate(const tlui::RunRequest& req);
    void requestValidate(quint64 ticket, const tlui::RunRequest& req);
    // for main() and tests
    void modelReady(bool ok);
    void runEnded(quint64 id, bool ok);
    void sessionSettled();  // the run ended and its exact lens (if any) is in

protected:
    void closeEvent(QCloseEvent* e) override;

private:
    void buildUi();
    void buildMenus();
    void shutdownWorker();
    void updateActions();
    void updateTitle();
    void showError(const QString& title, const QString& text);
    void addRecent(const QString& path);
    void rebuildRecentMenu();
    void scheduleValidation();
    void onFrame();
    std::optional<RunRequest> makeRequest(QString* error);
    void startShowingRun();  // the run's first sign of life: the previous output and plots go
    void showSession();      // m_session on every panel and plot

    void onLoadStarted(const QString& path);
    void onImportProgress(const QString& folder, int done, int count, double fraction);
    void endImport();
    void onModelLoaded(const tlui::ModelLoaded& m);
    void onModelLoadFailed(const QString& path, const QString& message);
    void onRunStarted(quint64 id, int promptLen);
    void onTokenEvent(quint64 id, const tinyloop::TokenEvent& ev);
    void onProgress(quint64 id, int emitted, double tps);
    void onRunFinished(const tlui::RunResult& r);
    void onRunFailed(quint64 id, const QString& message);
    void onLensReady(const tlui::LensReady& l);
    void onLensFailed(quint64 id, const QString& message);

    WindowOptions m_opts;
    QThread* m_thread = nullptr;
    EngineHost* m_worker = nullptr;
    AnalysisJobs* m_jobs = nullptr;
    AnalysisViews* m_views = nullptr;  // the analysis windows' lane, on m_worker's model
    Tour* m_tour = nullptr;
    bool m_shutDown = false;

    PromptEditor* m_prompt = nullptr;
    TokenView* m_output = nullptr;
    QComboBox* m_shadeBox = nullptr;
    ConfigPanel* m_config = nullptr;
    PresetsPanel* m_presets = nullptr;
    ModelPanel* m_modelPanel = nullptr;
    QTabWidget* m_plotTabs = nullptr;
    LensHeatmap* m_heatmap = nullptr;
    DepthPlot* m_depth = nullptr;
    SpeculativePlot* m_spec = nullptr;
    TimingPlot* m_timing = nullptr;
    QLabel* m_stateLabel = nullptr;
    QLabel* m_speedLabel = nullptr;
    QLabel* m_noiseLabel = nullptr;
    QProgressBar* m_busy = nullptr;
    QPushButton* m_cancelImport = nullptr;  // shown while a Hugging Face folder is imported
    bool m_importing = false;
    QString m_openedPath;  // what the user opened: the file, or the Hugging Face folder it came from
    QAction* m_generateAct = nullptr;
    QAction* m_stopAct = nullptr;
    QAction* m_openAct = nullptr;
    QMenu* m_recentMenu = nullptr;
    QTimer* m_frameTimer = nullptr;
    QTimer* m_validateTimer = nullptr;
    QPointer<QMessageBox> m_errorBox;

    Session m_session;
    bool m_hasModel = false;
    bool m_loading = false;
    bool m_randomFallback = false;
    bool m_pendingRandom = false;
    QString m_backend = "auto";         // asked for the next load
    QString m_loadedBackend = "auto";   // the loaded model's
    QString m_pendingBackend = "auto";  // of the load in flight
    QString m_requestedPath;            // the file of the last load asked for
    QString m_modelPath;
    QString m_modelName;
    QString m_lastError;
    tinyloop::HParams m_hp;
    quint64 m_nextRunId = 1;
    quint64 m_currentRun = 0;  // 0 = none running
    quint64 m_awaitLens = 0;   // run whose exact lens is still to come
    quint64 m_validateTicket = 0;
    RunRequest m_pendingRun;       // the run asked for last (shown from its first token on)
    int m_pendingPromptLen = 0;
    bool m_showsPrevious = false;  // a run was asked for; the previous output stays until it starts
    bool m_notStarted = false;     // the status bar says why a run did not start
    bool m_sessionConfig = false;  // an opened session's config outlives the model's default preset
    QString m_sessionNote;         // what the status bar said about the opened session
    QString m_presetAfterLoad;     // the preset to apply once the model being opened for it is in
    double m_liveTps = 0;
    std::vector<SpecCycle> m_liveCycles;
    int m_lastCycle = -1;
    bool m_cyclesDirty = false;
};

}  // namespace tlui
