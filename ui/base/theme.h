// The workbench's two themes, light and dark: the Fusion style with a light or a dark palette for
// every window. Plots follow the palette through plots/plot_look (their neutral colours: axes,
// grid, text, background, legend). The choice is kept in QSettings ("view/theme").
#pragma once

#include <optional>

#include <QString>

namespace tlui {

enum class Theme { Light, Dark };

QString themeName(Theme t);  // "light", "dark"
// "light" / "dark"; nullopt and a message naming the option and the allowed values otherwise.
std::optional<Theme> parseTheme(const QString& text, QString* error);

// Applies `t` to the application; `remember`: store it for the next start.
void applyTheme(Theme t, bool remember = true);
Theme currentTheme();
// Applies the remembered theme (light when none). Needs a QApplication.
void restoreTheme();

}  // namespace tlui
