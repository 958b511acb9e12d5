// A word-wrapped label that asks its layout for the height its lines need at its current width.
// Qt's form and box layouts do not always pass a label's height-for-width on (a label inside a
// row widget of a QFormLayout, a caption under a plot in a squeezed splitter): such a label gets
// one line's height and draws its other lines over its neighbours or loses them. This one keeps
// its minimum height at heightForWidth(width()), so the layout gives the room to it instead.
#pragma once

#include <QLabel>

namespace tlui {

class WrappedLabel : public QLabel {
    Q_OBJECT
public:
    explicit WrappedLabel(const QString& text = QString(), QWidget* parent = nullptr);
    void setText(const QString& text);  // also re-asks for the height the new text needs

protected:
    void resizeEvent(QResizeEvent* e) override;

private:
    void fitHeight();     // queues fitHeightNow once
    void fitHeightNow();  // minimum height = what the lines need at the current width
    bool m_fitQueued = false;
};

}  // namespace tlui
