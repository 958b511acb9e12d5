#include "views/input_strip.h"

#include <algorithm>

#include <QEvent>
#include <QHBoxLayout>
#include <QScrollBar>

namespace tlui {

InputStrip::InputStrip(QWidget* parent) : QScrollArea(parent) {
    setObjectName("inputStrip");
    setFrameShape(QFrame::NoFrame);
    setWidgetResizable(true);
    setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    setHorizontalScrollBarPolicy(Qt::ScrollBarAsNeeded);
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
    auto* inner = new QWidget;
    m_row = new QHBoxLayout(inner);
    m_row->setContentsMargins(0, 0, 0, 0);
    setWidget(inner);
    inner->installEventFilter(this);  // the row's size changes with its controls and the zoom
}

QSize InputStrip::minimumSizeHint() const {
    const int bar = widget()->minimumSizeHint().width() > viewport()->width() ? horizontalScrollBar()->sizeHint().height() : 0;
    return {std::min(200, widget()->minimumSizeHint().width()), widget()->minimumSizeHint().height() + bar};
}

QSize InputStrip::sizeHint() const { return {widget()->sizeHint().width(), minimumSizeHint().height()}; }

bool InputStrip::eventFilter(QObject* watched, QEvent* e) {
    if (watched == widget() && e->type() == QEvent::LayoutRequest) updateGeometry();
    return QScrollArea::eventFilter(watched, e);
}

void InputStrip::resizeEvent(QResizeEvent* e) {
    QScrollArea::resizeEvent(e);
    updateGeometry();  // the scroll bar comes or goes with the width: the height follows
}

}  // namespace tlui
