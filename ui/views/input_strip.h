// A row of inputs that scrolls sideways instead of widening its window: the analysis windows'
// inputs row keeps every control at its natural size, and on a small screen or at a large zoom
// a scroll bar appears under it instead of the window running off the screen.
#pragma once

#include <QScrollArea>

class QHBoxLayout;

namespace tlui {

class InputStrip : public QScrollArea {
public:
    explicit InputStrip(QWidget* parent = nullptr);
    QHBoxLayout* row() const { return m_row; }

    // As tall as the row (and the scroll bar when it shows); as narrow as a few controls.
    QSize minimumSizeHint() const override;
    QSize sizeHint() const override;

protected:
    bool eventFilter(QObject* watched, QEvent* e) override;
    void resizeEvent(QResizeEvent* e) override;

private:
    QHBoxLayout* m_row;
};

}  // namespace tlui
