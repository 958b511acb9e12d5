#include "base/glossary_dialog.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPointer>
#include <QTextBrowser>
#include <QVBoxLayout>

#include "base/glossary.h"

namespace tlui {

GlossaryDialog::GlossaryDialog(QWidget* parent) : QDialog(parent) {
    setObjectName("glossaryDialog");
    setWindowTitle("Glossary - TinyLoop Workbench");
    setModal(false);
    resize(720, 480);
    auto* v = new QVBoxLayout(this);
    m_search = new QLineEdit;
    m_search->setObjectName("glossarySearch");
    m_search->setPlaceholderText("search a term or a word in the explanations (e.g. KL, pass, acceptance)");
    m_search->setClearButtonEnabled(true);
    v->addWidget(m_search);
    auto* h = new QHBoxLayout;
    m_list = new QListWidget;
    m_list->setObjectName("glossaryTerms");
    m_list->setMaximumWidth(260);
    m_text = new QTextBrowser;
    m_text->setObjectName("glossaryText");
    m_text->setOpenLinks(false);
    h->addWidget(m_list);
    h->addWidget(m_text, 1);
    v->addLayout(h, 1);
    connect(m_search, &QLineEdit::textChanged, this, &GlossaryDialog::setFilter);
    connect(m_list, &QListWidget::currentTextChanged, this, &GlossaryDialog::showEntry);
    connect(m_text, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
        m_search->clear();
        showTerm(url.path());
    });
    setFilter(QString());
}

void GlossaryDialog::setFilter(const QString& query) {
    if (m_search->text() != query) m_search->setText(query);  // re-enters through textChanged
    const QString keep = currentTerm();
    m_list->blockSignals(true);
    m_list->clear();
    for (const GlossaryEntry* e : searchGlossary(query)) m_list->addItem(e->term);
    m_list->blockSignals(false);
    const auto again = m_list->findItems(keep, Qt::MatchExactly);
    if (!again.isEmpty()) m_list->setCurrentItem(again.first());
    else if (m_list->count() > 0) m_list->setCurrentRow(0);
    else m_text->setHtml("<i>No term matches.</i>");
}

bool GlossaryDialog::showTerm(const QString& word) {
    const GlossaryEntry* e = findGlossaryEntry(word);
    if (!e) return false;
    auto items = m_list->findItems(e->term, Qt::MatchExactly);
    if (items.isEmpty()) {  // filtered out by the search: show everything again
        m_search->clear();
        items = m_list->findItems(e->term, Qt::MatchExactly);
    }
    if (items.isEmpty()) return false;
    m_list->setCurrentItem(items.first());
    showEntry(e->term);
    return true;
}

QString GlossaryDialog::currentTerm() const {
    return m_list->currentItem() ? m_list->currentItem()->text() : QString();
}

QString GlossaryDialog::currentText() const { return m_text->toPlainText(); }

QStringList GlossaryDialog::visibleTerms() const {
    QStringList out;
    for (int i = 0; i < m_list->count(); ++i) out << m_list->item(i)->text();
    return out;
}

void GlossaryDialog::showEntry(const QString& term) {
    const GlossaryEntry* e = findGlossaryEntry(term);
    if (!e) return;
    QString html = QString("<h3>%1</h3>").arg(e->term.toHtmlEscaped());
    if (!e->aliases.isEmpty())
        html += QString("<p style='color:#777'>also: %1</p>").arg(e->aliases.join(", ").toHtmlEscaped());
    html += "<p>" + e->text.toHtmlEscaped() + "</p>";
    // The other terms this one leans on, as links.
    QStringList see;
    for (const GlossaryEntry& other : glossaryEntries())
        if (&other != e && other.term.size() > 2 && e->text.contains(other.term, Qt::CaseInsensitive))
            see << QString("<a href='glossary:%1'>%2</a>").arg(other.term, other.term.toHtmlEscaped());
    if (!see.isEmpty()) html += "<p>See also: " + see.join(", ") + "</p>";
    m_text->setHtml(html);
}

GlossaryDialog* showGlossary(QWidget* near, const QString& term) {
    static QPointer<GlossaryDialog> dialog;
    if (!dialog) dialog = new GlossaryDialog(near ? near->window() : nullptr);
    if (!term.isEmpty()) dialog->showTerm(term);
    dialog->show();
    dialog->raise();
    dialog->activateWindow();
    return dialog;
}

}  // namespace tlui
