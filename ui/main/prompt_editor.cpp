#include "main/prompt_editor.h"

#include <QKeyEvent>

namespace tlui {

PromptEditor::PromptEditor(QWidget* parent) : QPlainTextEdit(parent) {
    setPlaceholderText("Prompt (Ctrl+Enter generates)");
    setObjectName("prompt");
}

void PromptEditor::keyPressEvent(QKeyEvent* e) {
    if ((e->key() == Qt::Key_Return || e->key() == Qt::Key_Enter) && (e->modifiers() & Qt::ControlModifier)) {
        emit generateRequested();
        e->accept();
        return;
    }
    QPlainTextEdit::keyPressEvent(e);
}

}  // namespace tlui
