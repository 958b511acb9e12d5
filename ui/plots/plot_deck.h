// A row (or column) of captioned plots that stays readable on a small screen: side by side (one
// above the other) while each plot gets at least `minWidth` pixels and the window is at least
// `minWindowHeight` tall (both scaled by the zoom factor), otherwise one plot at a time behind tabs
// named by the plots' titles. On a
// 1280x720 screen, or in presentation mode, four plots side by side leave each a strip too small
// for its labels, legend and caption; a tab gives one the whole width. The decision is taken
// from the deck's width and the window's height (neither depends on the arrangement), so it
// cannot flip back and forth.
#pragma once

#include <vector>

#include <QString>
#include <QWidget>

class QBoxLayout;
class QStackedLayout;
class QTabWidget;

namespace tlui {

class PlotDeck : public QWidget {
    Q_OBJECT
public:
    PlotDeck(int minWidth, int minWindowHeight, Qt::Orientation orientation = Qt::Horizontal, QWidget* parent = nullptr);
    // `page`: usually withCaption(plot, caption); `title` names its tab.
    void addPage(QWidget* page, const QString& title);
    bool tabbed() const { return m_tabbed; }
    QTabWidget* tabs() const { return m_tabs; }

protected:
    void resizeEvent(QResizeEvent* e) override;
    void showEvent(QShowEvent* e) override;

private:
    void rearrange();

    int m_minWidth;
    int m_minWindowHeight;
    std::vector<std::pair<QWidget*, QString>> m_pages;
    QStackedLayout* m_stack = nullptr;
    QWidget* m_row = nullptr;
    QBoxLayout* m_rowLayout = nullptr;
    QTabWidget* m_tabs = nullptr;
    bool m_tabbed = false;
};

}  // namespace tlui
