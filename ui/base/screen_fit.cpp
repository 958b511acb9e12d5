#include "base/screen_fit.h"

#include <algorithm>

#include <QGuiApplication>
#include <QScreen>
#include <QWidget>

namespace tlui {

QRect availableGeometry(const QWidget* w) {
    QScreen* s = w ? w->screen() : nullptr;
    if (!s) s = QGuiApplication::primaryScreen();
    return s ? s->availableGeometry() : QRect(0, 0, 1280, 720);
}

QRect fittedFrame(QSize wanted, QSize frame, const QRect& available, QPoint near) {
    const QSize outer(std::min(wanted.width() + frame.width(), available.width()),
                      std::min(wanted.height() + frame.height(), available.height()));
    QRect r(QPoint(0, 0), outer);
    r.moveCenter(!near.isNull() && available.contains(near) ? near : available.center());
    // back inside where the centre put it past an edge
    r.moveLeft(std::clamp(r.left(), available.left(), available.right() - r.width() + 1));
    r.moveTop(std::clamp(r.top(), available.top(), available.bottom() - r.height() + 1));
    return r;
}

void fitToScreen(QWidget* w, QSize wanted, QRect available) {
    if (available.isEmpty()) available = availableGeometry(w);
    // Before the first show the decorations are unknown: leave room for a usual title bar.
    const QSize frame = w->isVisible() ? w->frameGeometry().size() - w->geometry().size() : QSize(8, 32);
    const QWidget* parent = w->parentWidget() ? w->parentWidget()->window() : nullptr;
    const QPoint near = parent && parent->isVisible() ? parent->frameGeometry().center() : QPoint();
    w->resize(fittedFrame(wanted, frame, available, near).size() - frame);
    // A window whose layout needs more than the screen keeps its minimum: place what it took.
    w->move(fittedFrame(w->size(), frame, available, near).topLeft());  // move(): the frame's corner
}

}  // namespace tlui
