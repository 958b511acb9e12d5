#include "plots/plot_deck.h"

#include <QBoxLayout>
#include <QResizeEvent>
#include <QStackedLayout>
#include <QTabWidget>

#include "base/zoom.h"
#include "plots/wrapped_label.h"

namespace tlui {

PlotDeck::PlotDeck(int minWidth, int minWindowHeight, Qt::Orientation orientation, QWidget* parent)
    : QWidget(parent), m_minWidth(minWidth), m_minWindowHeight(minWindowHeight) {
    setObjectName("plotDeck");
    m_stack = new QStackedLayout(this);
    m_stack->setContentsMargins(0, 0, 0, 0);
    m_row = new QWidget;
    m_rowLayout = new QBoxLayout(orientation == Qt::Horizontal ? QBoxLayout::LeftToRight : QBoxLayout::TopToBottom, m_row);
    m_rowLayout->setContentsMargins(0, 0, 0, 0);
    m_tabs = new QTabWidget;
    m_tabs->setObjectName("plotTabs");
    m_tabs->setDocumentMode(true);
    m_stack->addWidget(m_row);
    m_stack->addWidget(m_tabs);
    connect(&Zoom::instance(), &Zoom::factorChanged, this, [this] { rearrange(); });
}

void PlotDeck::addPage(QWidget* page, const QString& title) {
    m_pages.emplace_back(page, title);
    if (m_tabbed) m_tabs->addTab(page, title);
    else m_rowLayout->addWidget(page, 1);
}

void PlotDeck::resizeEvent(QResizeEvent* e) {
    QWidget::resizeEvent(e);
    rearrange();
}

void PlotDeck::showEvent(QShowEvent* e) {
    QWidget::showEvent(e);
    rearrange();
}

void PlotDeck::rearrange() {
    if (m_pages.empty() || !isVisible()) return;
    const double z = Zoom::instance().factor();
    const int across = m_rowLayout->direction() == QBoxLayout::LeftToRight ? static_cast<int>(m_pages.size()) : 1;
    const bool narrow = width() < across * m_minWidth * z;
    const bool low = window()->height() < m_minWindowHeight * z;
    const bool tabbed = narrow || low;
    if (tabbed == m_tabbed) return;
    m_tabbed = tabbed;
    if (tabbed) {
        for (const auto& [page, title] : m_pages) {
            // A hidden tab is resized only when shown: its wrapped captions would keep the height
            // they needed in a narrow column, and the tabs the largest of them.
            for (WrappedLabel* l : page->findChildren<WrappedLabel*>()) l->setMinimumHeight(0);
            m_tabs->addTab(page, title);
        }
        m_stack->setCurrentWidget(m_tabs);
    } else {
        while (m_tabs->count() > 0) m_tabs->removeTab(0);
        for (const auto& [page, title] : m_pages) {
            m_rowLayout->addWidget(page, 1);
            page->show();
        }
        m_stack->setCurrentWidget(m_row);
    }
}

}  // namespace tlui
