// The tour's steps (main/tour.h): what each one sets, runs and checks, and the words of its panel.
#include <cmath>
#include <memory>

#include <QTabWidget>

#include "main/config_panel.h"
#include "main/main_window.h"
#include "main/tour.h"
#include "plots/depth_plot.h"
#include "plots/lens_heatmap.h"
#include "views/analysis_views.h"
#include "views/depth_scrubber_view.h"

namespace tlui {

namespace {

using Done = std::function<void(bool, QString)>;

enum PlotTab { LensTab = 0, DepthTab = 1, SpeculativeTab = 2 };

// Greedy at the model's default depth, short enough to run in a moment on a laptop.
tinyloop::GenerateConfig baseConfig(int maxTokens) {
    tinyloop::GenerateConfig c;
    c.max_tokens = maxTokens;
    c.temperature = 0.0f;
    return c;
}

void configure(MainWindow& w, const QString& prompt, DecodeMode mode, const tinyloop::GenerateConfig& c, PlotTab tab) {
    w.setPrompt(prompt);
    w.configPanel()->setConfig(c);
    w.configPanel()->setMode(mode);
    w.plotTabs()->setCurrentIndex(tab);
}

// Generates with the panel's settings; done once that run has ended and its exact lens is in.
// Signals of an earlier run (one the tour stopped; its end can arrive in the same call that
// starts this one) are not this run's.
void generateThen(MainWindow& w, Done done) {
    if (!w.generate()) return done(false, "the run could not start (the status bar says why)");
    // The run's own id: the session shows it only from its first token (a refused run keeps the last).
    const quint64 id = w.currentRunId();
    auto fired = std::make_shared<bool>(false);
    auto settled = std::make_shared<QMetaObject::Connection>();
    auto ended = std::make_shared<QMetaObject::Connection>();
    auto once = [fired, settled, ended, done](bool ok, const QString& error) {
        if (*fired) return;
        *fired = true;
        QObject::disconnect(*settled);
        QObject::disconnect(*ended);
        done(ok, error);
    };
    *settled = QObject::connect(&w, &MainWindow::sessionSettled, &w, [once, id, &w] {
        if (w.session().run.id == id && !w.isRunning()) once(true, QString());
    });
    *ended = QObject::connect(&w, &MainWindow::runEnded, &w, [once, id, &w](quint64 run, bool ok) {
        if (run == id && !ok) once(false, w.lastError());
    });
}

QString needTokens(MainWindow& w) {
    if (w.session().events.empty()) return "the run emitted no token";
    if (w.heatmap()->tokenCount() == 0) return "the lens heatmap has no token";
    return QString();
}

std::vector<TourStep> makeSteps() {
    std::vector<TourStep> s;
    s.push_back({"Greedy decoding and the logit lens",
                 "The text model continued \"In the beginning\" [[greedy|greedily]]: at every step it takes its most "
                 "likely token. The Logit lens tab (the plots on the right) shows what the model would have said after each "
                 "[[loop pass]]: one column per token, pass 1 at the bottom. The colour is the [[probability]] that "
                 "pass gives the token finally written. Read a column upwards: a column bright from pass 1 was "
                 "an easy token; where the colour changes from pass to pass, the later passes changed the "
                 "model's mind. Hover a cell for that pass's top guesses.",
                 "tinyloop-kjv",
                 [](MainWindow& w, Done done) {
                     configure(w, "In the beginning", DecodeMode::Greedy, baseConfig(24), LensTab);
                     w.heatmap()->setMetric(LensMetric::ProbEmitted);
                     generateThen(w, done);
                 },
                 [](MainWindow& w) {
                     if (QString miss = needTokens(w); !miss.isEmpty()) return miss;
                     return w.heatmap()->isExact() ? QString() : QString("the exact lens did not arrive");
                 }});
    s.push_back({"The answer emerging across passes",
                 "Now the second bundled model, a reasoner that adds one digit per [[loop pass]]. The prompt "
                 "2479362? asks for the last digit of 2+4+7+9+3+6+2 = 33. It writes '=' and then the answer: the "
                 "second column of the Logit lens. The colour is now the [[probability]] of the final answer, 3, "
                 "pass by pass: nothing until pass 7, when the seventh digit has been added, then it stays. Seven "
                 "digits need seven passes: the model thinks with depth.",
                 "tinyloop-digitsum",
                 [](MainWindow& w, Done done) {
                     configure(w, "2479362?", DecodeMode::Greedy, baseConfig(4), LensTab);
                     w.heatmap()->setMetric(LensMetric::ProbFinal);
                     generateThen(w, done);
                 },
                 [](MainWindow& w) {
                     if (QString miss = needTokens(w); !miss.isEmpty()) return miss;
                     const LensHeatmap* h = w.heatmap();
                     if (h->tokenCount() < 2) return QString("the answer (the token after '=') is missing");
                     const double first = h->value(LensMetric::ProbFinal, 1, 1);
                     const double last = h->value(LensMetric::ProbFinal, 1, h->depthCount());
                     if (!(last > 0.5 && last > first + 0.3))
                         return QString("the answer does not emerge across passes (p = %1 at pass 1, %2 at the last)")
                             .arg(first).arg(last);
                     return QString();
                 }});
    s.push_back({"Early exit: stop when the answer has settled",
                 "Back to the text model with [[early exit]] on: each token stops looping once its top guess has "
                 "stayed the same for one check, from pass 2 on, instead of running all 6 passes. The Depth per "
                 "token tab shows how many passes each token used: bars below the dashed line stopped early, and "
                 "the passes they skipped are work saved. The status bar at the very bottom says where most tokens exited and "
                 "why. Later tokens still see the exited ones through [[propagated keys/values]].",
                 "tinyloop-kjv",
                 [](MainWindow& w, Done done) {
                     tinyloop::GenerateConfig c = baseConfig(32);
                     c.loops = 6;
                     c.early_exit.criterion = tinyloop::EarlyExitCriterion::ArgmaxStable;
                     c.early_exit.patience = 1;
                     c.early_exit.min_L = 2;
                     c.early_exit.peek_every = 1;
                     configure(w, "In the beginning", DecodeMode::EarlyExit, c, DepthTab);
                     generateThen(w, done);
                 },
                 [](MainWindow& w) {
                     if (QString miss = needTokens(w); !miss.isEmpty()) return miss;
                     if (w.depthPlot()->count() == 0) return QString("the depth plot is empty");
                     for (const auto& e : w.session().events)
                         if (e.depth < 6) return QString();
                     return QString("no token exited before pass 6");
                 }});
    s.push_back({"Self-speculation and its acceptance",
                 "[[self-speculation]]: the same model [[draft|drafts]] 4 tokens cheaply with 1 pass, then checks "
                 "them all at once at full depth and keeps those it agrees with. The Speculative tab shows one "
                 "bar per [[cycle]]: grey up to the tokens drafted, green the ones accepted. The rate above the chart is the "
                 "[[acceptance]]. The text is exactly the greedy text of step 1; only the work differs.",
                 "tinyloop-kjv",
                 [](MainWindow& w, Done done) {
                     tinyloop::SpeculationPolicy k;
                     k.draft_loops = 1;
                     k.verify_loops = 0;
                     k.draft_ahead = 4;
                     w.configPanel()->setKnobs(k);
                     configure(w, "In the beginning", DecodeMode::Speculative, baseConfig(24), SpeculativeTab);
                     generateThen(w, done);
                 },
                 [](MainWindow& w) {
                     if (QString miss = needTokens(w); !miss.isEmpty()) return miss;
                     const RunResult& r = w.session().run;
                     if (!r.hasSpeculative || r.cycles.empty()) return QString("no speculative cycle was recorded");
                     return r.stats.spec_accepted > 0 ? QString() : QString("no draft was accepted");
                 }});
    s.push_back({"The depth scrubber",
                 "The depth scrubber (Analysis menu) answers the same prompt at any [[depth]] from one reading of the "
                 "prompt: moving deeper runs only the new passes. The tour moved the slider to 1, 2, 4 and 6: the "
                 "right pane shows which words changed from the previous depth (struck red: gone, green: new). "
                 "Drag the slider yourself and watch the text settle as the model thinks longer.",
                 "tinyloop-kjv",
                 [](MainWindow& w, Done done) {
                     w.analysisViews()->demo("scrubber", "In the beginning", 24, QString(), [done](bool ok) {
                         done(ok, ok ? QString() : QString("the depth scrubber did not answer"));
                     });
                 },
                 [](MainWindow& w) {
                     auto* v = qobject_cast<DepthScrubberView*>(w.analysisViews()->window("scrubber"));
                     if (!v || !v->isVisible()) return QString("the depth scrubber is not open");
                     return v->history().size() >= 4 ? QString() : QString("the scrubber answered at fewer than 4 depths");
                 }});
    return s;
}

}  // namespace

const std::vector<TourStep>& tourSteps() {
    static const std::vector<TourStep> steps = makeSteps();
    return steps;
}

}  // namespace tlui
