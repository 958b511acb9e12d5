// The glossary (Help -> Glossary): every term the workbench's labels, captions and status lines
// use, explained in plain words. Pure data and lookup here; the searchable window is
// glossary_dialog.h. Captions link terms as "glossary:<term>" (plots/plot_caption.h).
#pragma once

#include <vector>

#include <QString>
#include <QStringList>

namespace tlui {

struct GlossaryEntry {
    QString term;         // as the glossary lists it ("loop pass")
    QStringList aliases;  // other spellings the UI uses ("pass", "loops", "depth", ...)
    QString text;         // the explanation, plain text
};

// Every entry, in alphabetical order of term.
const std::vector<GlossaryEntry>& glossaryEntries();
// The entry whose term or alias equals `word` (case-insensitive, '_' and '-' read as spaces);
// nullptr when none does.
const GlossaryEntry* findGlossaryEntry(const QString& word);
// The entries whose term, aliases or text contain `query` (case-insensitive); all for an empty query.
std::vector<const GlossaryEntry*> searchGlossary(const QString& query);

}  // namespace tlui
