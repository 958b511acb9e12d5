// The loaded model: file, hyperparameters, dtypes, tokenizer, memory, the metadata as pretty
// JSON and, when the metadata carries one (e.g. "per_depth_validation"), its per-depth table.
#pragma once

#include <QWidget>

#include "worker/engine_host.h"

class QComboBox;
class QTreeWidget;
class QPlainTextEdit;
class QTableWidget;
class QLabel;

namespace tlui {

class ModelPanel : public QWidget {
    Q_OBJECT
public:
    explicit ModelPanel(QWidget* parent = nullptr);
    void setModel(const ModelLoaded& m, bool randomFallback);
    QString summaryLine() const { return m_summary; }
    QTableWidget* depthTable() const { return m_depthTable; }
    // The back-end chooser: "auto", "cpu" or "cuda". Choosing one emits backendChosen (the main
    // window reloads the model on it); setBackendChoice shows the loaded model's without emitting.
    QComboBox* backendChoice() const { return m_backend; }
    QString backendChoiceName() const;
    void setBackendChoice(const QString& name);
    QTreeWidget* tree() const { return m_tree; }

    static QString humanBytes(quint64 b);

signals:
    void backendChosen(const QString& name);

public:
    static bool isRandomModel(const tinyloop::ModelInfo& info);  // metadata says random weights

private:
    QLabel* m_banner = nullptr;
    QComboBox* m_backend = nullptr;
    QTreeWidget* m_tree = nullptr;
    QPlainTextEdit* m_metadata = nullptr;
    QLabel* m_depthLabel = nullptr;
    QTableWidget* m_depthTable = nullptr;
    QString m_summary;
};

}  // namespace tlui
