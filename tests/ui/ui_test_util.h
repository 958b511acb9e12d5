// Shared by the workbench tests: a tiny random model written through the engine's own writer,
// and a helper to wait on a condition while the event loop runs.
#pragma once

#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QStandardPaths>
#include <QString>
#include <QTemporaryDir>
#include <QTest>

#include <functional>

#include <tinyloop/tinyloop.h>

namespace tltest {

inline tinyloop::HParams tinyHParams() {
    tinyloop::HParams hp;
    hp.vocab_size = 300;
    hp.d_model = 64;
    hp.n_heads = 4;
    hp.n_kv_heads = 4;
    hp.head_dim = 16;
    hp.d_ff = 128;
    hp.n_pre_blocks = 1;
    hp.n_loop_layers = 1;
    hp.default_loops = 3;
    hp.max_loops = 6;
    hp.max_seq_len = 256;
    return hp;
}

// Writes the test model into `dir` and returns its path.
inline QString writeTinyModel(const QString& dir, uint64_t seed = 7, const QString& name = "tiny.tinyloop") {
    const QString path = QDir(dir).filePath(name);
    tinyloop::save_model(path.toStdString(), tinyloop::random_model_spec(tinyHParams(), seed));
    return path;
}

// A bigger model with a long context, so a run lasts seconds (Stop, shutdown, live speed).
inline QString writeSlowModel(const QString& dir) {
    tinyloop::HParams hp = tinyHParams();
    hp.d_model = 256;
    hp.head_dim = 64;
    hp.d_ff = 1024;
    hp.n_loop_layers = 2;
    hp.default_loops = 6;
    hp.max_loops = 8;
    hp.max_seq_len = 4096;
    const QString path = QDir(dir).filePath("slow.tinyloop");
    tinyloop::save_model(path.toStdString(), tinyloop::random_model_spec(hp, 5));
    return path;
}

// A file that looks like a model and is not one.
inline QString writeCorruptModel(const QString& dir) {
    const QString path = QDir(dir).filePath("corrupt.tinyloop");
    QFile f(path);
    f.open(QIODevice::WriteOnly);
    f.write("TLOOP\x01garbage that is not a tinyloop model at all, truncated header...");
    return path;
}

inline bool waitFor(const std::function<bool()>& cond, int timeoutMs = 60000) {
    QElapsedTimer t;
    t.start();
    while (!cond()) {
        if (t.elapsed() > timeoutMs) return false;
        QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
        QTest::qWait(5);
    }
    return true;
}

}  // namespace tltest
