#include "worker/engine_host.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>

#include <QFileInfo>
#include <QThread>
#include <tinyloop/mode_rules.h>

namespace tlui {

void registerEngineMetaTypes() {
    static std::once_flag once;
    std::call_once(once, [] {
        qRegisterMetaType<tinyloop::TokenEvent>("tinyloop::TokenEvent");
        qRegisterMetaType<tlui::RunRequest>("tlui::RunRequest");
        qRegisterMetaType<tlui::RunResult>("tlui::RunResult");
        qRegisterMetaType<tlui::ModelLoaded>("tlui::ModelLoaded");
        qRegisterMetaType<tlui::LensReady>("tlui::LensReady");
    });
}

EngineHost::EngineHost(QObject* parent) : QObject(parent) { registerEngineMetaTypes(); }

EngineHost::~EngineHost() = default;

std::shared_ptr<tinyloop::Model> EngineHost::sharedModel() const {
    std::lock_guard<std::mutex> lock(m_modelMutex);
    return m_model;
}

QString EngineHost::modelPath() const {
    std::lock_guard<std::mutex> lock(m_modelMutex);
    return m_modelPath;
}

void EngineHost::requestStop(quint64 upToId) {
    quint64 cur = m_cancelUpTo.load();
    while (upToId > cur && !m_cancelUpTo.compare_exchange_weak(cur, upToId)) {
    }
}

void EngineHost::shutdown() { m_shutdown.store(true); }

void EngineHost::loadModel(const QString& path, const QString& backend) {
    if (m_shutdown.load()) return;
    emit loadStarted(path);
    tinyloop::Model* fresh = nullptr;
    try {
        QString file = path;
        QString folder;
        bool importedNow = false;
        if (QFileInfo(path).isDir()) {
            folder = path;
            m_importCancel.store(false);
            tinyloop::ImportOptions io;
            io.cancel = &m_importCancel;
            io.progress = [this, &path](const tinyloop::ImportProgress& p) {
                const double f = p.bytes_total ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 1.0;
                emit importProgress(path, p.index, p.count, f);
            };
            const tinyloop::ImportReport rep =
                tinyloop::import_hf_cached(path.toStdString(), io, m_importCacheDir.toStdString());
            if (rep.cancelled) throw std::runtime_error("import cancelled (nothing was written to the cache)");
            file = QString::fromStdString(rep.path);
            importedNow = !rep.cached;
        }
        tinyloop::LoadOptions opt;
        if (backend == "cpu") opt.backend = tinyloop::Backend::Cpu;
        else if (backend == "cuda") opt.backend = tinyloop::Backend::Cuda;
        else if (backend != "auto")
            throw std::invalid_argument("back end: expected auto, cpu or cuda, got '" + backend.toStdString() + "'");
        fresh = tinyloop::load_model(file.toStdString(), opt);
        ModelLoaded m;
        m.info = tinyloop::model_info(fresh);
        m.sourceFolder = folder;
        m.importedNow = importedNow;
        m.vramBytes = tinyloop::vram_usage_bytes(fresh);
        m.recommended = modelRecommendation(fresh);
        m.defaults = defaultConfig(fresh);
        const int n = m.info.tokenizer_vocab;
        m.vocab.reserve(n);
        for (int id = 0; id < n; ++id) {
            try {
                m.vocab.push_back(QString::fromStdString(
                    tinyloop::sanitize_utf8(tinyloop::token_bytes(fresh, id))));
            } catch (const std::exception&) {
                m.vocab.push_back(QString("<%1>").arg(id));
            }
        }
        // Only now does the new model replace the old one: a refused file leaves it in place.
        {
            std::lock_guard<std::mutex> lock(m_modelMutex);
            m_model.reset(fresh, tinyloop::free_model);
            m_modelPath = file;  // the file the views may read or write (a folder's: the cached import)
        }
        emit modelLoaded(m);
    } catch (const std::exception& e) {
        tinyloop::free_model(fresh);
        emit modelLoadFailed(path, QString::fromStdString(e.what()));
    }
}

void EngineHost::validateConfig(quint64 ticket, const RunRequest& req) {
    tinyloop::Model* model = m_model.get();  // only this thread replaces m_model
    if (!model) {
        emit configChecked(ticket, QStringLiteral("no model loaded"));
        return;
    }
    try {
        auto ids = tinyloop::tokenize(model, req.prompt.toStdString());
        if (ids.empty()) ids.push_back(0);  // generate starts an empty prompt from BOS/EOS
        tinyloop::Owned<tinyloop::Grammar> grammar;
        tinyloop::GenerateConfig cfg = req.config;
        if (!req.grammarFile.isEmpty()) {
            grammar.reset(tinyloop::load_grammar_file(req.grammarFile.toStdString()));
            cfg.grammar = grammar.get();
        }
        tinyloop::validate_config(model, static_cast<int>(ids.size()), cfg);
        emit configChecked(ticket, QString());
    } catch (const std::exception& e) {
        emit configChecked(ticket, QString::fromStdString(e.what()));
    }
}

void EngineHost::generate(const RunRequest& req) {
    if (cancelled(req.id)) {
        emit runFailed(req.id, QStringLiteral("stopped before it started"));
        return;
    }
    tinyloop::Model* model = m_model.get();  // only this thread replaces m_model
    if (!model) {
        emit runFailed(req.id, QStringLiteral("no model loaded"));
        return;
    }
    RunResult res;
    static_cast<tinyloop::RunSpec&>(res) = req;
    res.id = req.id;
    res.grammarFile = req.grammarFile;
    res.prompt = req.prompt;
    try {
        std::vector<int32_t> prompt = tinyloop::tokenize(model, req.prompt.toStdString());
        const auto& hp = tinyloop::model_hparams(model);
        if (prompt.empty() && hp.vocab_size > 0) {
            // an empty prompt cannot be decoded: start from BOS/EOS when the tokenizer has one
            auto info = tinyloop::model_info(model);
            int32_t start = info.tokenizer.bos_id >= 0 ? info.tokenizer.bos_id : info.tokenizer.eos_id;
            if (start >= 0) prompt.push_back(start);
        }
        tinyloop::GenerateConfig cfg = req.config;
        tinyloop::Owned<tinyloop::Grammar> grammar;
        if (!req.grammarFile.isEmpty()) {
            grammar.reset(tinyloop::load_grammar_file(req.grammarFile.toStdString()));
            cfg.grammar = grammar.get();
        }
        res.loops = configDepth(cfg, hp);
        emit runStarted(req.id, static_cast<int>(prompt.size()));

        using clock = std::chrono::steady_clock;
        const auto t0 = clock::now();
        auto lastReport = t0;
        int emitted = 0;
        tinyloop::GenerateOptions opts;
        opts.lens = req.lens && tinyloop::mode_reports_lens(req.mode);  // else the exact lens after the run
        opts.lens_top_k = req.lensTopK;
        int lastCycle = -1;
        opts.observer = [&](const tinyloop::TokenEvent& ev) {
            ++emitted;
            if (ev.cycle >= 0 && ev.cycle != lastCycle) {  // the first token of a verify cycle
                res.cycles.push_back(SpecCycle{static_cast<int>(ev.drafted.size()), ev.accepted});
                lastCycle = ev.cycle;
            }
            emit tokenEvent(req.id, ev);
            const auto now = clock::now();
            if (now - lastReport >= std::chrono::seconds(1)) {
                const double s = std::chrono::duration<double>(now - t0).count();
                emit progress(req.id, emitted, s > 0 ? emitted / s : 0.0);
                lastReport = now;
            }
            return !cancelled(req.id);
        };

        // The mode becomes an engine call in one place: the engine's resolver (resolve_run) applies
        // the mode's rules (beam_size >= 2, early-exit patience >= 1, tree greedy-only) and
        // resolves the knobs left at 0 (the verify depth: config.loops, else the model's
        // default_loops); run_decode runs what it resolved, and its messages go with the result.
        tinyloop::RunSpec spec = req;
        spec.config = cfg;
        const tinyloop::ResolvedRun resolved = resolvedRun(model, spec);
        for (const std::string& line : resolved.messages) res.resolvedNotes << QString::fromStdString(line);
        if (tinyloop::self_speculative(req.mode)) {
            res.loops = resolved.spec.speculation.verify_loops;  // the depth the lens reads
            res.hasSpeculative = true;
        }
        tinyloop::GenerateResult out =
            tinyloop::run_decode(model, prompt.data(), static_cast<int>(prompt.size()), resolved.spec, opts);

        res.tokens = std::move(out.tokens);
        res.promptLen = out.prompt_len;
        res.text = QString::fromStdString(out.text);
        res.stats = out.stats;
        emit runFinished(res);

        if (req.exactLens && !m_shutdown.load() && !res.tokens.empty()) {
            // The exact lens (full distributions: KL too) over prompt + output, after the run.
            try {
                LensReady l;
                l.id = req.id;
                l.promptLen = res.promptLen;
                l.lens = tinyloop::score_logit_lens(model, res.tokens.data(),
                                                    static_cast<int>(res.tokens.size()), res.loops,
                                                    req.lensTopK);
                emit lensReady(l);
            } catch (const std::exception& e) {
                // the streamed lens rows stay on screen; the window stops waiting for the exact one
                emit lensFailed(req.id, QString::fromStdString(e.what()));
            }
            return;
        }
    } catch (const std::exception& e) {
        emit runFailed(req.id, QString::fromStdString(e.what()));
    }
}

}  // namespace tlui
