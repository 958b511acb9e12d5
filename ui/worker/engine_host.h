// EngineHost: the one engine host. It lives on its own QThread and owns the one loaded Model,
// which it shares (sharedModel) with the analysis views' job lane (AnalysisJobs): the engine is
// thread-safe by contract, so nothing loads a second copy. The GUI thread talks to it only through
// queued slots and signals, except for requestStop/shutdown, which set atomics the token observer
// reads (so Stop lands within one token even while a generate slot is running).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <QMetaType>
#include <QObject>
#include <QString>
#include <QStringList>

#include <tinyloop/tinyloop.h>

#include "base/config_json.h"

namespace tlui {

// A run is the engine's RunSpec (mode, config, speculation knobs: 0 = the engine resolves them)
// plus what the workbench asks around it.
struct RunRequest : tinyloop::RunSpec {
    quint64 id = 0;
    QString prompt;
    QString grammarFile;     // "" = none; parsed on the worker for this run
    bool lens = true;        // per-token lens rows in the TokenEvents
    int lensTopK = 5;
    bool exactLens = true;   // after the run: score_logit_lens over prompt + output
};

// Per speculative cycle (filled when the engine reports cycles).
struct SpecCycle {
    int drafted = 0;
    int accepted = 0;
};

struct RunResult : tinyloop::RunSpec {  // the run as asked (knobs left at 0 stay 0)
    quint64 id = 0;
    QString grammarFile;
    QString prompt;
    std::vector<int32_t> tokens;  // prompt followed by the continuation
    int promptLen = 0;
    QString text;                 // the continuation
    tinyloop::GenerateStats stats;
    bool hasSpeculative = false;  // speculative counters below are meaningful
    std::vector<SpecCycle> cycles;
    int loops = 0;                // the depth the run asked for (config.loops resolved)
    QStringList resolvedNotes;    // the engine resolver's messages: "key: value (source)" per field
};

struct ModelLoaded {
    tinyloop::ModelInfo info;
    // What the user opened when it is not info.path: a Hugging Face checkpoint folder, imported
    // into the import cache (info.path is the cached file). Empty for a .tinyloop file.
    QString sourceFolder;
    bool importedNow = false;  // the folder was converted by this load (false: read from the cache)
    quint64 vramBytes = 0;
    QStringList vocab;  // printable text of every id the tokenizer can decode (hover tooltips)
    // The file's recommended settings (metadata "recommended"; empty when it has none) and the
    // config a front end shows before the user sets anything (tinyloop::recommended_config:
    // its early-exit fields the model's, else the built-in defaults).
    tinyloop::Recommendation recommended;
    tinyloop::GenerateConfig defaults;
};

struct LensReady {
    quint64 id = 0;
    int promptLen = 0;
    tinyloop::LensResult lens;
};

void registerEngineMetaTypes();  // idempotent

class EngineHost : public QObject {
    Q_OBJECT
public:
    explicit EngineHost(QObject* parent = nullptr);
    ~EngineHost() override;

    // Thread-safe: any run with id <= upToId ends at its next token (or does not start).
    void requestStop(quint64 upToId);
    // Thread-safe: every run, queued or running, stops; used before quit()/wait().
    void shutdown();
    bool hasModel() const { return sharedModel() != nullptr; }
    // Thread-safe: the loaded model (null before the first load) and its file. A holder keeps a
    // model alive across a later load; the host frees it when the last holder lets go.
    std::shared_ptr<tinyloop::Model> sharedModel() const;
    QString modelPath() const;

public slots:
    // Loads `path` on the back end named `backend`: "auto" (CUDA when a usable device exists,
    // else the CPU), "cpu" or "cuda" (refused with the engine's reason where no device is usable).
    // A refused load leaves the loaded model, and its back end, in place.
    // A .tinyloop file, or a Hugging Face checkpoint folder: imported once into the import cache
    // (tinyloop::import_hf_cached, reporting importProgress per tensor; cancelImport stops it and
    // the load fails with "import cancelled", the loaded model staying), then loaded from there.
    void loadModel(const QString& path, const QString& backend = QStringLiteral("auto"));
    // Thread-safe (an atomic): called directly from the GUI thread while loadModel imports.
    void cancelImport() { m_importCancel.store(true); }
    // Where imports are cached ("" = tinyloop::default_import_cache_dir()); set before loading.
    void setImportCacheDir(const QString& dir) { m_importCacheDir = dir; }
    void generate(const tlui::RunRequest& req);
    // Checks req.config with tinyloop::validate_config on the loaded model (prompt tokenized);
    // answers with configChecked(ticket, "") or the engine's reason.
    void validateConfig(quint64 ticket, const tlui::RunRequest& req);

signals:
    void loadStarted(const QString& path);
    // A folder's import: `done` of `count` tensors, `fraction` of the source bytes converted.
    void importProgress(const QString& folder, int done, int count, double fraction);
    void modelLoaded(const tlui::ModelLoaded& m);
    void modelLoadFailed(const QString& path, const QString& message);
    void runStarted(quint64 id, int promptLen);
    void tokenEvent(quint64 id, const tinyloop::TokenEvent& ev);
    void progress(quint64 id, int emitted, double tokensPerSecond);
    void runFinished(const tlui::RunResult& r);
    void runFailed(quint64 id, const QString& message);
    void lensReady(const tlui::LensReady& l);
    // The exact lens after run `id` could not be computed (the streamed rows stay on screen).
    void lensFailed(quint64 id, const QString& message);
    void configChecked(quint64 ticket, const QString& error);

private:
    bool cancelled(quint64 id) const {
        return m_shutdown.load(std::memory_order_relaxed) ||
               id <= m_cancelUpTo.load(std::memory_order_relaxed);
    }

    std::shared_ptr<tinyloop::Model> m_model;  // written on the host's thread, under m_modelMutex
    QString m_modelPath;
    mutable std::mutex m_modelMutex;
    std::atomic<quint64> m_cancelUpTo{0};
    std::atomic<bool> m_shutdown{false};
    std::atomic<bool> m_importCancel{false};
    QString m_importCacheDir;
};

}  // namespace tlui

Q_DECLARE_METATYPE(tinyloop::TokenEvent)
Q_DECLARE_METATYPE(tlui::RunRequest)
Q_DECLARE_METATYPE(tlui::RunResult)
Q_DECLARE_METATYPE(tlui::ModelLoaded)
Q_DECLARE_METATYPE(tlui::LensReady)
