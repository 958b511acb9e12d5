// The prompt editor: plain text; Ctrl+Enter asks for a run.
#pragma once

#include <QPlainTextEdit>

namespace tlui {

class PromptEditor : public QPlainTextEdit {
    Q_OBJECT
public:
    explicit PromptEditor(QWidget* parent = nullptr);

signals:
    void generateRequested();

protected:
    void keyPressEvent(QKeyEvent* e) override;
};

}  // namespace tlui
