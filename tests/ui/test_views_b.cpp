// The Views menu's part B on real runs of the bundled model: early-exit calibration, compute
// against quality, KV provenance, quantization across depth. Each view's data is checked against
// the engine run directly (not pixels), and each view opens from the menu, fills from a real run
// and exports PNG, PDF and JSON.
#include <algorithm>
#include <cmath>
#include <fstream>

#include <QAction>
#include <QDir>
#include <QFileInfo>
#include <QMenu>
#include <QMenuBar>
#include <QSignalSpy>
#include <QTest>
#include <nlohmann/json.hpp>

#include <tinyloop_analysis/exit_calibration.h>
#include <tinyloop_analysis/compute_quality.h>
#include <tinyloop_analysis/kv_provenance.h>
#include <tinyloop_analysis/quant_across_depth.h>
#include "main/main_window.h"
#include "main/model_paths.h"
#include "ui_test_util.h"
#include "views/exit_calibration_view.h"
#include "views/compute_quality_view.h"
#include "views/kv_provenance_view.h"
#include "views/quant_across_depth_view.h"
#include "views/views_b.h"

using namespace tlui;
using C = tinyloop::EarlyExitCriterion;

namespace {

// The bundled model as the workbench finds it at start, and the q4 file beside it.
QString f32Path() { return tlui::resolveStartupModel(QString()).path; }
QString q4Path() { return QFileInfo(f32Path()).dir().filePath("model-q4.tinyloop"); }
const char* kPrompt = "And God said, Let there be light: and there was";

struct ModelHolder {
    tinyloop::Model* m;
    explicit ModelHolder(const QString& p) : m(tinyloop::load_model(p.toStdString())) {}
    ~ModelHolder() { tinyloop::free_model(m); }
};

}  // namespace

class TestViewsB : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    std::unique_ptr<ModelHolder> m_f32;

private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QCoreApplication::setOrganizationName("TinyLoopTest");
        QCoreApplication::setApplicationName("test_views_b");
        QVERIFY(m_dir.isValid());
        const tlui::StartupModel sm = tlui::resolveStartupModel(QString());
        QVERIFY2(!sm.path.isEmpty() && !sm.randomFallback,
                 qPrintable("the bundled model is missing; looked at " + sm.tried.join(", ")));
        QVERIFY2(QFileInfo::exists(q4Path()), qPrintable(q4Path() + " is missing"));
        m_f32 = std::make_unique<ModelHolder>(f32Path());
    }

    // Flagged tokens are exactly those whose output changes when the engine decodes that token
    // with early exit at the threshold (in the full-depth run's context), and the exit depth
    // read off the cached traces is the depth the decode used.
    void calibrationFlagsEqualEarlyExitDecode() {
        tinyloop::Model* m = m_f32->m;
        const auto prompt = tinyloop::tokenize(m, kPrompt);
        const CalibData d = collect_calibration(m, prompt, 20, 8);
        QCOMPARE(d.loops, 8);
        QVERIFY(d.emitted() >= 5);
        // The full-depth lens pick is the full-depth run's token.
        for (int i = 1; i < d.emitted(); ++i)
            QCOMPARE(d.argmax_at(d.prompt_len + i - 1, 8), d.tokens[static_cast<size_t>(d.prompt_len + i)]);
        struct Case {
            C c;
            float t;
        };
        const Case cases[] = {{C::HiddenL2, 0.15f}, {C::HiddenL2, 0.4f}, {C::KL, 0.05f},    {C::KL, 1.0f},
                              {C::LogitMargin, 1.0f}, {C::EntropyDelta, 0.3f}, {C::ArgmaxStable, 0.5f}};
        int flagged = 0, kept = 0;
        for (const Case& k : cases) {
            CalibPolicy p;
            p.criterion = k.c;
            p.threshold = k.t;
            const std::vector<CalibToken> scored = rescore_calibration(d, p);
            QCOMPARE(static_cast<int>(scored.size()), d.emitted() - 1);
            for (const CalibToken& t : scored) {
                tinyloop::GenerateConfig c;
                c.loops = 8;
                c.max_tokens = 2;
                c.ignore_eos = true;
                c.early_exit_patience = p.patience;
                c.early_exit_min_L = p.min_L;
                c.early_exit_peek_every = p.peek_every;
                c.early_exit_criterion = k.c;
                c.early_exit_threshold = k.t;
                // prompt = everything before the row's token; the prefill gives that token, the
                // adaptive step on it gives the token under test
                const tinyloop::GenerateResult g = tinyloop::generate_ex(m, d.tokens.data(), t.row, c);
                QCOMPARE(g.tokens[static_cast<size_t>(t.row)], d.tokens[static_cast<size_t>(t.row)]);
                const int32_t decoded = g.tokens[static_cast<size_t>(t.row) + 1];
                QCOMPARE(g.stats.depth_per_token[1], t.exit_depth);
                QCOMPARE(decoded, t.exit_token);
                QCOMPARE(t.flagged, decoded != d.tokens[static_cast<size_t>(t.row) + 1]);
                flagged += t.flagged;
                kept += !t.flagged && t.exit_depth < 8;
            }
        }
        QVERIFY2(flagged > 0, "some threshold should change some token");
        QVERIFY2(kept > 0, "some token should exit early and keep its output");
        // Bad policy fields are refused with the field's name.
        CalibPolicy bad;
        bad.min_L = 99;
        try {
            rescore_calibration(d, bad);
            QFAIL("min_L out of range accepted");
        } catch (const tinyloop::Error& e) {
            QVERIFY(QString(e.what()).contains("min_L"));
        }
    }

    // Every point is the scoring API's figure (and the speculative run's counts) run directly.
    void computePointsEqualScoringApi() {
        tinyloop::Model* m = m_f32->m;
        const auto text = tinyloop::tokenize(m, "In the beginning God created the heaven and the earth. And the earth "
                                                "was without form, and void.");
        const int n = static_cast<int>(text.size());
        ComputeSettings s;
        s.depths = {1, 2, 4, 6};
        s.exit_loops = 6;
        s.exits = {{C::HiddenL2, 0.2f}, {C::KL, 0.1f}, {C::LogitMargin, 2.0f}};
        s.verify_loops = 4;
        s.specs = {{1, 4}, {2, 3}};
        s.prompt_tokens = 6;
        s.decode_tokens = 12;
        int calls = 0;
        const auto pts = compute_vs_quality(m, text, s, [&](int, int, const std::string&) { ++calls; });
        QCOMPARE(static_cast<int>(pts.size()), 4 + 3 + 2);
        QVERIFY(calls >= 9);
        for (int i = 0; i < 4; ++i) {
            const auto r = tinyloop::score(m, text.data(), n, s.depths[static_cast<size_t>(i)]);
            QCOMPARE(pts[static_cast<size_t>(i)].nll, r.total_nll / (n - 1));
            QCOMPARE(pts[static_cast<size_t>(i)].mean_depth, double(s.depths[static_cast<size_t>(i)]));
            QVERIFY(pts[static_cast<size_t>(i)].ms_per_token > 0);
        }
        for (int i = 0; i < 3; ++i) {
            tinyloop::GenerateConfig c;
            c.loops = 6;
            c.early_exit_patience = 1;
            c.early_exit_min_L = 2;
            c.early_exit_criterion = s.exits[static_cast<size_t>(i)].criterion;
            c.early_exit_threshold = s.exits[static_cast<size_t>(i)].threshold;
            std::vector<int> depth;
            const auto r = tinyloop::score_early_exit(m, text.data(), n, c, &depth);
            double sum = 0;
            for (int p = 0; p + 1 < n; ++p) sum += depth[static_cast<size_t>(p)];
            const ComputePoint& pt = pts[static_cast<size_t>(4 + i)];
            QCOMPARE(pt.nll, r.total_nll / (n - 1));
            QCOMPARE(pt.mean_depth, sum / (n - 1));
            QVERIFY(pt.mean_depth <= 6.0);
        }
        const auto rv = tinyloop::score(m, text.data(), n, 4);
        for (int i = 0; i < 2; ++i) {
            tinyloop::SpeculativeConfig sc;
            sc.max_tokens = 12;
            sc.draft_loops = s.specs[static_cast<size_t>(i)].draft_loops;
            sc.draft_ahead = s.specs[static_cast<size_t>(i)].draft_ahead;
            sc.verify_loops = 4;
            sc.ignore_eos = true;
            const auto g = tinyloop::generate_speculative_ex(m, text.data(), 6, sc);
            const ComputePoint& pt = pts[static_cast<size_t>(7 + i)];
            QCOMPARE(pt.series, std::string("speculative"));
            QCOMPARE(pt.nll, rv.total_nll / (n - 1));
            QCOMPARE(pt.mean_depth, 4.0 * g.stats.spec_drafted / (g.stats.tokens_emitted - 1));
            QCOMPARE(pt.acceptance, g.stats.spec_acceptance_rate());
        }
        const nlohmann::json j = compute_json(pts, n);
        QCOMPARE(j["points"].size(), pts.size());
        try {
            compute_vs_quality(m, std::vector<int32_t>{5}, s);
            QFAIL("a one-token text accepted");
        } catch (const tinyloop::Error& e) {
            QVERIFY(QString(e.what()).contains("text"));
        }
    }

    // The provenance map against its definition, for the three set-ups.
    void kvProvenanceMatchesDefinition() {
        tinyloop::Model* m = m_f32->m;
        const auto prompt = tinyloop::tokenize(m, kPrompt);
        const tinyloop::HParams& hp = tinyloop::model_hparams(m);
        tinyloop::GenerateConfig c;
        c.max_tokens = 16;
        c.loops = 8;
        c.ignore_eos = true;
        c.early_exit_patience = 1;
        c.early_exit_threshold = 0.2f;
        const int L = 8, layers = hp.n_pre_blocks + L * hp.n_loop_layers;
        using O = tinyloop::KVOrigin;

        const KvRun plain = run_kv_provenance(m, prompt, c, KvSetup::Plain);
        QCOMPARE(plain.prov.n_layers, layers);
        QCOMPARE(plain.count(O::Computed), layers * (plain.prov.n_positions - 1));
        QCOMPARE(plain.count(O::Propagated) + plain.count(O::Reused), 0);
        QCOMPARE(plain.live_bytes.back(), plain.prov.kv_bytes_written);

        const KvRun ee = run_kv_provenance(m, prompt, c, KvSetup::EarlyExit);
        int propagated = 0;
        for (int i = 1; i < static_cast<int>(ee.depth_per_token.size()); ++i) {
            const int pos = ee.prompt_len + i - 1;
            const int ran = hp.n_pre_blocks + ee.depth_per_token[static_cast<size_t>(i)] * hp.n_loop_layers;
            for (int e = 0; e < layers; ++e) {
                QCOMPARE(ee.prov.at(e, pos), e < ran ? O::Computed : O::Propagated);
                propagated += e >= ran;
            }
        }
        QVERIFY(propagated > 0);
        QCOMPARE(ee.count(O::Propagated), propagated);

        const KvRun pc = run_kv_provenance(m, prompt, c, KvSetup::PrefixCache, 5);
        QCOMPARE(pc.count(O::Reused), 5 * layers);
        for (int e = 0; e < layers; ++e)
            for (int pos = 0; pos + 1 < pc.prov.n_positions; ++pos)
                QCOMPARE(pc.prov.at(e, pos), pos < 5 ? O::Reused : O::Computed);
        QVERIFY(pc.prefix_cache_bytes > 0);
        QCOMPARE(pc.tokens, plain.tokens);  // reuse changes nothing in the output
        const nlohmann::json j = kv_json(pc);
        QCOMPARE(j["counts"]["reused"].get<int>(), 5 * layers);
        QCOMPARE(j["origin"][0][0].get<std::string>(), std::string("reused"));
        try {
            run_kv_provenance(m, prompt, c, KvSetup::PrefixCache, 0);
            QFAIL("prefix_len 0 accepted");
        } catch (const tinyloop::Error& e) {
            QVERIFY(QString(e.what()).contains("prefix_len"));
        }
    }

    // The divergence at each depth at one position, recomputed by hand from the two models'
    // forward_lens_logits.
    void quantDivergenceEqualsDirectLens() {
        ModelHolder q4(q4Path());
        tinyloop::Model* a = m_f32->m;
        tinyloop::Model* b = q4.m;
        const auto tokens = tinyloop::tokenize(a, kPrompt);
        const int n = static_cast<int>(tokens.size());
        const QuantData q = compare_quantized(a, b, tokens, 6);
        QCOMPARE(q.loops, 6);
        QCOMPARE(q.n, n);
        const int V = tinyloop::model_hparams(a).vocab_size;
        const auto za = tinyloop::forward_lens_logits(a, tokens.data(), n, 6);
        const auto zb = tinyloop::forward_lens_logits(b, tokens.data(), n, 6);
        const int pos = 4;  // the hand-checked position
        bool differs = false;
        for (int l = 1; l <= 6; ++l) {
            const float* ra = za.data() + (static_cast<size_t>(l - 1) * n + pos) * V;
            const float* rb = zb.data() + (static_cast<size_t>(l - 1) * n + pos) * V;
            // KL(A||B) = sum_i pA_i ((a_i - lseA) - (b_i - lseB)), log-sum-exp in long double
            long double ma = ra[0], mb = rb[0];
            for (int i = 1; i < V; ++i) {
                ma = std::max<long double>(ma, ra[i]);
                mb = std::max<long double>(mb, rb[i]);
            }
            long double sa = 0, sb = 0;
            for (int i = 0; i < V; ++i) {
                sa += std::exp(static_cast<long double>(ra[i]) - ma);
                sb += std::exp(static_cast<long double>(rb[i]) - mb);
            }
            const long double lsa = ma + std::log(sa), lsb = mb + std::log(sb);
            long double kl = 0;
            float mx = 0;
            for (int i = 0; i < V; ++i) {
                const long double la = ra[i] - lsa, lb = rb[i] - lsb;
                kl += std::exp(la) * (la - lb);
                mx = std::max(mx, std::fabs(ra[i] - rb[i]));
            }
            const float got = q.kl[q.at(l, pos)];
            QVERIFY2(std::fabs(got - static_cast<double>(kl)) <= 1e-6 + 1e-5 * static_cast<double>(kl),
                     qPrintable(QString("depth %1: %2 vs %3").arg(l).arg(got).arg(double(kl))));
            QCOMPARE(q.max_abs_diff[q.at(l, pos)], mx);
            QCOMPARE(q.top1_a[q.at(l, pos)], static_cast<int32_t>(std::max_element(ra, ra + V) - ra));
            QCOMPARE(q.top1_b[q.at(l, pos)], static_cast<int32_t>(std::max_element(rb, rb + V) - rb));
            differs = differs || mx > 0;
        }
        QVERIFY2(differs, "q4 and f32 logits should differ somewhere");
        // Same file twice: no divergence at all.
        const QuantData same = compare_quantized(a, a, tokens, 3);
        for (float x : same.kl) QCOMPARE(x, 0.0f);
        // Not the same model: refused, naming the field.
        const QString tiny = tltest::writeTinyModel(m_dir.path());
        ModelHolder t(tiny);
        try {
            compare_quantized(a, t.m, tokens, 2);
            QFAIL("a different model accepted");
        } catch (const tinyloop::Error& e) {
            QVERIFY(QString(e.what()).contains("vocab_size"));
        }
    }

    // Each view opens from the Views menu, fills from a real run on the bundled model and exports
    // PNG, PDF and JSON; the shown data equal the analysis functions' output.
    void viewsFromMenuFillAndExport() {
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets");
        o.errorDialogs = false;
        MainWindow w(o);
        w.show();
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(f32Path());
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        QVERIFY(ready.at(0).at(0).toBool());
        w.setPrompt(kPrompt);
        QMenu* views = nullptr;
        for (QAction* a : w.menuBar()->actions())
            if (a->menu() && a->text().remove('&') == "Views") views = a->menu();
        QVERIFY(views);
        auto trigger = [&](const QString& kind) -> ViewB* {
            QAction* act = views->findChild<QAction*>("viewAction_" + kind);
            if (!act)
                for (QAction* a : views->actions())
                    if (a->objectName() == "viewAction_" + kind) act = a;
            if (!act) return nullptr;
            act->trigger();
            return w.findChild<ViewB*>("viewB_" + kind);
        };
        auto runAndWait = [&](ViewB* v) {
            QSignalSpy done(v, &ViewB::workFinished);
            v->run();
            if (!tltest::waitFor([&] { return done.count() == 1; }, 240000)) return false;
            return done.at(0).at(0).toBool();
        };
        auto exports = [&](ViewB* v, const QString& stem) {
            const QString png = m_dir.filePath(stem + ".png"), pdf = m_dir.filePath(stem + ".pdf"),
                          js = m_dir.filePath(stem + ".json");
            QString err;
            QVERIFY2(v->exportImage(png, &err), qPrintable(err));
            QVERIFY2(v->exportImage(pdf, &err), qPrintable(err));
            QVERIFY2(v->exportJson(js, &err), qPrintable(err));
            QVERIFY(QFileInfo(png).size() > 1000);
            QVERIFY(QFileInfo(pdf).size() > 500);
            std::ifstream f(js.toStdString());
            const nlohmann::json j = nlohmann::json::parse(f);
            QVERIFY(j == v->data());
            QVERIFY(!j.contains("empty"));
        };
        tinyloop::Model* m = m_f32->m;
        const auto prompt = tinyloop::tokenize(m, kPrompt);

        auto* calib = qobject_cast<CalibView*>(trigger("calibration"));
        QVERIFY(calib);
        calib->setMaxTokens(12);
        calib->setLoops(8);
        QVERIFY2(runAndWait(calib), qPrintable(calib->lastError()));
        calib->setCriterion(C::KL);
        calib->setThreshold(0.3);
        {
            const CalibData d = collect_calibration(m, prompt, 12, 8);
            QCOMPARE(calib->calibData()->tokens, d.tokens);
            CalibPolicy p;
            p.criterion = C::KL;
            p.threshold = 0.3f;
            const auto want = rescore_calibration(d, p);
            QCOMPARE(calib->scored().size(), want.size());
            for (size_t i = 0; i < want.size(); ++i) {
                QCOMPARE(calib->scored()[i].flagged, want[i].flagged);
                QCOMPARE(calib->scored()[i].exit_depth, want[i].exit_depth);
            }
            QCOMPARE(calib->data()["flagged"].get<int>(),
                     static_cast<int>(std::count_if(want.begin(), want.end(), [](auto& t) { return t.flagged; })));
        }
        exports(calib, "calibration");

        auto* comp = qobject_cast<ComputeView*>(trigger("compute"));
        QVERIFY(comp);
        ComputeSettings s;
        s.depths = {1, 4};
        s.exits = {{C::HiddenL2, 0.2f}};
        s.specs = {{2, 4}};
        s.decode_tokens = 8;
        comp->setSettings(s);
        comp->setText(kPrompt);
        QVERIFY2(runAndWait(comp), qPrintable(comp->lastError()));
        QCOMPARE(static_cast<int>(comp->points().size()), 4);
        QCOMPARE(comp->points()[1].nll, tinyloop::score(m, prompt.data(), static_cast<int>(prompt.size()), 4).total_nll /
                                            (static_cast<int>(prompt.size()) - 1));
        comp->setTimeAxis(true);
        exports(comp, "compute");

        auto* kv = qobject_cast<KvView*>(trigger("kv"));
        QVERIFY(kv);
        kv->setSetup(KvSetup::EarlyExit);
        kv->setMaxTokens(12);
        kv->setLoops(8);
        kv->setThreshold(0.2);
        QVERIFY2(runAndWait(kv), qPrintable(kv->lastError()));
        {
            tinyloop::GenerateConfig c;
            c.max_tokens = 12;
            c.loops = 8;
            c.early_exit_patience = 1;
            c.early_exit_threshold = 0.2f;
            const KvRun want = run_kv_provenance(m, prompt, c, KvSetup::EarlyExit);
            QCOMPARE(kv->kvRun().prov.origin, want.prov.origin);
            QCOMPARE(kv->kvRun().live_bytes, want.live_bytes);
        }
        exports(kv, "kv");

        auto* quant = qobject_cast<QuantView*>(trigger("quant"));
        QVERIFY(quant);
        QCOMPARE(QFileInfo(quant->secondPath()).fileName(), QString("model-q4.tinyloop"));
        quant->setMaxTokens(0);
        quant->setLoops(4);
        QVERIFY2(runAndWait(quant), qPrintable(quant->lastError()));
        {
            ModelHolder q4(q4Path());
            const QuantData want = compare_quantized(m, q4.m, prompt, 4);
            QCOMPARE(quant->quantData().kl, want.kl);
            QCOMPARE(quant->quantData().max_abs_diff, want.max_abs_diff);
        }
        exports(quant, "quant");

        // A second file that is not the same model: the view says why, nothing crashes.
        quant->setSecondPath(tltest::writeTinyModel(m_dir.path(), 3, "other.tinyloop"));
        QVERIFY(!runAndWait(quant));
        QVERIFY(quant->lastError().contains("vocab_size"));
        QVERIFY(!trigger("nonsense"));
    }
};

QTEST_MAIN(TestViewsB)
#include "test_views_b.moc"
