#include "views/recommendation_save.h"

#include "base/config_json.h"

#include <QFileInfo>
#include <QMessageBox>
#include <tinyloop_analysis/recommendation_search.h>

namespace tlui {

void writeRecommendation(const QString& modelPath, const QString& outPath, RecommendationPart part,
                         const tinyloop::Recommendation& measured_rec, const nlohmann::json& measured) {
    const tinyloop::ModelHandle now = tinyloop::load_model_handle(modelPath.toStdString());
    tinyloop::Model* model = now.get();
    tinyloop::Recommendation rec = modelRecommendation(model);
    const tinyloop::Recommendation& m = measured_rec;
    if (part == RecommendationPart::EarlyExit) {
        rec.early_exit = m.early_exit;  // the measured policy, one value
        rec.early_exit_loops = m.early_exit_loops;
    } else {
        // A chain and a tree recommendation share the draft depth; the kind measured sets its own
        // length (and width), the other kind's stored values stay.
        rec.set_draft_loops(m.chain.draft_loops);
        if (m.chain.draft_ahead > 0) rec.chain.draft_ahead = m.chain.draft_ahead;
        if (m.tree.draft_ahead > 0) rec.tree.draft_ahead = m.tree.draft_ahead;
        if (m.tree.branches > 0) rec.tree.branches = m.tree.branches;
    }
    nlohmann::json only = nlohmann::json::object();
    const char* key = part == RecommendationPart::EarlyExit ? "early_exit" : "speculation";
    only[key] = measured;
    const std::string meta = tinyloop::analysis::metadata_with_recommendation(
        tinyloop::model_info(model).metadata_json, rec, only);
    // (the handle may stay open while the file is replaced: the writer renames a new file over it)
    tinyloop::write_model_metadata(modelPath.toStdString(), outPath.toStdString(), meta);
}

QString unwritableReason(const QString& outPath) {
    if (outPath.isEmpty()) return "no model file is open";
    const QFileInfo f(outPath);
    const QFileInfo dir(f.absolutePath());
    if (!dir.isDir()) return QString("%1: the folder %2 does not exist").arg(outPath, dir.filePath());
    if (f.exists() && !f.isWritable()) return QString("%1: the file is not writable").arg(outPath);
    // The file is replaced through a temporary file beside it and a rename.
    if (!dir.isWritable()) return QString("%1: the folder %2 is not writable").arg(outPath, dir.filePath());
    return QString();
}

bool confirmRecommendationSave(QWidget* parent, const QString& modelPath, const QString& what) {
    const auto answer = QMessageBox::question(
        parent, "Save as the model's recommendation",
        QString("Write %1 into %2 as the model's recommended setting?\n\nOnly the file's metadata changes "
                "(every tensor byte is kept); generate, bench, the server and the config panel use it as "
                "their default from the next time the file is opened.")
            .arg(what, modelPath),
        QMessageBox::Save | QMessageBox::Cancel, QMessageBox::Cancel);
    return answer == QMessageBox::Save;
}

}  // namespace tlui
