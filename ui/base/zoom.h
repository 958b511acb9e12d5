// One zoom factor for the whole workbench: the application font (every widget, the token view,
// menus, tooltips) and, through plots/plot_look, every plot's fonts, pens and markers. Windows
// already open follow a change at once, windows opened later start at it. The factor is kept in
// QSettings ("view/zoom") and restored when the instance is first used. Presentation mode is a
// preset larger factor (kPresentation) that ends by going back to the factor before it.
#pragma once

#include <optional>

#include <QFont>
#include <QObject>
#include <QString>

namespace tlui {

class Zoom : public QObject {
    Q_OBJECT
public:
    static constexpr double kMin = 0.5;
    static constexpr double kMax = 3.0;
    static constexpr double kPresentation = 1.5;

    // The application's one instance (a child of qApp), created on first use with the remembered
    // factor applied. Needs a QApplication.
    static Zoom& instance();

    double factor() const { return m_factor; }
    bool presentation() const { return m_presentation; }
    // The application font at factor 1 (what the platform gave the program).
    QFont baseFont() const { return m_base; }
    // `font` (authored at factor 1) at the current factor.
    QFont scaled(const QFont& font) const;

    // Clamped to [kMin, kMax]. `remember`: store it in QSettings (never during presentation mode,
    // so the presentation factor is not the next start's).
    void setFactor(double f, bool remember = true);
    void zoomIn();   // the next step up (1, 1.1, 1.25, 1.5, ...)
    void zoomOut();  // the next step down
    void reset();    // factor 1
    void setPresentation(bool on);
    // Applies the factor stored in QSettings (1 when none or out of range).
    void restoreSaved();

    // "--zoom F": a number in [kMin, kMax]; nullopt and a message naming the option and the range.
    static std::optional<double> parse(const QString& text, QString* error);

signals:
    void factorChanged(double factor);
    void presentationChanged(bool on);

private:
    explicit Zoom(QObject* parent);
    void apply();

    QFont m_base;
    double m_factor = 1.0;
    double m_beforePresentation = 1.0;
    bool m_presentation = false;
};

}  // namespace tlui
