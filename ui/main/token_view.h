// The output: one span per emitted token, shaded by a measure (depth used, probability,
// entropy); hovering a token shows its lens row (top-k per depth, probabilities, decoded text).
// Tokens are buffered and drawn by flush(), which the window calls on its ~30 Hz timer.
#pragma once

#include <vector>

#include <QStringList>
#include <QTextEdit>

#include <tinyloop/tinyloop.h>

class QComboBox;

namespace tlui {

enum class ShadeMeasure { Depth, Probability, Entropy };

class TokenView : public QTextEdit {
    Q_OBJECT
public:
    explicit TokenView(QWidget* parent = nullptr);

    void setVocab(const QStringList& vocab) { m_vocab = vocab; }
    void setMaxDepth(int d) { m_maxDepth = d > 0 ? d : 1; }
    void setMeasure(ShadeMeasure m);
    ShadeMeasure measure() const { return m_measure; }

    void clearTokens(const QString& promptText = QString());
    void addToken(const tinyloop::TokenEvent& ev);  // buffered
    void flush();                                   // draws what is buffered
    // Replaces the tokens' probabilities (beam search reports none per token: the window gives it
    // the model's probability of each token from the exact lens) and redraws.
    void setProbabilities(const std::vector<float>& probs);
    int tokenCount() const { return static_cast<int>(m_events.size()); }
    const std::vector<tinyloop::TokenEvent>& events() const { return m_events; }

    QString lensTooltip(int index) const;  // the hover text of token `index` (HTML)
    int tokenAt(const QPoint& viewportPos) const;
    QColor shade(const tinyloop::TokenEvent& ev) const;

protected:
    bool event(QEvent* e) override;

private:
    void appendSpan(int index);
    QString tokenText(int32_t id) const;

    std::vector<tinyloop::TokenEvent> m_events;
    int m_drawn = 0;
    QStringList m_vocab;
    QString m_prompt;
    int m_maxDepth = 1;
    ShadeMeasure m_measure = ShadeMeasure::Depth;
};

}  // namespace tlui
