// The one line under every plot saying what it shows and how to read it. withCaption() puts a
// plot and its PlotCaption in one widget; captionOf() finds a plot's caption again (tests, the
// tour). A term written [[like this]] (or [[glossary term|shown words]]) becomes a link that opens
// Help -> Glossary at that term.
#pragma once

#include <QString>

#include "plots/wrapped_label.h"

namespace tlui {

class PlotCaption : public WrappedLabel {
    Q_OBJECT
public:
    explicit PlotCaption(const QString& text, QWidget* parent = nullptr);
    void setCaption(const QString& text);  // same markup as the constructor
    QString caption() const { return m_plain; }  // the text without markup

    // "[[KL]] per [[loop pass|pass]]" (term, then the words shown) -> rich text with glossary links, and its plain form.
    static QString toRichText(const QString& text);
    static QString toPlainText(const QString& text);

private:
    QString m_plain;
};

// A widget holding `plot` (stretching) over its caption; use it where the plot itself was added.
QWidget* withCaption(QWidget* plot, const QString& caption);
// The caption of the nearest captioned widget holding `plot`; nullptr when it has none.
PlotCaption* captionOf(const QWidget* plot);

}  // namespace tlui
