#include "main/view_menu.h"

#include <QAction>
#include <QActionGroup>
#include <QMainWindow>
#include <QMenu>
#include <QToolBar>

#include "base/theme.h"
#include "base/zoom.h"

namespace tlui {

namespace {

QAction* addZoomAction(QMenu* menu, const QString& text, const QString& name, const QList<QKeySequence>& keys) {
    QAction* a = menu->addAction(text);
    a->setObjectName(name);
    a->setShortcuts(keys);
    // the analysis windows are windows of their own: the keys work in all of them
    a->setShortcutContext(Qt::ApplicationShortcut);
    return a;
}

}  // namespace

void installViewMenu(QMainWindow* window, QMenu* menu) {
    restoreTheme();
    Zoom& zoom = Zoom::instance();  // restores the remembered factor on first use
    menu->setObjectName("viewMenu");

    QAction* in = addZoomAction(menu, "Zoom &in", "zoomInAction",
                                {QKeySequence::ZoomIn, QKeySequence(Qt::CTRL | Qt::Key_Equal)});
    QAction* out = addZoomAction(menu, "Zoom &out", "zoomOutAction", {QKeySequence::ZoomOut});
    QAction* reset = addZoomAction(menu, "&Actual size", "zoomResetAction", {QKeySequence(Qt::CTRL | Qt::Key_0)});
    QObject::connect(in, &QAction::triggered, &zoom, &Zoom::zoomIn);
    QObject::connect(out, &QAction::triggered, &zoom, &Zoom::zoomOut);
    QObject::connect(reset, &QAction::triggered, &zoom, &Zoom::reset);
    auto showFactor = [reset](double f) { reset->setText(QString("&Actual size (now %1%)").arg(qRound(f * 100))); };
    showFactor(zoom.factor());
    QObject::connect(&zoom, &Zoom::factorChanged, reset, showFactor);

    menu->addSeparator();
    QAction* present = addZoomAction(menu, "&Presentation mode", "presentationAction", {QKeySequence(Qt::Key_F5)});
    present->setCheckable(true);
    present->setChecked(zoom.presentation());
    present->setToolTip(QString("Everything at %1% for a projector, toolbars hidden (F5 again to leave)")
                            .arg(qRound(Zoom::kPresentation * 100)));
    QObject::connect(present, &QAction::toggled, &zoom, &Zoom::setPresentation);
    QObject::connect(&zoom, &Zoom::presentationChanged, window, [window, present](bool on) {
        present->setChecked(on);
        for (QToolBar* tb : window->findChildren<QToolBar*>()) tb->setVisible(!on);
    });

    menu->addSeparator();
    QMenu* themes = menu->addMenu("&Theme");
    auto* group = new QActionGroup(themes);
    for (Theme t : {Theme::Light, Theme::Dark}) {
        QAction* a = themes->addAction(t == Theme::Light ? "&Light" : "&Dark");
        a->setObjectName("theme_" + themeName(t));
        a->setCheckable(true);
        a->setChecked(currentTheme() == t);
        group->addAction(a);
        QObject::connect(a, &QAction::triggered, window, [t] { applyTheme(t); });
    }
    // --theme (or another window) may have changed it since
    QObject::connect(themes, &QMenu::aboutToShow, themes, [group] {
        for (QAction* a : group->actions()) a->setChecked(a->objectName() == "theme_" + themeName(currentTheme()));
    });
}

}  // namespace tlui
