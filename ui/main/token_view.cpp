#include "main/token_view.h"

#include <algorithm>
#include <cmath>

#include <QHelpEvent>
#include <QTextCursor>
#include <QToolTip>

namespace tlui {

static const int kTokenIndexProperty = QTextFormat::UserProperty + 1;

TokenView::TokenView(QWidget* parent) : QTextEdit(parent) {
    setReadOnly(true);
    setObjectName("output");
    setMouseTracking(true);
    setPlaceholderText("Output appears here, token by token. Hover a token for its logit-lens row.");
}

void TokenView::setMeasure(ShadeMeasure m) {
    m_measure = m;
    // redraw everything in the new shading
    QTextEdit::clear();
    m_drawn = 0;
    if (!m_prompt.isEmpty()) {
        QTextCursor c(document());
        QTextCharFormat f;
        f.setForeground(QColor(110, 110, 110));
        c.insertText(m_prompt, f);
    }
    flush();
}

void TokenView::clearTokens(const QString& promptText) {
    m_events.clear();
    m_prompt = promptText;
    setMeasure(m_measure);
}

void TokenView::addToken(const tinyloop::TokenEvent& ev) { m_events.push_back(ev); }

void TokenView::setProbabilities(const std::vector<float>& probs) {
    for (size_t i = 0; i < m_events.size() && i < probs.size(); ++i) m_events[i].prob = probs[i];
    setMeasure(m_measure);
}

void TokenView::flush() {
    if (m_drawn >= static_cast<int>(m_events.size())) return;
    setUpdatesEnabled(false);
    while (m_drawn < static_cast<int>(m_events.size())) appendSpan(m_drawn++);
    setUpdatesEnabled(true);
    ensureCursorVisible();
}

QColor TokenView::shade(const tinyloop::TokenEvent& ev) const {
    // 0 = calm (white), 1 = strong; a blue ramp for depth, green for confidence, orange for entropy
    double t = 0;
    QColor hi;
    switch (m_measure) {
    case ShadeMeasure::Depth:
        t = m_maxDepth > 1 ? double(ev.depth - 1) / double(m_maxDepth - 1) : 1.0;
        hi = QColor(70, 120, 230);
        break;
    case ShadeMeasure::Probability:
        t = std::clamp<double>(ev.prob, 0.0, 1.0);
        hi = QColor(60, 180, 90);
        break;
    case ShadeMeasure::Entropy: {
        float h = ev.lens.empty() ? 0.0f : ev.lens.back().entropy;
        double hmax = m_vocab.size() > 1 ? std::log(double(m_vocab.size())) : 5.0;
        t = std::clamp<double>(h / hmax, 0.0, 1.0);
        hi = QColor(235, 140, 40);
        break;
    }
    }
    t = std::clamp(t, 0.0, 1.0) * 0.8 + 0.05;
    return QColor(int(255 + (hi.red() - 255) * t), int(255 + (hi.green() - 255) * t),
                  int(255 + (hi.blue() - 255) * t));
}

void TokenView::appendSpan(int index) {
    const auto& ev = m_events[static_cast<size_t>(index)];
    QTextCursor c(document());
    c.movePosition(QTextCursor::End);
    QTextCharFormat f;
    f.setBackground(shade(ev));
    f.setForeground(QColor(Qt::black));  // the shades are light in either theme
    f.setProperty(kTokenIndexProperty, index);
    QString text = QString::fromStdString(ev.piece);
    if (text.isEmpty()) text = QString(QChar(0x00B7));  // a token whose bytes are not complete yet
    c.insertText(text, f);
}

int TokenView::tokenAt(const QPoint& viewportPos) const {
    QTextCursor c = cursorForPosition(viewportPos);
    // the format at a cursor is the one of the character before it: look at the next one too
    for (int delta : {1, 0}) {
        QTextCursor k = c;
        if (delta) k.movePosition(QTextCursor::NextCharacter);
        QVariant v = k.charFormat().property(kTokenIndexProperty);
        if (v.isValid()) return v.toInt();
    }
    return -1;
}

QString TokenView::tokenText(int32_t id) const {
    QString s = id >= 0 && id < m_vocab.size() ? m_vocab[id] : QString("<%1>").arg(id);
    s.replace("\n", "\\n").replace("\t", "\\t");
    s.replace(' ', QChar(0x00A0));  // a token's own spaces never break a tooltip line
    return s.toHtmlEscaped();
}

QString TokenView::lensTooltip(int index) const {
    if (index < 0 || index >= static_cast<int>(m_events.size())) return QString();
    const auto& ev = m_events[static_cast<size_t>(index)];
    QString h = QString("<b>token %1</b> id %2 '%3' &nbsp; depth %4 &nbsp; p=%5<br>")
                    .arg(ev.index).arg(ev.token).arg(tokenText(ev.token)).arg(ev.depth).arg(ev.prob, 0, 'f', 3);
    if (ev.lens.empty()) return h + "<i>no lens row (lens off)</i>";
    // no line of the table wraps (white-space: nowrap), so no top-k entry breaks in two
    h += "<table style=\"white-space:nowrap\" cellspacing=0 cellpadding=2><tr><th>depth</th><th>p(emitted)</th><th>H</th><th>top-k</th></tr>";
    for (const auto& d : ev.lens) {
        QString tops;
        for (size_t i = 0; i < d.top_ids.size(); ++i) {
            const bool isEmitted = d.top_ids[i] == ev.token;
            // one entry never wraps inside (token text and its probability stay on one line)
            QString cell = QString("<nobr>'%1'&nbsp;%2</nobr>").arg(tokenText(d.top_ids[i])).arg(d.top_probs[i], 0, 'f', 3);
            tops += (i ? " &nbsp; " : "") + (isEmitted ? "<b>" + cell + "</b>" : cell);
        }
        h += QString("<tr><td align=right>%1</td><td>%2</td><td>%3</td><td>%4</td></tr>")
                 .arg(d.depth).arg(d.p_emitted, 0, 'f', 3).arg(d.entropy, 0, 'f', 2).arg(tops);
    }
    return h + "</table>";
}

bool TokenView::event(QEvent* e) {
    if (e->type() == QEvent::ToolTip) {
        auto* he = static_cast<QHelpEvent*>(e);
        const int idx = tokenAt(viewport()->mapFrom(this, he->pos()));
        if (idx >= 0) QToolTip::showText(he->globalPos(), lensTooltip(idx), this);
        else QToolTip::hideText();
        return true;
    }
    return QTextEdit::event(e);
}

}  // namespace tlui
