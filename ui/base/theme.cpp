#include "base/theme.h"

#include <QApplication>
#include <QPalette>
#include <QSettings>
#include <QStyle>
#include <QStyleFactory>

namespace tlui {

namespace {

const char* kSettingsKey = "view/theme";
Theme g_current = Theme::Light;

QPalette darkPalette() {
    const QColor window(45, 45, 48), base(30, 30, 32), text(225, 225, 225), dim(140, 140, 140);
    QPalette p;
    p.setColor(QPalette::Window, window);
    p.setColor(QPalette::WindowText, text);
    p.setColor(QPalette::Base, base);
    p.setColor(QPalette::AlternateBase, window);
    p.setColor(QPalette::ToolTipBase, QColor(60, 60, 64));
    p.setColor(QPalette::ToolTipText, text);
    p.setColor(QPalette::PlaceholderText, dim);
    p.setColor(QPalette::Text, text);
    p.setColor(QPalette::Button, window);
    p.setColor(QPalette::ButtonText, text);
    p.setColor(QPalette::BrightText, QColor(255, 90, 90));
    p.setColor(QPalette::Light, QColor(70, 70, 74));
    p.setColor(QPalette::Midlight, QColor(60, 60, 64));
    p.setColor(QPalette::Mid, QColor(90, 90, 94));
    p.setColor(QPalette::Dark, QColor(25, 25, 27));
    p.setColor(QPalette::Shadow, QColor(10, 10, 10));
    p.setColor(QPalette::Highlight, QColor(60, 110, 200));
    p.setColor(QPalette::HighlightedText, Qt::white);
    p.setColor(QPalette::Link, QColor(110, 160, 255));
    p.setColor(QPalette::LinkVisited, QColor(170, 130, 255));
    for (auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
        p.setColor(QPalette::Disabled, role, QColor(120, 120, 120));
    p.setColor(QPalette::Disabled, QPalette::Base, window);
    return p;
}

}  // namespace

QString themeName(Theme t) { return t == Theme::Dark ? "dark" : "light"; }

std::optional<Theme> parseTheme(const QString& text, QString* error) {
    const QString t = text.trimmed().toLower();
    if (t == "light") return Theme::Light;
    if (t == "dark") return Theme::Dark;
    if (error) *error = QString("--theme: '%1' is not a theme; allowed: light, dark").arg(text);
    return std::nullopt;
}

void applyTheme(Theme t, bool remember) {
    // One style for both, so the two differ only in colour.
    if (QApplication::style()->name().compare("fusion", Qt::CaseInsensitive) != 0)
        QApplication::setStyle(QStyleFactory::create("Fusion"));
    QApplication::setPalette(t == Theme::Dark ? darkPalette() : QApplication::style()->standardPalette());
    g_current = t;
    if (remember) QSettings().setValue(kSettingsKey, themeName(t));
}

Theme currentTheme() { return g_current; }

void restoreTheme() {
    const auto t = parseTheme(QSettings().value(kSettingsKey, "light").toString(), nullptr);
    applyTheme(t.value_or(Theme::Light), false);
}

}  // namespace tlui
