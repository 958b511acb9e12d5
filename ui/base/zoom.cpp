#include "base/zoom.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include <QApplication>
#include <QSettings>
#include <QStyle>
#include <QToolTip>
#include <QWidget>

namespace tlui {

namespace {

const char* kSettingsKey = "view/zoom";
// The steps of Ctrl+plus / Ctrl+minus, as browsers have them.
const double kSteps[] = {0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0};

Zoom* g_instance = nullptr;

}  // namespace

Zoom& Zoom::instance() {
    if (!g_instance) {
        g_instance = new Zoom(qApp);
        g_instance->restoreSaved();
    }
    return *g_instance;
}

Zoom::Zoom(QObject* parent) : QObject(parent), m_base(QApplication::font()) {
    setObjectName("zoom");
    connect(this, &QObject::destroyed, [] { g_instance = nullptr; });
}

QFont Zoom::scaled(const QFont& font) const {
    QFont f = font;
    if (font.pointSizeF() > 0) f.setPointSizeF(font.pointSizeF() * m_factor);
    else if (font.pixelSize() > 0) f.setPixelSize(std::max(1, int(std::lround(font.pixelSize() * m_factor))));
    return f;
}

void Zoom::setFactor(double f, bool remember) {
    f = std::clamp(f, kMin, kMax);
    if (remember && !m_presentation) QSettings().setValue(kSettingsKey, f);
    if (f == m_factor) return;
    m_factor = f;
    apply();
    emit factorChanged(m_factor);
}

void Zoom::zoomIn() {
    const double* next = std::upper_bound(std::begin(kSteps), std::end(kSteps), m_factor + 1e-6);
    setFactor(next == std::end(kSteps) ? kMax : *next);
}

void Zoom::zoomOut() {
    const double* at = std::lower_bound(std::begin(kSteps), std::end(kSteps), m_factor - 1e-6);
    setFactor(at == std::begin(kSteps) ? kMin : *(at - 1));
}

void Zoom::reset() { setFactor(1.0); }

void Zoom::setPresentation(bool on) {
    if (on == m_presentation) return;
    if (on) {
        m_beforePresentation = m_factor;
        m_presentation = true;
        setFactor(std::max(kPresentation, m_factor), false);
    } else {
        m_presentation = false;
        setFactor(m_beforePresentation, false);
    }
    emit presentationChanged(on);
}

void Zoom::restoreSaved() {
    bool ok = false;
    const double f = QSettings().value(kSettingsKey, 1.0).toDouble(&ok);
    setFactor(ok && f >= kMin && f <= kMax ? f : 1.0, false);
}

void Zoom::apply() {
    // Widgets with no font of their own follow the application font; menus and tooltips too
    // (setting the default font drops the class-specific ones).
    const QFont f = scaled(m_base);
    QApplication::setFont(f);
    QToolTip::setFont(f);
    // A widget with a style sheet (a coloured status line) keeps the font it had when the sheet
    // was applied: polishing it again takes the new one.
    for (QWidget* w : QApplication::allWidgets())
        if (w->testAttribute(Qt::WA_StyleSheet)) {
            w->style()->unpolish(w);
            w->style()->polish(w);
        }
}

std::optional<double> Zoom::parse(const QString& text, QString* error) {
    bool ok = false;
    const double f = text.trimmed().toDouble(&ok);
    if (ok && std::isfinite(f) && f >= kMin && f <= kMax) return f;
    if (error)
        *error = QString("--zoom: '%1' is not a zoom factor; allowed: a number from %2 to %3 (1 = normal size)")
                     .arg(text).arg(kMin).arg(kMax);
    return std::nullopt;
}

}  // namespace tlui
