#include "main/main_window.h"

#include <algorithm>
#include <utility>

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDockWidget>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QThread>
#include <QTimer>
#include <QToolBar>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include "main/config_panel.h"
#include "base/config_json.h"
#include "base/glossary_dialog.h"
#include "main/model_paths.h"
#include "main/tour.h"
#include "main/model_panel.h"
#include "record/plain_status.h"
#include "main/presets_panel.h"
#include "main/prompt_editor.h"
#include "record/session_file.h"
#include "base/screen_fit.h"
#include "main/token_view.h"
#include "main/view_menu.h"
#include "plots/depth_plot.h"
#include "plots/lens_heatmap.h"
#include "plots/plot_caption.h"
#include "plots/plot_utils.h"
#include "plots/speculative_plot.h"
#include "plots/timing_plot.h"
#include "views/analysis_views.h"
#include "worker/analysis_jobs.h"

namespace tlui {

namespace {

// The line under each plot of the main window (plots/plot_caption.h).
const char* kLensCaption =
    "Each column is an emitted token, each row a [[loop pass]] (pass 1 at the bottom); a cell's colour is "
    "the chosen measure at that pass, by default the [[probability]] the pass gives the token finally "
    "emitted. Read a column upwards to watch the answer form; a cyan square (a cyan step line when the "
    "cells are small) marks the pass where the token [[early exit|exited]]. Hover a cell for the pass's top guesses.";
const char* kDepthCaption =
    "One bar per emitted token: how many [[loop pass|passes]] it used. The dashed line is the depth asked "
    "for; bars below it are tokens that stopped early ([[early exit]]), the passes saved. A model with a "
    "learned [[exit gate]] (Ouro) adds, below, the gate of the hovered token: its [[exit probability]] per "
    "pass, the cumulative curve, the threshold q and the pass it exited at.";
// The depth plot's gate: the threshold q of a run that exits by the exit gate (gate_stop /
// gate_select), else none.
void showGateThreshold(DepthPlot* plot, DecodeMode mode, const tinyloop::GenerateConfig& c) {
    const tinyloop::EarlyExitPolicy p = tinyloop::effective_exit_policy(c.early_exit);
    if (mode == DecodeMode::EarlyExit && tinyloop::is_gate_criterion(p.criterion))
        plot->setGateThreshold(p.threshold, criterionName(p.criterion));
    else
        plot->setGateThreshold(0);
}
const char* kSpeculativeCaption =
    "Left, one bar per [[cycle]] of [[self-speculation]]: grey up to how many tokens the shallow pass "
    "[[draft|drafted]], green how many of them the full depth accepted. Right, the cycles counted by how "
    "many drafts they kept; more on the right means higher [[acceptance]].";
const char* kTimingCaption =
    "Left: where the last run's time went, in milliseconds ([[prefill]], [[first token]], [[decode]], "
    "total). Right: the [[decode]] speed of every run so far, in [[tokens per second]]; higher is faster.";

}  // namespace

MainWindow::MainWindow(const WindowOptions& opts, QWidget* parent) : QMainWindow(parent), m_opts(opts) {
    registerEngineMetaTypes();
    setObjectName("mainWindow");
    setWindowIcon(QIcon(":/icons/tinyloop.svg"));
    buildUi();
    buildMenus();

    // The worker: its own thread, queued connections both ways.
    m_thread = new QThread(this);
    m_thread->setObjectName("EngineHostThread");
    m_worker = new EngineHost;  // no parent: moved, then deleted after the thread has ended
    m_worker->moveToThread(m_thread);
    connect(this, &MainWindow::requestLoad, m_worker, &EngineHost::loadModel, Qt::QueuedConnection);
    connect(this, &MainWindow::requestGenerate, m_worker, &EngineHost::generate, Qt::QueuedConnection);
    connect(this, &MainWindow::requestValidate, m_worker, &EngineHost::validateConfig, Qt::QueuedConnection);
    connect(m_worker, &EngineHost::loadStarted, this, &MainWindow::onLoadStarted, Qt::QueuedConnection);
    connect(m_worker, &EngineHost::importProgress, this, &MainWindow::onImportProgress, Qt::QueuedConnection);
    connect(m_worker, &EngineHost::modelLoaded, this, &MainWindow::onModelLoaded, Qt::QueuedConnection);
    connect(m_worker, &EngineHost::modelLoadFailed, this, &MainWindow::onModelLoadFailed, Qt::QueuedConnection);
    connect(m_worker, &EngineHost::runStarted, this, &MainWindow::onRunStarted, Qt::QueuedConnection);
    connect(m_worker, &EngineHost::tokenEvent, this, &MainWindow::onTokenEvent, Qt::QueuedConnection);
    connect(m_worker, &EngineHost::progress, this, &MainWindow::onProgress, Qt::QueuedConnection);
    connect(m_worker, &EngineHost::runFinished, this, &MainWindow::onRunFinished, Qt::QueuedConnection);
    connect(m_worker, &EngineHost::runFailed, this, &MainWindow::onRunFailed, Qt::QueuedConnection);
    connect(m_worker, &EngineHost::lensReady, this, &MainWindow::onLensReady, Qt::QueuedConnection);
    connect(m_worker, &EngineHost::lensFailed, this, &MainWindow::onLensFailed, Qt::QueuedConnection);
    connect(m_worker, &EngineHost::configChecked, this, [this](quint64 ticket, const QString& err) {
        if (ticket != m_validateTicket) return;
        m_config->setEngineVerdict(err);
        if (err.isEmpty() && m_notStarted && !isRunning()) {  // the reason it gave is gone
            m_notStarted = false;
            m_stateLabel->setText("ready: the config is valid");
        }
    }, Qt::QueuedConnection);
    m_thread->start();
    m_jobs = new AnalysisJobs(m_worker);  // deleted before m_worker (shutdownWorker)

    // Plots and the output are drawn at ~30 Hz, never once per token.
    m_frameTimer = new QTimer(this);
    m_frameTimer->setInterval(33);
    connect(m_frameTimer, &QTimer::timeout, this, &MainWindow::onFrame);
    m_frameTimer->start();
    m_validateTimer = new QTimer(this);
    m_validateTimer->setSingleShot(true);
    m_validateTimer->setInterval(300);
    connect(m_validateTimer, &QTimer::timeout, this, [this] {
        if (!m_hasModel) return;
        QString err;
        if (auto req = makeRequest(&err)) emit requestValidate(++m_validateTicket, *req);
    });
    updateActions();
    updateTitle();
}

MainWindow::~MainWindow() { shutdownWorker(); }

std::shared_ptr<tinyloop::Model> MainWindow::loadedModel() const { return m_worker->sharedModel(); }

QString MainWindow::promptText() const { return m_prompt->toPlainText(); }

std::optional<tinyloop::analysis::ModeSpec> MainWindow::configuredRun(QString* error) const {
    QString err;
    const auto cfg = m_config->config(&err);
    const auto knobs = cfg ? m_config->knobs(&err) : std::nullopt;
    if (!cfg || !knobs) {
        if (error) *error = err;
        return std::nullopt;
    }
    tinyloop::analysis::ModeSpec m;
    m.label = QString("workbench: %1").arg(modeLabel(m_config->mode())).toStdString();
    m.run = tinyloop::RunSpec{m_config->mode(), *cfg, *knobs};
    return m;
}

bool MainWindow::savePreset(const Preset& preset, QString* error) {
    if (!m_presets->store().save(preset, error)) return false;
    m_presets->reload();
    return true;
}

void MainWindow::shutdownWorker() {
    if (m_shutDown) return;
    m_shutDown = true;
    m_frameTimer->stop();
    // The analysis lane first: its jobs hold the host's model.
    delete m_jobs;
    m_jobs = nullptr;
    // Stop whatever runs (within one token), then let the thread's loop end and join it.
    m_worker->shutdown();
    m_thread->quit();
    m_thread->wait();
    delete m_worker;
    m_worker = nullptr;
}

void MainWindow::closeEvent(QCloseEvent* e) {
    QSettings().setValue("window/geometry", saveGeometry());
    m_views->closeAll();  // they run on the engine host, which ends now
    shutdownWorker();
    e->accept();
}

void MainWindow::buildUi() {
    fitToScreen(this, QSize(1400, 900));
    auto* center = new QSplitter(Qt::Horizontal);
    auto* left = new QSplitter(Qt::Vertical);
    m_prompt = new PromptEditor;
    m_prompt->setPlainText("In the beginning");
    connect(m_prompt, &PromptEditor::generateRequested, this, [this] { generate(); });
    connect(m_prompt, &QPlainTextEdit::textChanged, this, &MainWindow::scheduleValidation);
    auto* outBox = new QWidget;
    auto* ov = new QVBoxLayout(outBox);
    ov->setContentsMargins(0, 0, 0, 0);
    auto* shadeRow = new QHBoxLayout;
    shadeRow->addWidget(new QLabel("shade tokens by:"));
    m_shadeBox = new QComboBox;
    m_shadeBox->setObjectName("shadeMeasure");
    m_shadeBox->addItem("depth used", int(ShadeMeasure::Depth));
    m_shadeBox->addItem("probability", int(ShadeMeasure::Probability));
    m_shadeBox->addItem("entropy", int(ShadeMeasure::Entropy));
    shadeRow->addWidget(m_shadeBox);
    shadeRow->addStretch(1);
    ov->addLayout(shadeRow);
    m_output = new TokenView;
    ov->addWidget(m_output, 1);
    connect(m_shadeBox, &QComboBox::currentIndexChanged, this,
            [this](int) { m_output->setMeasure(static_cast<ShadeMeasure>(m_shadeBox->currentData().toInt())); });
    left->addWidget(m_prompt);
    left->addWidget(outBox);
    left->setStretchFactor(0, 1);
    left->setStretchFactor(1, 3);

    m_plotTabs = new QTabWidget;
    m_plotTabs->setObjectName("plotTabs");
    m_heatmap = new LensHeatmap;
    m_depth = new DepthPlot;
    m_spec = new SpeculativePlot;
    m_timing = new TimingPlot;
    m_plotTabs->addTab(withCaption(m_heatmap, kLensCaption), "Logit lens");
    m_plotTabs->addTab(withCaption(m_depth, kDepthCaption), "Depth per token");
    m_plotTabs->addTab(withCaption(m_spec, kSpeculativeCaption), "Speculative");
    m_plotTabs->addTab(withCaption(m_timing, kTimingCaption), "Timing");
    center->addWidget(left);
    center->addWidget(m_plotTabs);
    // The plots take the larger share: the lens heatmap is what a class looks at.
    center->setStretchFactor(0, 1);
    center->setStretchFactor(1, 2);
    center->setSizes({420, 840});
    setCentralWidget(center);

    m_config = new ConfigPanel;
    connect(m_config, &ConfigPanel::changed, this, &MainWindow::scheduleValidation);
    m_presets = new PresetsPanel(m_config, m_opts.presetDir);
    connect(m_presets, &PresetsPanel::promptRequested, this, &MainWindow::setPrompt);
    // A preset made for another model: open that model, then apply the preset on it.
    connect(m_presets, &PresetsPanel::modelRequested, this, [this](const QString& path, const QString& preset) {
        m_presetAfterLoad = preset;
        openModel(path);
    });
    // Without dialogs (tests, screenshot runs) such a preset is refused, the reason in the panel.
    if (!m_opts.errorDialogs) m_presets->setModelChooser([](const ModelMismatch&) { return ModelChoice::Cancel; });
    m_modelPanel = new ModelPanel;
    m_backend = m_loadedBackend = QSettings().value("backend", "auto").toString();
    if (m_backend != "cpu" && m_backend != "cuda") m_backend = m_loadedBackend = "auto";
    m_modelPanel->setBackendChoice(m_backend);
    connect(m_modelPanel, &ModelPanel::backendChosen, this, &MainWindow::setBackend);
    auto* cfgDock = new QDockWidget("Generate config", this);
    cfgDock->setObjectName("configDock");
    cfgDock->setWidget(m_config);
    auto* presetDock = new QDockWidget("Presets", this);
    presetDock->setObjectName("presetDock");
    presetDock->setWidget(m_presets);
    auto* modelDock = new QDockWidget("Model", this);
    modelDock->setObjectName("modelDock");
    modelDock->setWidget(m_modelPanel);
    addDockWidget(Qt::LeftDockWidgetArea, cfgDock);
    addDockWidget(Qt::LeftDockWidgetArea, presetDock);
    tabifyDockWidget(presetDock, modelDock);
    presetDock->raise();
    resizeDocks({cfgDock}, {std::min(440, width() * 28 / 100)}, Qt::Horizontal);  // narrower on a projector's 1280 px
    resizeDocks({cfgDock, presetDock}, {620, 220}, Qt::Vertical);

    m_stateLabel = new QLabel("starting");
    m_stateLabel->setObjectName("stateLabel");
    m_stateLabel->setWordWrap(true);  // a long message wraps instead of widening the window past the screen
    m_speedLabel = new QLabel;
    m_speedLabel->setObjectName("speedLabel");
    m_busy = new QProgressBar;
    m_busy->setRange(0, 0);  // busy indicator: the loader reports no fractions
    m_busy->setMaximumWidth(120);
    m_busy->hide();
    m_noiseLabel = new QLabel("random model: text is noise");
    m_noiseLabel->setObjectName("noiseLabel");
    m_noiseLabel->setStyleSheet("color: #b00; font-weight: bold;");
    m_noiseLabel->hide();
    statusBar()->addWidget(m_stateLabel, 1);
    statusBar()->addPermanentWidget(m_noiseLabel);
    statusBar()->addPermanentWidget(m_speedLabel);
    statusBar()->addPermanentWidget(m_busy);
    m_cancelImport = new QPushButton("Cancel import");
    m_cancelImport->setObjectName("cancelImportButton");
    m_cancelImport->hide();
    connect(m_cancelImport, &QPushButton::clicked, this, [this] {
        m_worker->cancelImport();
        m_cancelImport->setEnabled(false);
        m_stateLabel->setText("cancelling the import ...");
    });
    statusBar()->addPermanentWidget(m_cancelImport);
}

void MainWindow::buildMenus() {
    auto* file = menuBar()->addMenu("&File");
    m_openAct = file->addAction("&Open model...", QKeySequence::Open, this, [this] {
        const QString p = QFileDialog::getOpenFileName(this, "Open a TinyLoop model",
                                                       QFileInfo(m_modelPath).absolutePath(),
                                                       "TinyLoop models (*.tinyloop);;All files (*)");
        if (!p.isEmpty()) openModel(p);
    });
    file->addAction("Open Hugging Face &folder...", this, [this] {
        // Ouro (OuroForCausalLM) or Huginn-0125 (RavenForCausalLM): config.json, safetensors,
        // tokenizer.json. Imported once (bf16, exact) into the import cache, then opened from it.
        const QString p = QFileDialog::getExistingDirectory(this, "Open a Hugging Face checkpoint folder",
                                                            QFileInfo(m_modelPath).absolutePath());
        if (!p.isEmpty()) openModel(p);
    })->setObjectName("openFolderAction");
    m_recentMenu = file->addMenu("Open &recent");
    rebuildRecentMenu();
    file->addSeparator();
    file->addAction("Open &session...", this, [this] {
        const QString p = QFileDialog::getOpenFileName(this, "Open a saved session", QString(),
                                                       "Workbench sessions (*.json);;All files (*)");
        QString err;
        if (!p.isEmpty() && !openSession(p, &err)) showError("Session not opened", err);
    })->setObjectName("openSessionAction");
    file->addAction("Sa&ve session...", QKeySequence::Save, this, [this] {
        const QString p = QFileDialog::getSaveFileName(this, "Save session", "session.json", "JSON (*.json)");
        QString err;
        if (!p.isEmpty() && !exportSessionJson(p, &err)) showError("Save failed", err);
    })->setObjectName("saveSessionAction");
    file->addAction("Export session as &Markdown...", this, [this] {
        const QString p = QFileDialog::getSaveFileName(this, "Export session", "session.md", "Markdown (*.md)");
        QString err;
        if (!p.isEmpty() && !exportSessionMarkdown(p, &err)) showError("Export failed", err);
    });
    file->addAction("Export current &plot (PNG/PDF)...", this, [this] {
        const QString name = m_plotTabs->tabText(m_plotTabs->currentIndex());
        const QString p = QFileDialog::getSaveFileName(this, "Export plot", QString(name).replace(' ', '-').toLower() + ".png",
                                                       "PNG (*.png);;PDF (*.pdf)");
        QString err;
        if (!p.isEmpty() && !exportPlot(name, p, &err)) showError("Export failed", err);
    });
    file->addAction("Export &all plots to a folder...", this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, "Export all plots");
        if (dir.isEmpty()) return;
        for (const auto& [name, plot] : plots()) {
            QString err;
            const QString stem = dir + "/" + QString(name).replace(' ', '-').toLower();
            if (!savePlot(plot, stem + ".png", &err) || !savePlot(plot, stem + ".pdf", &err))
                return showError("Export failed", err);
        }
        m_stateLabel->setText("plots written to " + dir);
    });
    file->addSeparator();
    file->addAction("&Quit", QKeySequence::Quit, this, &QWidget::close);

    auto* run = menuBar()->addMenu("&Run");
    m_generateAct = run->addAction("&Generate", this, [this] { generate(); });
    m_generateAct->setShortcuts({QKeySequence(Qt::CTRL | Qt::Key_Return), QKeySequence(Qt::CTRL | Qt::Key_Enter)});
    m_generateAct->setShortcutContext(Qt::WindowShortcut);
    m_stopAct = run->addAction("&Stop", this, [this] { stop(); });
    m_stopAct->setShortcut(QKeySequence(Qt::Key_Escape));
    m_stopAct->setShortcutContext(Qt::WindowShortcut);

    installViewMenu(this, menuBar()->addMenu("Vie&w"));  // zoom, presentation mode, theme

    // The analysis views (views/analysis_views.h), one action per view.
    auto* views = menuBar()->addMenu("&Analysis");
    views->setObjectName("viewsMenu");
    m_views = new AnalysisViews(this, this);
    m_views->install(views);

    auto* help = menuBar()->addMenu("&Help");
    help->setObjectName("helpMenu");
    auto* glossary = help->addAction("&Glossary...", this, [this] { showGlossary(this); });
    glossary->setObjectName("glossaryAction");
    glossary->setShortcut(QKeySequence::HelpContents);
    auto* tour = help->addAction("&Tour...", this, [this] { startTour(); });
    tour->setObjectName("tourAction");
    help->addSeparator();
    help->addAction("&About", this, [this] {
        QMessageBox::about(this, "TinyLoop Workbench",
                           QString("TinyLoop Workbench %1\nA workbench for weight-shared looped transformers.")
                               .arg(TINYLOOP_VERSION));
    });

    auto* tb = addToolBar("Main");
    tb->setObjectName("mainToolbar");
    tb->addAction(m_openAct);
    tb->addAction(m_generateAct);
    tb->addAction(m_stopAct);
    m_generateAct->setToolTip("Generate (Ctrl+Enter)");
    m_stopAct->setToolTip("Stop (Esc): ends within one token");
}

void MainWindow::updateActions() {
    const bool running = m_currentRun != 0;
    m_generateAct->setEnabled(m_hasModel && !running && !m_loading);
    m_stopAct->setEnabled(running);
    m_openAct->setEnabled(!m_loading);
    m_modelPanel->backendChoice()->setEnabled(!m_loading && !running);
    m_busy->setVisible(m_loading || running);
}

void MainWindow::updateTitle() {
    QString t = "TinyLoop Workbench";
    if (m_hasModel) t += " - " + m_modelName;
    if (m_hasModel && m_randomFallback) t += " - random model: text is noise";
    setWindowTitle(t);
    m_noiseLabel->setVisible(m_hasModel && m_randomFallback);
}

void MainWindow::showError(const QString& title, const QString& text) {
    m_lastError = text;
    m_stateLabel->setText(title + ": " + text);
    if (!m_opts.errorDialogs) return;
    if (m_errorBox) m_errorBox->close();
    m_errorBox = new QMessageBox(QMessageBox::Critical, title, text, QMessageBox::Ok, this);
    m_errorBox->setObjectName("errorDialog");
    m_errorBox->setAttribute(Qt::WA_DeleteOnClose);
    m_errorBox->open();  // window-modal, does not block the event loop
}

void MainWindow::addRecent(const QString& path) {
    QSettings s;
    QStringList r = s.value("recentFiles").toStringList();
    r.removeAll(path);
    r.prepend(path);
    while (r.size() > 8) r.removeLast();
    s.setValue("recentFiles", r);
    rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
    m_recentMenu->clear();
    const QStringList r = QSettings().value("recentFiles").toStringList();
    for (const QString& p : r) m_recentMenu->addAction(p, this, [this, p] { openModel(p); });
    m_recentMenu->setEnabled(!r.isEmpty());
}

void MainWindow::openModel(const QString& path, bool randomFallback) {
    if (m_shutDown) return;
    m_loading = true;
    m_pendingRandom = randomFallback;
    m_stateLabel->setText("loading " + path);
    updateActions();
    m_pendingBackend = m_backend;
    m_requestedPath = path;
    emit requestLoad(path, m_backend);
}

bool MainWindow::applyPreset(const QString& name, QString* error) {
    if (!m_presets->applyPreset(name, error)) return false;
    if (!m_hasModel || m_loading) m_presetAfterLoad = name;
    return true;
}

void MainWindow::setBackend(const QString& name) {
    if (name != "auto" && name != "cpu" && name != "cuda") return;
    m_backend = name;
    m_modelPanel->setBackendChoice(name);
    if (m_loading) return;
    // The open model again on the chosen back end; with none open (a refused first load), the file
    // that was asked for.
    if (m_hasModel && name != m_loadedBackend) openModel(m_modelPath, m_randomFallback);
    else if (!m_hasModel && !m_requestedPath.isEmpty()) openModel(m_requestedPath, m_pendingRandom);
}

void MainWindow::onLoadStarted(const QString& path) { m_stateLabel->setText("loading " + path + " ..."); }

void MainWindow::onImportProgress(const QString& folder, int done, int count, double fraction) {
    if (!m_loading) return;  // a late report after the load ended
    m_importing = true;
    m_busy->setRange(0, 1000);
    m_busy->setValue(static_cast<int>(fraction * 1000.0 + 0.5));
    m_busy->setVisible(true);
    m_cancelImport->setVisible(true);
    m_stateLabel->setText(QString("importing %1: %2 of %3 tensors (%4%) - once; later opens read the cache")
                              .arg(QFileInfo(folder).fileName())
                              .arg(done)
                              .arg(count)
                              .arg(static_cast<int>(fraction * 100.0)));
}

void MainWindow::endImport() {
    m_importing = false;
    m_busy->setRange(0, 0);
    m_cancelImport->hide();
    m_cancelImport->setEnabled(true);
}

void MainWindow::onModelLoaded(const ModelLoaded& m) {
    m_loading = false;
    endImport();
    m_hasModel = true;
    m_hp = m.info.hparams;
    m_modelPath = QString::fromStdString(m.info.path);
    m_randomFallback = m_pendingRandom || ModelPanel::isRandomModel(m.info);
    m_modelPanel->setModel(m, m_randomFallback);
    m_loadedBackend = m_pendingBackend;
    m_modelPanel->setBackendChoice(m_loadedBackend);
    QSettings().setValue("backend", m_loadedBackend);
    // What the user opened: a Hugging Face folder is named, remembered and saved in sessions as the
    // folder (reopening it reads the cache); m_modelPath stays the file the views read and write.
    m_openedPath = m.sourceFolder.isEmpty() ? m_modelPath : m.sourceFolder;
    m_modelName = m.sourceFolder.isEmpty() ? modelDisplayName(m_modelPath)  // the folder too: the bundled models share file names
                                           : QFileInfo(m.sourceFolder).fileName() + " (Hugging Face folder)";
    m_session.modelPath = m_openedPath;
    m_session.modelSummary = m_modelPanel->summaryLine();
    ConfigLimits lim;
    lim.max_loops = m_hp.max_loops;
    lim.max_seq_len = m_hp.max_seq_len;
    lim.vocab_size = m_hp.vocab_size;
    m_config->setLimits(lim);
    m_config->setModelDefaults(m.defaults, m.recommended);  // before a preset or a session sets its own
    m_output->setVocab(m.vocab);
    m_output->setMaxDepth(m_hp.max_loops);
    m_heatmap->setVocab(m.vocab);
    m_presets->setModelPath(m_modelPath);
    m_presets->applyDefaultForModel();
    if (!m_presetAfterLoad.isEmpty()) {  // the preset this model was opened for
        const QString preset = std::exchange(m_presetAfterLoad, QString());
        m_presets->applyPreset(preset);
    }
    if (m_sessionConfig) {  // an opened session shows the config it was run with
        m_config->setMode(m_session.run.mode);
        m_config->setConfig(m_session.run.config);
        m_config->setKnobs(m_session.run.speculation);
        m_prompt->setPlainText(m_session.run.prompt);
    }
    addRecent(m_openedPath);
    m_stateLabel->setText(QString("loaded %1%2%3").arg(m_modelPanel->summaryLine(),
                                                       m.sourceFolder.isEmpty() ? QString()
                                                       : m.importedNow ? QString("  -  imported from %1 into the cache").arg(m.sourceFolder)
                                                                       : QString("  -  %1 read from the import cache").arg(m.sourceFolder),
                                                     m_randomFallback ? "  -  random model: text is noise" : ""));
    if (m_sessionConfig) m_stateLabel->setText(m_sessionNote + "; " + m_stateLabel->text());  // what is on screen
    updateTitle();
    updateActions();
    scheduleValidation();
    emit modelReady(true);
}

void MainWindow::onModelLoadFailed(const QString& path, const QString& message) {
    m_loading = false;
    endImport();
    m_presetAfterLoad.clear();
    updateActions();
    if (m_hasModel) {  // the loaded model keeps its back end; the next load asks for it again
        m_backend = m_loadedBackend;
        m_modelPanel->setBackendChoice(m_loadedBackend);
    }
    QString why = message;
    if (message.contains("magic: not TINYLOOP"))  // the loader's field and range, said for a person
        why = "this is not a TinyLoop model: a .tinyloop file begins with the letters TINYLOOP, and this "
              "file does not (it may be another kind of file, or a model for another program)";
    QString text = QString("Could not open %1%2:\n%3")
                       .arg(path, m_pendingBackend == "auto" ? QString() : " on the " + m_pendingBackend + " back end", why);
    if (m_hasModel) text += QString("\n\n%1 stays loaded.").arg(m_modelName);
    showError("Model not loaded", text);
    emit modelReady(false);
}

std::optional<RunRequest> MainWindow::makeRequest(QString* error) {
    auto cfg = m_config->config(error);
    if (!cfg) return std::nullopt;
    auto knobs = m_config->knobs(error);
    if (!knobs) return std::nullopt;
    RunRequest r;
    r.prompt = m_prompt->toPlainText();
    r.mode = m_config->mode();
    r.config = *cfg;
    r.speculation = *knobs;
    r.grammarFile = m_config->grammarFile();
    return r;
}

void MainWindow::scheduleValidation() {
    if (!m_shutDown) m_validateTimer->start();
}

bool MainWindow::generate() {
    if (m_shutDown) return false;
    if (m_currentRun != 0) return false;
    if (!m_hasModel) {
        m_stateLabel->setText("no model loaded");
        return false;
    }
    QString err;
    auto req = makeRequest(&err);
    if (req && !m_config->message().isEmpty()) {  // the engine refused this config already
        err = m_config->message();
        req.reset();
    }
    if (req && req->prompt.isEmpty()) {  // as the CLI: the model would only continue its end-of-text token
        err = "prompt: the prompt is empty (at least one token is needed); type the text to continue";
        req.reset();
    }
    if (!req) {
        m_stateLabel->setText("not started: " + err);
        m_notStarted = true;
        return false;
    }
    m_notStarted = false;
    m_sessionConfig = false;
    req->id = m_nextRunId++;
    m_currentRun = req->id;
    m_awaitLens = req->id;
    m_liveTps = 0;
    m_pendingRun = *req;
    m_showsPrevious = true;  // the engine may still refuse the run: keep the last one on screen
    m_speedLabel->setText("0 tok/s");
    m_stateLabel->setText(QString("generating (%1)...").arg(modeLabel(req->mode)));
    updateActions();
    emit requestGenerate(*req);
    return true;
}

void MainWindow::startShowingRun() {
    if (!m_showsPrevious) return;
    m_showsPrevious = false;
    const RunRequest& req = m_pendingRun;
    m_session.clearRun();
    m_session.run.id = req.id;
    m_session.run.prompt = req.prompt;
    m_session.run.mode = req.mode;
    m_session.run.config = req.config;
    m_session.run.speculation = req.speculation;
    m_session.run.grammarFile = req.grammarFile;
    m_session.run.promptLen = m_pendingPromptLen;
    const int loops = configDepth(req.config, m_hp);
    m_output->clearTokens(req.prompt);
    m_heatmap->clear(loops);
    m_depth->clear(loops);
    showGateThreshold(m_depth, req.mode, req.config);
    m_spec->clear();
    m_liveCycles.clear();
    m_lastCycle = -1;
    m_cyclesDirty = false;
}

bool MainWindow::openSession(const QString& path, QString* error) {
    if (m_currentRun != 0) {
        if (error) *error = "a run is in progress: stop it first";
        return false;
    }
    Session s;
    if (!readSessionFile(path, &s, error)) return false;
    s.finished = true;
    if (m_hasModel) {  // the panel shows this model's file; the session keeps the one it was run on
        s.modelPath = s.modelPath.isEmpty() ? m_modelPath : s.modelPath;
    }
    m_session = std::move(s);
    m_showsPrevious = false;
    m_awaitLens = 0;
    m_sessionConfig = true;
    showSession();
    QString note = QString("session %1: %2 tokens, %3").arg(QFileInfo(path).fileName())
                       .arg(m_session.events.size()).arg(modeLabel(m_session.run.mode));
    if (!m_session.modelPath.isEmpty() && m_hasModel && QFileInfo(m_session.modelPath) != QFileInfo(m_modelPath))
        note += QString(" (recorded on %1; %2 is loaded)").arg(QFileInfo(m_session.modelPath).fileName(), m_modelName);
    m_stateLabel->setText(note);
    m_sessionNote = note;
    m_notStarted = false;
    return true;
}

void MainWindow::showSession() {
    const Session& s = m_session;
    m_prompt->setPlainText(s.run.prompt);
    m_config->setMode(s.run.mode);
    m_config->setConfig(s.run.config);
    m_config->setKnobs(s.run.speculation);
    m_config->setGrammarFile(s.run.grammarFile);
    const int loops = std::max(1, s.lens ? s.lens->loops : s.run.loops);
    m_output->clearTokens(s.run.prompt);
    m_heatmap->clear(loops);
    m_depth->clear(loops);
    showGateThreshold(m_depth, s.run.mode, s.run.config);
    m_spec->clear();
    for (const auto& ev : s.events) {
        m_output->addToken(ev);
        m_heatmap->addEvent(ev);
        m_depth->addEvent(ev);
    }
    if (s.lens) m_heatmap->setExactLens(*s.lens, s.run.promptLen);
    m_liveCycles = s.run.cycles;
    m_cyclesDirty = false;
    if (s.run.hasSpeculative) {
        m_spec->setCycles(s.run.cycles);
        m_spec->setStats(s.run.stats);
    }
    m_timing->setRuns(s.history);
    onFrame();
    m_speedLabel->clear();
}

void MainWindow::stop() {
    if (m_currentRun != 0 && m_worker) m_worker->requestStop(m_currentRun);
}

void MainWindow::setPrompt(const QString& text) { m_prompt->setPlainText(text); }

Tour* MainWindow::startTour(int step) {
    if (!m_tour) m_tour = new Tour(this);
    m_tour->goTo(step);
    return m_tour;
}

QString MainWindow::speedText() const { return m_speedLabel->text(); }

void MainWindow::onRunStarted(quint64 id, int promptLen) {
    if (id != m_currentRun) return;
    m_pendingPromptLen = promptLen;
    if (!m_showsPrevious) m_session.run.promptLen = promptLen;
}

void MainWindow::onTokenEvent(quint64 id, const tinyloop::TokenEvent& ev) {
    if (id != m_currentRun) return;
    startShowingRun();
    m_session.events.push_back(ev);
    m_output->addToken(ev);
    m_heatmap->addEvent(ev);
    m_depth->addEvent(ev);
    if (ev.cycle >= 0 && ev.cycle != m_lastCycle) {
        m_liveCycles.push_back(SpecCycle{static_cast<int>(ev.drafted.size()), ev.accepted});
        m_lastCycle = ev.cycle;
        m_cyclesDirty = true;
    }
}

void MainWindow::onProgress(quint64 id, int emitted, double tps) {
    if (id != m_currentRun) return;
    m_liveTps = tps;
    m_speedLabel->setText(QString("%1 tok/s (%2 tokens)").arg(tps, 0, 'f', 1).arg(emitted));
}

void MainWindow::onFrame() {
    m_output->flush();
    m_heatmap->refresh();
    m_depth->refresh();
    if (m_cyclesDirty) {
        m_cyclesDirty = false;
        m_spec->setCycles(m_liveCycles);
    }
}

void MainWindow::onRunFinished(const RunResult& r) {
    if (r.id != m_currentRun) return;
    startShowingRun();
    m_currentRun = 0;
    m_session.run = r;
    m_session.finished = true;
    RunSummary s;
    s.id = r.id;
    s.mode = modeName(r.mode);
    s.tokens = r.stats.tokens_emitted;
    s.prefillMs = r.stats.prefill_ms;
    s.firstTokenMs = r.stats.first_token_ms;
    s.decodeMs = r.stats.decode_ms;
    s.totalMs = r.stats.total_ms;
    // Beam search hands its tokens over at the end, so its decode phase is empty: rate over the call.
    s.tokensPerSecond = r.mode == DecodeMode::Beam && r.stats.total_ms > 0
                            ? r.stats.tokens_emitted * 1000.0 / r.stats.total_ms
                            : r.stats.decode_tokens_per_s();
    m_session.history.push_back(s);
    m_timing->setRuns(m_session.history);
    if (r.hasSpeculative) {
        m_spec->setCycles(r.cycles);
        m_spec->setStats(r.stats);
    }
    onFrame();
    m_speedLabel->setText(QString("%1 tok/s").arg(s.tokensPerSecond, 0, 'f', 1));
    QString done = QString("done: %1 tokens, %2; prefill %3 ms, decode %4 tok/s")
                       .arg(r.stats.tokens_emitted)
                       .arg(stopReasonText(r.stats.stop_reason))
                       .arg(r.stats.prefill_ms, 0, 'f', 1)
                       .arg(s.tokensPerSecond, 0, 'f', 1);
    if (r.mode == DecodeMode::EarlyExit)
        done += ". Early exit: " + earlyExitSummary(m_session.events, configDepth(r.config, m_hp),
                                                    r.config, r.stats.stop_reason == tinyloop::StopReason::EOS);
    m_stateLabel->setText(done);
    // what the engine's resolver decided (resolve_run's messages), one line per field
    m_stateLabel->setToolTip(r.resolvedNotes.isEmpty() ? done
                                                       : done + "\n\nResolved by the engine:\n" + r.resolvedNotes.join('\n'));
    updateActions();
    emit runEnded(r.id, true);
}

void MainWindow::onRunFailed(quint64 id, const QString& message) {
    if (id != m_currentRun) return;
    m_currentRun = 0;
    m_awaitLens = 0;
    m_showsPrevious = false;  // nothing of the refused run was shown: the last one stays
    m_lastError = message;
    m_config->setEngineVerdict(message);
    m_stateLabel->setText("run failed: " + message + " (the previous output stays)");
    updateActions();
    emit runEnded(id, false);
    emit sessionSettled();
}

void MainWindow::onLensFailed(quint64 id, const QString& message) {
    if (id != m_awaitLens || id != m_session.run.id) return;
    m_awaitLens = 0;  // the run is over: what waits for its exact lens (the tour, a saved session) goes on
    m_stateLabel->setText(m_stateLabel->text() + " (exact lens unavailable: " + message + "; the streamed rows stay)");
    emit sessionSettled();
}

void MainWindow::onLensReady(const LensReady& l) {
    if (l.id != m_awaitLens || l.id != m_session.run.id) return;
    m_awaitLens = 0;
    m_session.lens = l.lens;
    if (m_session.run.mode == DecodeMode::Beam && l.lens.loops > 0) {
        // Beam search hands its winner over with no per-token probability: the model's
        // probability of each token (the exact lens at the final depth) shades it instead.
        std::vector<float> probs;
        for (size_t k = 0; k < m_session.events.size(); ++k) {
            const int pos = l.promptLen - 1 + static_cast<int>(k);
            if (pos < 0 || pos >= l.lens.n_positions) break;
            probs.push_back(std::max(0.0f, l.lens.at(pos, l.lens.loops).p_next));
            m_session.events[k].prob = probs.back();
        }
        m_output->setProbabilities(probs);
    }
    m_heatmap->setExactLens(l.lens, l.promptLen);
    m_heatmap->refresh();
    emit sessionSettled();
}

bool MainWindow::exportSessionJson(const QString& path, QString* error) const {
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) {
        if (error) *error = f.errorString();
        return false;
    }
    const std::string s = sessionToJson(m_session).dump(2) + "\n";
    return f.write(s.data(), qint64(s.size())) == qint64(s.size());
}

bool MainWindow::exportSessionMarkdown(const QString& path, QString* error) const {
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) {
        if (error) *error = f.errorString();
        return false;
    }
    return f.write(sessionToMarkdown(m_session).toUtf8()) >= 0;
}

QList<QPair<QString, QCustomPlot*>> MainWindow::plots() const {
    return {{"Logit lens", m_heatmap->plot()},
            {"Depth per token", m_depth->plot()},
            {"Speculative", m_spec->plot()},
            {"Timing", m_timing->plot()}};
}

bool MainWindow::exportPlot(const QString& name, const QString& path, QString* error) {
    for (const auto& [n, p] : plots())
        if (n == name) return savePlot(p, path, error);
    if (error) *error = "no plot named " + name;
    return false;
}

}  // namespace tlui
