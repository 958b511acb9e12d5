#include "plots/wrapped_label.h"

#include <QResizeEvent>
#include <QTimer>

namespace tlui {

WrappedLabel::WrappedLabel(const QString& text, QWidget* parent) : QLabel(text, parent) {
    setWordWrap(true);
    setAlignment(Qt::AlignLeft | Qt::AlignTop);
}

void WrappedLabel::setText(const QString& text) {
    QLabel::setText(text);
    fitHeight();
}

void WrappedLabel::resizeEvent(QResizeEvent* e) {
    QLabel::resizeEvent(e);
    fitHeight();
}

void WrappedLabel::fitHeight() {
    // Once the layout has settled (after the events queued now): the widths a first layout pass
    // tries are narrow, and a minimum height taken there would grow the window for good.
    if (m_fitQueued) return;
    m_fitQueued = true;
    QTimer::singleShot(0, this, [this] {
        m_fitQueued = false;
        fitHeightNow();
    });
}

void WrappedLabel::fitHeightNow() {
    if (width() <= 0) return;
    // QLabel's heightForWidth never answers below the minimum height: measure without it, or a
    // height needed once at a narrow width would stay after the label widened.
    const int before = minimumHeight();
    setMinimumHeight(0);
    const int need = heightForWidth(width());
    setMinimumHeight(need > 0 ? need : before);
}

}  // namespace tlui
