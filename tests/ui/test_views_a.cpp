// Issue 8, views part A, on the bundled model with real engine runs: the comparison (each mode
// equals the same mode run alone, concurrently or one after another), the depth scrubber (each
// depth's answer through the ResumeHandle equals a fresh generation at that depth), the
// draft-agreement map (the definition on a hand-built table; replayed on a real greedy run it
// predicts the acceptance the engine measures when speculating), the sweep (its counts are those
// of real runs), step mode (taking the proposal every time is plain generation, greedy and
// sampled), and the five views reached from the Views menu, filled by a run, exported.
#include <QAction>
#include <QFile>
#include <QFileInfo>
#include <QMenu>
#include <QMenuBar>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTextBrowser>
#include <QTest>

#include <atomic>

#include <tinyloop_analysis/depth_scrubber.h>
#include <tinyloop_analysis/compare_modes.h>
#include <tinyloop_analysis/step_mode.h>
#include "worker/analysis_a_worker.h"
#include "main/main_window.h"
#include "main/model_paths.h"
#include "main/presets_panel.h"
#include "views/agreement_map_view.h"
#include "views/compare_modes_view.h"
#include "views/depth_scrubber_view.h"
#include "views/step_mode_view.h"
#include "views/speculation_sweep_view.h"
#include "ui_test_util.h"

using namespace tlui;

namespace {

tinyloop::GenerateResult plain(tinyloop::Model* m, const std::vector<int32_t>& prompt, const tinyloop::GenerateConfig& c) {
    return tinyloop::generate_ex(m, prompt.data(), static_cast<int>(prompt.size()), c);
}

std::vector<int32_t> continuationOf(const tinyloop::GenerateResult& r) {
    return {r.tokens.begin() + r.prompt_len, r.tokens.end()};
}

}  // namespace

class TestViewsA : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_path;
    tinyloop::Model* m_model = nullptr;

    static void sameRun(const ModeRun& a, const ModeRun& b) {
        QVERIFY2(a.error.empty(), a.error.c_str());
        QVERIFY2(b.error.empty(), b.error.c_str());
        QCOMPARE(a.tokens, b.tokens);
        QCOMPARE(a.text, b.text);
        QCOMPARE(a.stats.tokens_emitted, b.stats.tokens_emitted);
        QCOMPARE(a.stats.depth_per_token, b.stats.depth_per_token);
        QCOMPARE(a.meanDepth(), b.meanDepth());
        QCOMPARE(a.stats.stop_reason, b.stats.stop_reason);
        QCOMPARE(a.stats.spec_cycles, b.stats.spec_cycles);
        QCOMPARE(a.stats.spec_drafted, b.stats.spec_drafted);
        QCOMPARE(a.stats.spec_tested, b.stats.spec_tested);
        QCOMPARE(a.stats.spec_accepted, b.stats.spec_accepted);
        QCOMPARE(a.stats.spec_accept_hist, b.stats.spec_accept_hist);
    }

private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QVERIFY(m_dir.isValid());
        const StartupModel sm = resolveStartupModel(QString());
        QVERIFY2(!sm.path.isEmpty() && !sm.randomFallback,
                 qPrintable("the bundled model is missing; looked at " + sm.tried.join(", ")));
        m_path = sm.path;
        m_model = tinyloop::load_model(m_path.toStdString());
        QVERIFY(m_model);
    }
    void cleanupTestCase() { tinyloop::free_model(m_model); }

    // ---- 1. Compare decode modes --------------------------------------------------------------

    void comparisonEqualsEachModeAlone() {
        const auto& hp = tinyloop::model_hparams(m_model);
        const std::vector<ModeSpec> modes = defaultCompareModes(hp, 16);
        QCOMPARE(modes.size(), size_t(7));
        const std::string prompt = "And God said";
        const CompareResult conc = runComparison(m_model, prompt, modes, 1, true);
        const CompareResult seq = runComparison(m_model, prompt, modes, 1, false);
        QVERIFY(conc.concurrent && !seq.concurrent);
        const std::vector<int32_t> ids = promptIds(m_model, prompt);
        QCOMPARE(conc.promptIds, ids);
        for (size_t i = 0; i < modes.size(); ++i) {
            const ModeRun alone = runMode(m_model, ids, modes[i]);
            sameRun(conc.runs[i], alone);
            sameRun(seq.runs[i], alone);
            QVERIFY(conc.runs[i].stats.tokens_emitted > 0);
        }
        // The divergence column: speculation (greedy) equals greedy at its verify depth, so it
        // never diverges from the "greedy L=8" baseline; the L=4 answer's divergence is where its
        // tokens first differ.
        QCOMPARE(conc.baseline, 1);
        QCOMPARE(conc.divergence[2], -1);
        QCOMPARE(conc.divergence[3], -1);
        QCOMPARE(conc.divergence[0], firstDivergence(conc.runs[0].tokens, conc.runs[1].tokens));
        QVERIFY(conc.runs[2].speculative && conc.runs[2].stats.spec_tested > 0);
        // Early exit (hidden-state change below 0.1 and 0.2) uses fewer loops than the fixed depth.
        QVERIFY(conc.runs[4].meanDepth() < 8.0);
        QVERIFY(conc.runs[5].meanDepth() < 8.0);
        // Re-basing only recomputes the divergences.
        CompareResult r = conc;
        setBaseline(r, 0);
        QCOMPARE(r.divergence[0], -1);
        QCOMPARE(r.divergence[1], firstDivergence(r.runs[1].tokens, r.runs[0].tokens));
        // The JSON export carries every run's text and counters.
        const nlohmann::json j = compareToJson(conc);
        QCOMPARE(j["runs"].size(), modes.size());
        QCOMPARE(j["runs"][2]["stats"]["spec_accepted"].get<int>(), conc.runs[2].stats.spec_accepted);
        QCOMPARE(j["runs"][6]["text"].get<std::string>(), conc.runs[6].text);
    }

    void comparisonReportsARefusedMode() {
        ModeSpec bad;
        bad.label = "speculative 9->8";
        bad.mode = DecodeMode::Speculative;
        bad.config.max_tokens = 4;
        bad.knobs.draft_loops = 9;
        bad.knobs.verify_loops = 8;
        ModeSpec good;
        good.label = "greedy";
        good.config.max_tokens = 4;
        const CompareResult r = runComparison(m_model, "In", {good, bad}, 0, true);
        QVERIFY(r.runs[0].error.empty());
        QCOMPARE(r.runs[0].stats.tokens_emitted, 4);
        QVERIFY2(QString::fromStdString(r.runs[1].error).contains("draft_loops"), r.runs[1].error.c_str());
    }

    // ---- 2. Depth scrubber ---------------------------------------------------------------------

    void scrubberEqualsFreshGeneration() {
        const std::vector<int32_t> ids = promptIds(m_model, "In the beginning God created");
        tinyloop::GenerateConfig cfg;
        cfg.max_tokens = 12;
        DepthScrubber s(m_model, ids, cfg, 4);
        QCOMPARE(s.handleLoops(), 4);
        int deepest = 4;
        std::vector<int32_t> previous;
        for (int d : {4, 8, 2, 6, 1, 12, 3}) {
            const ScrubAnswer a = s.answer(d);
            tinyloop::GenerateConfig fresh = cfg;
            fresh.loops = d;
            const tinyloop::GenerateResult f = plain(m_model, ids, fresh);
            QCOMPARE(a.tokens, continuationOf(f));
            QCOMPARE(a.text, f.text);
            QCOMPARE(a.depth, d);
            QCOMPARE(a.stats.depth_per_token, f.stats.depth_per_token);
            // the prompt is computed once: only going deeper runs new passes over it
            QCOMPARE(a.handleLoopsBefore, deepest);
            deepest = std::max(deepest, d);
            QCOMPARE(a.handleLoopsAfter, deepest);
            // the diff replays both answers
            const std::vector<DiffOp> ops = diffTokens(previous, a.tokens);
            std::vector<int32_t> from, to;
            for (const DiffOp& op : ops) {
                if (op.kind != DiffOp::Added) from.push_back(op.token);
                if (op.kind != DiffOp::Removed) to.push_back(op.token);
            }
            QCOMPARE(from, previous);
            QCOMPARE(to, a.tokens);
            previous = a.tokens;
        }
        QVERIFY_THROWS_EXCEPTION(tinyloop::Error, s.answer(0));
        QVERIFY_THROWS_EXCEPTION(tinyloop::Error, s.answer(17));
    }

    void tokenDiffIsMinimal() {
        const std::vector<DiffOp> ops = diffTokens({1, 2, 3, 4, 5}, {1, 3, 4, 9, 5});
        int same = 0, removed = 0, added = 0;
        for (const DiffOp& op : ops) (op.kind == DiffOp::Same ? same : op.kind == DiffOp::Removed ? removed : added)++;
        QCOMPARE(same, 4);  // 1 3 4 5
        QCOMPARE(removed, 1);
        QCOMPARE(added, 1);
        QCOMPARE(ops[1].kind, DiffOp::Removed);
        QCOMPARE(ops[1].token, 2);
        QCOMPARE(ops[4].kind, DiffOp::Added);
        QCOMPARE(ops[4].token, 9);
        QCOMPARE(diffTokens({}, {7, 8}).size(), size_t(2));
    }

    // ---- 3. Draft-agreement map -----------------------------------------------------------------

    void agreementMapHandBuilt() {
        // 5 positions x 4 depths; the last column is the final depth's argmax.
        const AgreementMap m = agreementFromArgmax({
            {10, 10, 10, 10},  // agrees from depth 1
            {11, 12, 13, 13},  // from depth 3
            {14, 15, 14, 14},  // depth 1 agrees, 2 does not, 3 again: first = 1
            {16, 17, 18, 19},  // only the final depth
            {20, 21, 22, 20},  // depth 1 and 4
        });
        QCOMPARE(m.finalDepth, 4);
        QCOMPARE(m.firstAgree, (std::vector<int>{1, 3, 1, 4, 1}));
        // Definition: over positions 1..4 (position 0 is the prefill's), the share whose argmax at
        // D equals the final one. D=1: positions 2, 4 -> 2/4. D=2: none -> 0. D=3: 1, 2 -> 2/4. D=4: all.
        QCOMPARE(predictedAcceptance(m, 1), 0.5);
        QCOMPARE(predictedAcceptance(m, 2), 0.0);
        QCOMPARE(predictedAcceptance(m, 3), 0.5);
        QCOMPARE(predictedAcceptance(m, 4), 1.0);
        QVERIFY_THROWS_EXCEPTION(tinyloop::Error, predictedAcceptance(m, 5));
        // Chain replay at D=3, 2 drafts per cycle: emitted 1 (prefill); cycle 1 drafts positions
        // 1, 2 -> both agree, a=2, no bonus -> emitted 3; cycle 2 drafts 3, 4 -> 3 disagrees, a=0,
        // the verifier's token -> emitted 4; cycle 3 drafts 4 -> 4 disagrees at D=3 -> a=0 -> 5.
        const ChainReplay r = replayChain(m, 3, 2);
        QCOMPARE(r.cycles, 3);
        QCOMPARE(r.drafted, 5);
        QCOMPARE(r.accepted, 2);
        QCOMPARE(r.emitted, 5);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, agreementFromArgmax({{1, 2}, {1}}));
        // Predicted speedup: alpha = 1 with 4 drafts at depth 2 of 8 emits 4 tokens for 4*2 + 6 = 14
        // passes against 4*8 = 32 for greedy; alpha = 0 emits 1 token per 14 passes.
        QCOMPARE(predictedSpeedup(1.0, 2, 8, 4), 32.0 / 14.0);
        QCOMPARE(predictedSpeedup(0.0, 2, 8, 4), 8.0 / 14.0);
    }

    void agreementMapPredictsMeasuredSpeculation() {
        const std::vector<int32_t> ids = promptIds(m_model, "The LORD is my shepherd");
        const int V = 8, N = 24;
        tinyloop::GenerateConfig g;
        g.max_tokens = N;
        g.loops = V;
        const tinyloop::GenerateResult greedy = plain(m_model, ids, g);
        const AgreementMap map = buildAgreementMap(m_model, ids, continuationOf(greedy), V);
        QCOMPARE(map.positions(), greedy.stats.tokens_emitted);
        // the map's final column is the greedy answer itself
        for (int j = 0; j < map.positions(); ++j)
            QCOMPARE(map.argmax[static_cast<size_t>(j)][V - 1], map.continuation[static_cast<size_t>(j)]);
        bool sawRejection = false;
        for (int D = 1; D < V; ++D)
            for (int K : {2, 4}) {
                tinyloop::SpeculativeConfig sc;
                sc.max_tokens = N;
                sc.draft_loops = D;
                sc.verify_loops = V;
                sc.draft_ahead = K;
                const tinyloop::GenerateResult spec =
                    tinyloop::generate_speculative_ex(m_model, ids.data(), static_cast<int>(ids.size()), sc);
                QCOMPARE(spec.tokens, greedy.tokens);
                const ChainReplay r = replayChain(map, D, K, N);
                QCOMPARE(r.cycles, spec.stats.spec_cycles);
                QCOMPARE(r.accepted, spec.stats.spec_accepted);
                if (greedy.stats.stop_reason == tinyloop::StopReason::MAX_TOKENS)
                    QCOMPARE(r.drafted, spec.stats.spec_drafted);
                sawRejection = sawRejection || r.accepted < r.drafted;
            }
        QVERIFY(sawRejection);  // the shallow drafts do disagree somewhere: the test is not vacuous
    }

    // ---- 4. Sweep -------------------------------------------------------------------------------

    void sweepCountsComeFromRealRuns() {
        SweepSpec s;
        s.prompts = {"In the beginning", "And the earth was"};
        s.maxTokens = 10;
        s.verifyLoops = 6;
        s.draftLoops = {1, 3, 6};  // 6 is not below the verify depth: skipped
        s.draftAhead = {2, 4};
        s.branches = {0, 2};
        int calls = 0, lastTotal = 0;
        const SweepResult r = runSweep(m_model, s, nullptr, [&](int done, int total) {
            ++calls;
            QCOMPARE(done, calls);
            lastTotal = total;
        });
        QCOMPARE(r.cellsPlanned, 2 * 2 * 2);
        QCOMPARE(static_cast<int>(r.cells.size()), 8);
        QCOMPARE(lastTotal, 2 + 8 * 2 + 2);  // baseline, cells, baseline again
        QCOMPARE(calls, lastTotal);
        QVERIFY(!r.cancelled);
        int baselineTokens = 0;
        for (const auto& t : r.baselineTokens) baselineTokens += static_cast<int>(t.size());
        for (const SweepCell& c : r.cells) {
            QVERIFY2(c.error.empty(), c.error.c_str());
            QCOMPARE(c.runs, 2);
            QCOMPARE(c.tokens, baselineTokens);
            QVERIFY(c.equalsGreedy);
            // the totals are the sums of the same runs made alone
            int drafted = 0, accepted = 0, tested = 0, cycles = 0, tokens = 0;
            for (size_t p = 0; p < s.prompts.size(); ++p) {
                ModeSpec m;
                m.mode = c.branches ? DecodeMode::Tree : DecodeMode::Speculative;
                m.config.max_tokens = s.maxTokens;
                m.knobs.draft_loops = c.draftLoops;
                m.knobs.verify_loops = 6;
                m.knobs.draft_ahead = c.draftAhead;
                m.knobs.K_branches = c.branches ? c.branches : 2;
                const ModeRun run = runMode(m_model, r.promptIds[p], m);
                drafted += run.stats.spec_drafted;
                accepted += run.stats.spec_accepted;
                tested += run.stats.spec_tested;
                cycles += run.stats.spec_cycles;
                tokens += run.stats.tokens_emitted;
            }
            QCOMPARE(c.drafted, drafted);
            QCOMPARE(c.accepted, accepted);
            QCOMPARE(c.tested, tested);
            QCOMPARE(c.cycles, cycles);
            QCOMPARE(c.tokens, tokens);
            QVERIFY(c.totalMs > 0);
            QCOMPARE(c.baselineMs, r.baselineMs[0] + r.baselineMs[1]);
            // the prediction pools the two maps
            int n = 0, ok = 0;
            for (const AgreementMap& m : r.maps)
                for (int j = 1; j < m.positions(); ++j, ++n) ok += m.agrees(j, c.draftLoops);
            QCOMPARE(c.predictedAcceptance, double(ok) / n);
        }
        const int best = r.bestCell();
        QVERIFY(best >= 0);
        const Preset p = r.bestPreset();
        QCOMPARE(p.knobs.draft_loops, r.cells[static_cast<size_t>(best)].draftLoops);
        QCOMPARE(p.knobs.verify_loops, 6);
        // the preset is a valid preset file
        const Preset back = presetFromJson(presetToJson(p));
        QVERIFY(presetsEqual(back, p));
        const nlohmann::json j = sweepToJson(r);
        QCOMPARE(j["cells"].size(), size_t(8));
        QCOMPARE(j["cells"][0]["drafted"].get<int>(), r.cells[0].drafted);
    }

    void sweepCancelsAndRefusesBadGrids() {
        SweepSpec s;
        s.prompts = {"In the beginning"};
        s.maxTokens = 8;
        s.verifyLoops = 4;
        s.draftLoops = {1, 2, 3};
        s.draftAhead = {2, 3};
        std::atomic<bool> cancel{false};
        const SweepResult r = runSweep(m_model, s, &cancel, [&](int done, int) {
            if (done == 3) cancel.store(true);
        });
        QVERIFY(r.cancelled);
        int runs = 0;
        for (const SweepCell& c : r.cells) runs += c.runs;
        QCOMPARE(runs, 2);  // the baseline, then two cells, then it stopped
        SweepSpec bad = s;
        bad.draftAhead = {0};
        try {
            runSweep(m_model, bad);
            QFAIL("draft_ahead 0 accepted");
        } catch (const tinyloop::Error& e) {
            QVERIFY2(QString(e.what()).contains("draft_ahead"), e.what());
        }
        bad = s;
        bad.draftLoops = {4, 5};
        QVERIFY_THROWS_EXCEPTION(tinyloop::Error, runSweep(m_model, bad));
        bad = s;
        bad.prompts.clear();
        QVERIFY_THROWS_EXCEPTION(tinyloop::Error, runSweep(m_model, bad));
    }

    // ---- 5. Step mode ---------------------------------------------------------------------------

    void stepTakingProposalsIsPlainGeneration_data() {
        QTest::addColumn<float>("temperature");
        QTest::addColumn<int>("loops");
        QTest::addColumn<int>("patience");
        QTest::newRow("greedy L=4") << 0.0f << 4 << 0;
        QTest::newRow("greedy L=8") << 0.0f << 8 << 0;
        QTest::newRow("sampling T=0.9 seed 11") << 0.9f << 4 << 0;
        QTest::newRow("early exit") << 0.0f << 8 << 1;
    }
    void stepTakingProposalsIsPlainGeneration() {
        QFETCH(float, temperature);
        QFETCH(int, loops);
        QFETCH(int, patience);
        const std::vector<int32_t> ids = promptIds(m_model, "In the beginning God");
        tinyloop::GenerateConfig cfg;
        cfg.max_tokens = 14;
        cfg.loops = loops;
        cfg.temperature = temperature;
        cfg.top_k = 40;
        cfg.sample_seed = 11;
        cfg.early_exit_patience = patience;
        cfg.early_exit_criterion = tinyloop::EarlyExitCriterion::ArgmaxStable;
        tinyloop::GenerateOptions lensOpts;
        lensOpts.lens = true;
        lensOpts.lens_top_k = 8;
        std::vector<tinyloop::TokenEvent> events;
        lensOpts.observer = [&](const tinyloop::TokenEvent& ev) {
            events.push_back(ev);
            return true;
        };
        const tinyloop::GenerateResult ref = tinyloop::generate_ex(m_model, ids.data(), static_cast<int>(ids.size()), cfg, lensOpts);
        Stepper s(m_model, ids, cfg, 8);
        while (!s.finished()) s.acceptProposal();
        QCOMPARE(s.continuation(), continuationOf(ref));
        QCOMPARE(s.text(), ref.text);
        QCOMPARE(s.stopReason(), std::string(tinyloop::stop_reason_name(ref.stats.stop_reason)));
        // each step showed the lens row the plain run reports for that token
        QCOMPARE(s.steps().size(), events.size());
        for (size_t i = 0; i < events.size(); ++i) {
            const tinyloop::TokenEvent& p = s.steps()[i].proposal;
            QCOMPARE(p.token, events[i].token);
            QCOMPARE(p.depth, events[i].depth);
            QVERIFY(p.prob == events[i].prob);
            QCOMPARE(p.lens.size(), events[i].lens.size());
            for (size_t d = 0; d < p.lens.size(); ++d) {
                QCOMPARE(p.lens[d].top_ids, events[i].lens[d].top_ids);
                QVERIFY(p.lens[d].top_probs == events[i].lens[d].top_probs);
            }
            QVERIFY(!s.steps()[i].overridden());
        }
        QVERIFY_THROWS_EXCEPTION(tinyloop::Error, s.propose());
    }

    void stepOverrideContinuesFromTheChosenToken() {
        const std::vector<int32_t> ids = promptIds(m_model, "And God said");
        tinyloop::GenerateConfig cfg;
        cfg.max_tokens = 10;
        cfg.temperature = 0.8f;
        cfg.sample_seed = 3;
        Stepper s(m_model, ids, cfg, 5);
        s.acceptProposal();
        s.acceptProposal();
        // pick the second-ranked candidate of the final depth's lens row
        const tinyloop::TokenEvent& p = s.propose();
        const auto& row = p.lens.back().top_ids;
        const int32_t other = row[0] == p.token ? row[1] : row[0];
        s.commit(other);
        QVERIFY(s.steps().back().overridden());
        QCOMPARE(s.originSteps(), 3);
        while (!s.finished()) s.acceptProposal();
        // after the override, the rest is a plain run from prompt + the three chosen tokens
        std::vector<int32_t> origin = ids;
        for (int i = 0; i < 3; ++i) origin.push_back(s.continuation()[static_cast<size_t>(i)]);
        tinyloop::GenerateConfig rest = cfg;
        rest.max_tokens = cfg.max_tokens - 3;
        const tinyloop::GenerateResult r = plain(m_model, origin, rest);
        const std::vector<int32_t> all = s.continuation();
        const std::vector<int32_t> got(all.begin() + 3, all.end());
        QCOMPARE(got, continuationOf(r));
        QCOMPARE(static_cast<int>(s.continuation().size()), 3 + r.stats.tokens_emitted);
        QVERIFY_THROWS_EXCEPTION(tinyloop::Error, Stepper(m_model, ids, cfg).commit(1 << 20));
    }

    // ---- The views, from the menu, filled by real runs, exported ---------------------------------

    void viewsFromTheMenu() {
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets");
        o.errorDialogs = false;
        MainWindow w(o);
        w.show();
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(m_path);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        QVERIFY(ready.at(0).at(0).toBool());
        QMenu* views = nullptr;
        for (QAction* a : w.menuBar()->actions())
            if (a->menu() && a->text().remove('&') == "Views") views = a->menu();
        QVERIFY(views);
        auto trigger = [&](const QString& kind) -> ViewA* {
            for (QAction* a : views->actions())
                if (a->objectName() == "viewA_" + kind + "_action") {
                    a->trigger();
                    return w.findChild<ViewA*>("viewA_" + kind, Qt::FindDirectChildrenOnly);
                }
            return nullptr;
        };
        auto runAndWait = [&](ViewA* v) {
            QSignalSpy done(v, &ViewA::workFinished);
            v->run();
            return tltest::waitFor([&] { return !v->isBusy() && done.count() > 0; }, 120000);
        };
        auto exportAll = [&](ViewA* v, const QString& stem) {
            for (const char* suffix : {".png", ".pdf", ".json"}) {
                const QString p = m_dir.filePath(stem + suffix);
                QString err;
                const bool ok = QString(suffix) == ".json" ? v->exportJson(p, &err) : v->exportImage(p, &err);
                QVERIFY2(ok, qPrintable(err));
                QVERIFY(QFileInfo(p).size() > 100);
            }
            QFile f(m_dir.filePath(stem + ".json"));
            QVERIFY(f.open(QIODevice::ReadOnly));
            QVERIFY(nlohmann::json::parse(f.readAll().toStdString()) == v->data());
        };

        auto* cmp = qobject_cast<CompareView*>(trigger("compare"));
        QVERIFY(cmp && cmp->isVisible());
        cmp->setPrompt("In the beginning");
        cmp->setMaxTokens(8);
        QVERIFY(runAndWait(cmp));
        QVERIFY2(cmp->lastError().isEmpty(), qPrintable(cmp->lastError()));
        QVERIFY(cmp->result());
        QCOMPARE(cmp->result()->runs.size(), size_t(7));
        const std::vector<int32_t> ids = promptIds(m_model, "In the beginning");
        for (const ModeRun& r : cmp->result()->runs) sameRun(r, runMode(m_model, ids, r.spec));
        QCOMPARE(cmp->table()->rowCount(), 7);
        // the aligned texts mark where each mode leaves the baseline (by default the second mode,
        // greedy at depth 8)
        const QString shown = cmp->textsView()->toPlainText();
        QCOMPARE(cmp->result()->baseline, 1);
        for (size_t i = 0; i < cmp->result()->runs.size(); ++i) {
            if (i == 1) continue;
            const int div = cmp->result()->divergence[i];
            QVERIFY(shown.contains(QString::fromStdString(cmp->result()->runs[i].spec.label)));
            QVERIFY(shown.contains(div < 0 ? QString("[= baseline]") : QString("[diverges at token %1]").arg(div)));
        }
        cmp->setBaseline(0);  // re-based without running again
        QCOMPARE(cmp->result()->baseline, 0);
        QCOMPARE(cmp->result()->divergence[1], firstDivergence(cmp->result()->runs[1].tokens, cmp->result()->runs[0].tokens));
        exportAll(cmp, "compare");

        auto* scr = qobject_cast<ScrubberView*>(trigger("scrubber"));
        QVERIFY(scr);
        scr->setPrompt("In the beginning");
        scr->setMaxTokens(8);
        scr->setDepth(4);
        QVERIFY(runAndWait(scr));  // prefill, then the answer at depth 4
        QVERIFY(tltest::waitFor([&] { return scr->history().size() == 1 && !scr->isBusy(); }));
        scr->setDepth(9);
        QVERIFY(tltest::waitFor([&] { return scr->history().size() == 2 && !scr->isBusy(); }));
        tinyloop::GenerateConfig c;
        c.max_tokens = 8;
        c.loops = 9;
        QCOMPARE(scr->history().back().answer.tokens, continuationOf(plain(m_model, ids, c)));
        QCOMPARE(scr->history().back().previousDepth, 4);
        QCOMPARE(scr->history().back().answer.handleLoopsAfter, 9);
        exportAll(scr, "scrubber");

        auto* agr = qobject_cast<AgreementView*>(trigger("agreement"));
        QVERIFY(agr);
        agr->setPrompt("In the beginning");
        agr->setMaxTokens(12);
        agr->setFinalDepth(4);
        agr->setDraftAhead(3);
        QVERIFY(runAndWait(agr));
        QVERIFY2(agr->lastError().isEmpty(), qPrintable(agr->lastError()));
        QCOMPARE(agr->result()->rows.size(), size_t(3));
        for (const AgreementRow& r : agr->result()->rows) {
            QCOMPARE(r.replay.accepted, r.measured.spec_accepted);
            QVERIFY(r.sameText);
        }
        exportAll(agr, "agreement");

        auto* swp = qobject_cast<SweepView*>(trigger("sweep"));
        QVERIFY(swp);
        swp->setPrompts({"In the beginning"});
        swp->setMaxTokens(8);
        swp->setVerifyLoops(4);
        swp->setGrid("1,2", "2,3", "0");
        QVERIFY(runAndWait(swp));
        QVERIFY2(swp->lastError().isEmpty(), qPrintable(swp->lastError()));
        QCOMPARE(swp->result()->cells.size(), size_t(4));
        const QString name = swp->saveBestPreset();
        QVERIFY(!name.isEmpty());
        QVERIFY(w.presetsPanel()->names().contains(name));
        exportAll(swp, "sweep");
        // Cancel lands mid-sweep: the view keeps the cells it finished and says so.
        swp->setPrompts({"In the beginning", "And God said"});
        swp->setMaxTokens(24);
        swp->setVerifyLoops(8);
        swp->setGrid("1,2,3,4,5,6,7", "2,4,6,8", "0,2");
        {
            QSignalSpy prog(swp->worker(), &AnalysisWorker::progress);
            QSignalSpy done(swp, &ViewA::workFinished);
            swp->run();
            QVERIFY(tltest::waitFor([&] { return prog.count() >= 4; }, 120000));
            swp->worker()->cancel();
            QVERIFY(tltest::waitFor([&] { return done.count() == 1 && !swp->isBusy(); }, 120000));
            QCOMPARE(done.at(0).at(0).toBool(), false);
            QCOMPARE(swp->lastError(), QString("cancelled"));
            QVERIFY(swp->result()->cancelled);
            int runs = 0;
            for (const SweepCell& c : swp->result()->cells) runs += c.runs;
            QVERIFY(runs < swp->result()->cellsPlanned * 2);
        }

        auto* stp = qobject_cast<StepView*>(trigger("step"));
        QVERIFY(stp);
        stp->setPrompt("In the beginning");
        stp->setConfig(4, 0.0, 1, 6);
        QVERIFY(runAndWait(stp));
        QVERIFY(tltest::waitFor([&] { return stp->snapshot().proposal.has_value() && !stp->isBusy(); }));
        stp->takeProposals(3);
        QVERIFY(tltest::waitFor([&] { return stp->snapshot().steps.size() == 3 && !stp->isBusy(); }));
        const int32_t pick = stp->snapshot().proposal->lens.back().top_ids.back();  // the 8th candidate
        stp->take(pick);
        QVERIFY(tltest::waitFor([&] { return stp->snapshot().steps.size() == 4 && !stp->isBusy(); }));
        QCOMPARE(stp->snapshot().steps.back().chosen, pick);
        c.loops = 4;
        c.max_tokens = 3;
        const auto first3 = continuationOf(plain(m_model, ids, c));
        for (int i = 0; i < 3; ++i) QCOMPARE(stp->snapshot().steps[static_cast<size_t>(i)].chosen, first3[static_cast<size_t>(i)]);
        exportAll(stp, "step");
    }
};

QTEST_MAIN(TestViewsA)
#include "test_views_a.moc"
