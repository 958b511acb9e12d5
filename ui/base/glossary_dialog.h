// Help -> Glossary: the glossary (base/glossary.h) as a searchable window: a search field, the
// matching terms, and the chosen term's explanation, whose mentions of other terms are links.
#pragma once

#include <QDialog>

class QLineEdit;
class QListWidget;
class QTextBrowser;

namespace tlui {

class GlossaryDialog : public QDialog {
    Q_OBJECT
public:
    explicit GlossaryDialog(QWidget* parent = nullptr);

    void setFilter(const QString& query);  // what the search field holds
    bool showTerm(const QString& word);    // selects the entry for `word` (term or alias); false if none
    QString currentTerm() const;
    QString currentText() const;           // the explanation shown, as plain text
    QStringList visibleTerms() const;      // the terms the list shows for the current search

private:
    void showEntry(const QString& term);

    QLineEdit* m_search = nullptr;
    QListWidget* m_list = nullptr;
    QTextBrowser* m_text = nullptr;
};

// The one glossary window of the workbench (created on first use, parented to `near`'s top-level
// window), shown and raised, at `term` when it names an entry.
GlossaryDialog* showGlossary(QWidget* near, const QString& term = QString());

}  // namespace tlui
