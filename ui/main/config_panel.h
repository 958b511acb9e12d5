// The GenerateConfig editor: a mode selector and one editor per GenerateConfig field (plus the
// speculative knobs), each with its range and the seed's description as tooltip. Input outside
// a field's range is refused in place: red border, the reason under the form, config() empty.
// The engine's validate_config (asked through the worker) has the final word: setEngineVerdict.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <QWidget>

#include "base/config_json.h"

class QComboBox;
class QLabel;
class QGroupBox;
class QScrollArea;
class QVBoxLayout;

namespace tlui {

class WrappedLabel;

class ConfigPanel : public QWidget {
    Q_OBJECT
public:
    explicit ConfigPanel(QWidget* parent = nullptr);

    void setLimits(const ConfigLimits& lim);
    ConfigLimits limits() const { return m_limits; }

    void setConfig(const tinyloop::GenerateConfig& c);
    void setKnobs(const tinyloop::SpeculationPolicy& k);  // 0 = the engine resolves the knob
    void setMode(DecodeMode m);  // programmatic: no field is touched

    // The loaded model's recommended settings as the panel's defaults (ModelLoaded::defaults and
    // ::recommended): applied at once (applyModelDefaults) and named in a note above the
    // early-exit fields ("recommended by the model", or the built-in defaults when it has none).
    void setModelDefaults(const tinyloop::GenerateConfig& defaults, const tinyloop::Recommendation& rec);
    // Puts the model's defaults into the early-exit fields (criterion, threshold, min_L,
    // peek_every; patience in early-exit mode), except the keys in `keep` (a preset's own). As in
    // the engine's resolve_early_exit, a kept criterion other than the model's keeps the other
    // early-exit fields as they are. The speculation knobs are not filled: a knob at 0 is the
    // model's recommendation when the engine resolves the run (the note says what it is).
    void applyModelDefaults(const QStringList& keep = {});
    QString recommendationNote() const;  // the note's text

    // The config in the editors, or nullopt (and the reason) when a field is refused.
    std::optional<tinyloop::GenerateConfig> config(QString* error = nullptr) const;
    std::optional<tinyloop::SpeculationPolicy> knobs(QString* error = nullptr) const;
    DecodeMode mode() const;
    // The grammar file for constrained decoding ("" = none); the worker parses it for each run.
    QString grammarFile() const;
    void setGrammarFile(const QString& path);
    bool isValid() const;
    QString message() const;  // what the message label shows ("" when all is well)
    QStringList invalidFields() const;

    // The engine's word on the whole config ("" = accepted).
    void setEngineVerdict(const QString& error);

    QWidget* editor(const QString& key) const;      // for tests and focus
    // The group at the top of the form: the chosen mode's own (early exit, speculative / tree), else GenerateConfig.
    QWidget* firstGroup() const;
    QComboBox* modeSelector() const { return m_mode; }

signals:
    void changed();  // any edit (the window asks the engine after a pause)
    void modeChanged(tlui::DecodeMode m);

protected:
    bool eventFilter(QObject* watched, QEvent* e) override;

private:
    struct Row {
        const FieldInfo* info = nullptr;
        QWidget* editor = nullptr;
        QLabel* label = nullptr;
    };
    nlohmann::json fieldValue(const Row& r, std::string* why) const;  // null + why on failure
    template <class T, class Parse>
    std::optional<T> fromRows(bool speculative, QString* error, Parse parse) const;
    void revalidate();
    void showMessage();  // message() on the refusal line
    void applyModeDefaults(DecodeMode m);
    void setFieldText(const std::string& key, const QString& text);
    // The fields a mode depends on (temperature, beam_size, early_exit_patience) as the engine's
    // mode_config sets them (modeConfig).
    tinyloop::GenerateConfig modeFieldsFor(DecodeMode m) const;
    void showRecommendation();

    tinyloop::GenerateConfig m_modelDefaults;
    tinyloop::Recommendation m_rec;
    bool m_haveModelDefaults = false;
    WrappedLabel* m_recNote = nullptr;
    WrappedLabel* m_recSpecNote = nullptr;

    std::map<std::string, Row> m_rows;
    QComboBox* m_mode = nullptr;
    QGroupBox* m_specBox = nullptr;
    QGroupBox* m_eeBox = nullptr;   // the early_exit_* fields and where their defaults come from
    QGroupBox* m_genBox = nullptr;
    QVBoxLayout* m_groups = nullptr;  // the three groups, the chosen mode's first
    QScrollArea* m_scroll = nullptr;
    void placeModeGroups();
    QLabel* m_message = nullptr;
    ConfigLimits m_limits;
    QString m_localError;
    QString m_engineError;
    QStringList m_invalid;
};

}  // namespace tlui
