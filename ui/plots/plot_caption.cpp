#include "plots/plot_caption.h"

#include <functional>

#include <QRegularExpression>
#include <QVBoxLayout>

#include "base/glossary_dialog.h"

namespace tlui {

namespace {

const char* kCaptionedProperty = "tlCaptioned";

const QRegularExpression& termMarkup() {
    static const QRegularExpression re(R"(\[\[([^\]|]+)(?:\|([^\]]+))?\]\])");
    return re;
}

// `text` with its plain runs through `plain` and each [[term|shown]] through `link(term, shown)`.
QString rewriteTerms(const QString& text, const std::function<QString(const QString&)>& plain,
                     const std::function<QString(const QString&, const QString&)>& link) {
    QString out;
    qsizetype at = 0;
    auto it = termMarkup().globalMatch(text);
    while (it.hasNext()) {
        const auto m = it.next();
        out += plain(text.mid(at, m.capturedStart() - at));
        out += link(m.captured(1), m.captured(2).isEmpty() ? m.captured(1) : m.captured(2));
        at = m.capturedEnd();
    }
    return out + plain(text.mid(at));
}

}  // namespace

PlotCaption::PlotCaption(const QString& text, QWidget* parent) : WrappedLabel(QString(), parent) {
    setObjectName("plotCaption");
    setTextFormat(Qt::RichText);
    setTextInteractionFlags(Qt::TextBrowserInteraction);
    setOpenExternalLinks(false);
    setStyleSheet("color: palette(window-text); padding: 2px 4px;");
    connect(this, &QLabel::linkActivated, this, [this](const QString& link) {
        if (link.startsWith("glossary:")) showGlossary(this, link.mid(9));
    });
    setCaption(text);
}

void PlotCaption::setCaption(const QString& text) {
    m_plain = toPlainText(text);
    setText(toRichText(text));
    setToolTip("Terms underlined are explained in Help -> Glossary (click one).");
}

QString PlotCaption::toRichText(const QString& text) {
    return rewriteTerms(text, [](const QString& run) { return run.toHtmlEscaped(); },
                        [](const QString& term, const QString& shown) {
                            return QString("<a href='glossary:%1'>%2</a>").arg(term.toHtmlEscaped(), shown.toHtmlEscaped());
                        });
}

QString PlotCaption::toPlainText(const QString& text) {
    return rewriteTerms(text, [](const QString& run) { return run; },
                        [](const QString&, const QString& shown) { return shown; });
}

QWidget* withCaption(QWidget* plot, const QString& caption) {
    auto* box = new QWidget;
    box->setProperty(kCaptionedProperty, true);
    box->setObjectName(plot->objectName().isEmpty() ? QString("captioned") : plot->objectName() + "Captioned");
    auto* v = new QVBoxLayout(box);
    v->setContentsMargins(0, 0, 0, 0);
    v->setSpacing(2);
    v->addWidget(plot, 1);
    v->addWidget(new PlotCaption(caption));
    return box;
}

PlotCaption* captionOf(const QWidget* plot) {
    for (const QWidget* w = plot; w; w = w->parentWidget())
        if (w->property(kCaptionedProperty).toBool())
            return w->findChild<PlotCaption*>(QString(), Qt::FindDirectChildrenOnly);
    return nullptr;
}

}  // namespace tlui
