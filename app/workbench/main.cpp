// tinyloop-workbench: the Qt desktop workbench. Thin: parse the command line, open the window
// on the bundled model (or the one named), optionally run once and save a screenshot.
//
//   tinyloop-workbench [MODEL] [--prompt TEXT] [--autorun] [--screenshot OUT.png] [--tab NAME]
//                      [--zoom F] [--presentation] [--theme light|dark] [--size WxH]
//   tinyloop-workbench --demo-run "In the beginning" --screenshot docs/screenshots/main.png
//   tinyloop-workbench --demo-run "In the beginning" --save-session demo.json   (prepare a demo)
//   tinyloop-workbench --session demo.json          (a saved session, shown without running)
//   tinyloop-workbench --tour            (Help -> Tour at step 1; --tour-step N at step N)
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>
#include <QPixmap>
#include <QTabWidget>
#include <QTimer>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <optional>

#include "main/config_panel.h"
#include "plots/depth_plot.h"
#include "plots/layout_audit.h"
#include "plots/lens_heatmap.h"
#include "main/main_window.h"
#include "main/model_paths.h"
#include "main/presets_panel.h"
#include "main/tour.h"
#include "base/screen_fit.h"
#include "base/theme.h"
#include "base/zoom.h"
#include "views/analysis_views.h"
#include "views/analysis_window.h"

namespace {

// Qt picks its platform plugin when QApplication is built; without a display the default (xcb)
// aborts the program. --help, --version and --screenshot runs need no screen, so without a
// display they get the offscreen platform; any other run without one is refused with a message.
// Returns false when the run cannot go on (the message is printed).
bool choose_platform(int argc, char** argv) {
    const char* chosen = std::getenv("QT_QPA_PLATFORM");
    if (chosen && *chosen) return true;
    for (const char* var : {"DISPLAY", "WAYLAND_DISPLAY"})
        if (const char* v = std::getenv(var); v && *v) return true;
    for (int i = 1; i < argc; ++i) {
        const char* a = argv[i];
        if (!std::strcmp(a, "--help") || !std::strcmp(a, "-h") || !std::strcmp(a, "-?") ||
            !std::strcmp(a, "--help-all") || !std::strcmp(a, "--version") || !std::strcmp(a, "-v") ||
            !std::strcmp(a, "--screenshot") || !std::strncmp(a, "--screenshot=", 13)) {
            setenv("QT_QPA_PLATFORM", "offscreen", 1);
            return true;
        }
    }
    std::fprintf(stderr,
                 "tinyloop-workbench: no display (DISPLAY and WAYLAND_DISPLAY are unset). Run it on a\n"
                 "desktop, or use the command line (tinyloop generate MODEL --prompt TEXT); --help,\n"
                 "--version and --screenshot OUT.png work without a display (QT_QPA_PLATFORM=offscreen).\n");
    return false;
}

// QGuiApplication takes "-session ID" / "--session ID" for itself (X11 session management) and
// removes it from argv, so the workbench's --session FILE is taken out before Qt sees it.
std::string take_session_arg(int& argc, char** argv) {
    std::string file;
    int out = 1;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--session") && i + 1 < argc) {
            file = argv[++i];
        } else if (!std::strncmp(argv[i], "--session=", 10)) {
            file = argv[i] + 10;
        } else {
            argv[out++] = argv[i];
        }
    }
    argc = out;
    argv[argc] = nullptr;
    return file;
}

// "--size WxH": two whole numbers from 200 to 10000; nullopt and a message naming the option.
std::optional<QSize> parseWindowSize(const QString& text, QString* error) {
    const QStringList wh = text.trimmed().toLower().split('x');
    bool okW = false, okH = false;
    const int width = wh.size() == 2 ? wh[0].toInt(&okW) : 0, height = wh.size() == 2 ? wh[1].toInt(&okH) : 0;
    if (okW && okH && width >= 200 && width <= 10000 && height >= 200 && height <= 10000) return QSize(width, height);
    *error = QString("--size: '%1' is not a window size; allowed: WIDTHxHEIGHT, each a whole number from 200 to "
                     "10000 (e.g. 1280x720)").arg(text);
    return std::nullopt;
}

// A screenshot's window as a person sees it: each layout defect (a cut caption or label, a legend
// over the data, ...) printed; false when there is any.
bool layoutClean(const QWidget* window) {
    const QStringList defects = tlui::layoutDefects(window);
    for (const QString& d : defects) std::fprintf(stderr, "tinyloop-workbench: layout: %s\n", qPrintable(d));
    return defects.isEmpty();
}

}  // namespace

int main(int argc, char** argv) {
    if (!choose_platform(argc, argv)) return 2;
    const QString sessionFile = QString::fromLocal8Bit(take_session_arg(argc, argv));
    QApplication app(argc, argv);
    QApplication::setOrganizationName("TinyLoop");
    QApplication::setApplicationName("tinyloop-workbench");
    QApplication::setApplicationDisplayName("TinyLoop Workbench");
    QApplication::setApplicationVersion(TINYLOOP_VERSION);
    QApplication::setDesktopFileName("tinyloop-workbench");

    QCommandLineParser cli;
    cli.setApplicationDescription("Desktop workbench for weight-shared looped transformers (.tinyloop models).");
    cli.addHelpOption();
    cli.addVersionOption();
    cli.addPositionalArgument("model", "A .tinyloop model to open (default: the bundled model).", "[MODEL]");
    QCommandLineOption promptOpt("prompt", "Prompt text to put in the editor.", "TEXT");
    QCommandLineOption autorunOpt("autorun", "Generate once the model is loaded.");
    QCommandLineOption demoOpt("demo-run", "Same as --prompt TEXT --autorun.", "TEXT");
    QCommandLineOption shotOpt("screenshot", "After the run (or the load, without --autorun), save the window as PNG and quit.", "OUT.png");
    QCommandLineOption tabOpt("tab", "Plot tab to show: lens, depth, speculative, timing.", "NAME", "lens");
    QCommandLineOption metricOpt("lens-metric", "Heatmap metric: final, emitted, entropy, kl.", "NAME", "emitted");
    QCommandLineOption gateTokenOpt("gate-token", "Depth plot of a model with an exit gate: show the gate of emitted "
                                                  "token N (0-based; default the latest, or the hovered one).", "N");
    QCommandLineOption presetOpt("preset", "Apply a named preset at start.", "NAME");
    QCommandLineOption maxTokOpt("max-tokens", "Override max_tokens of the config.", "N");
    QCommandLineOption sizeOpt("size", "Window size WxH (screenshots), at most the screen's available area.", "WxH", "1400x900");
    QCommandLineOption zoomOpt("zoom", QString("Zoom factor for fonts and plots, %1 to %2 (this run only; View > Zoom "
                                               "is remembered).").arg(tlui::Zoom::kMin).arg(tlui::Zoom::kMax), "F");
    QCommandLineOption presentOpt("presentation", "Start in presentation mode (View > Presentation mode, F5).");
    QCommandLineOption themeOpt("theme", "Theme for this run: light or dark (View > Theme is remembered).", "NAME");
    cli.addOptions({promptOpt, autorunOpt, demoOpt, shotOpt, tabOpt, metricOpt, gateTokenOpt, presetOpt, maxTokOpt, sizeOpt,
                    zoomOpt, presentOpt, themeOpt});
    QCommandLineOption viewOpt("view", "Open an Analysis-menu window (compare, scrubber, agreement, sweep, step, calibration, compute, kv, quant), fill it by a run on --prompt and, with --screenshot, save that window and quit.", "NAME");
    cli.addOption(viewOpt);
    QCommandLineOption sessionOpt("session", "Open a saved session (File -> Save session): prompt, config, output and lens, shown without running. Its model opens unless MODEL is given.", "FILE");
    cli.addOption(sessionOpt);
    QCommandLineOption saveSessionOpt("save-session", "After the run (with --autorun or --demo-run), save the session as FILE (what --session opens).", "FILE");
    cli.addOption(saveSessionOpt);
    QCommandLineOption tourOpt("tour", "Start the guided tour (Help -> Tour) once the model is loaded.");
    QCommandLineOption tourStepOpt("tour-step", "Start the guided tour at step N (1 = the first); with --screenshot, save the window that step points at once it has run, and quit.", "N");
    cli.addOptions({tourOpt, tourStepOpt});
    cli.process(app);

    int tourStep = 0;  // 1-based; 0 = no tour
    if (cli.isSet(tourStepOpt)) {
        bool ok = false;
        tourStep = cli.value(tourStepOpt).toInt(&ok);
        const int steps = static_cast<int>(tlui::tourSteps().size());
        if (!ok || tourStep < 1 || tourStep > steps) {
            std::fprintf(stderr, "tinyloop-workbench: --tour-step: %s is outside [1, %d]\n", qPrintable(cli.value(tourStepOpt)), steps);
            return 2;
        }
    } else if (cli.isSet(tourOpt)) {
        tourStep = 1;
    }
    const auto fail = [](const QString& message) {
        std::fprintf(stderr, "tinyloop-workbench: %s\n", qPrintable(message));
        return 2;
    };
    QString error;
    const auto zoom = cli.isSet(zoomOpt) ? tlui::Zoom::parse(cli.value(zoomOpt), &error) : std::optional<double>();
    if (cli.isSet(zoomOpt) && !zoom) return fail(error);
    const auto theme = cli.isSet(themeOpt) ? tlui::parseTheme(cli.value(themeOpt), &error) : std::optional<tlui::Theme>();
    if (cli.isSet(themeOpt) && !theme) return fail(error);
    const auto windowSize = parseWindowSize(cli.value(sizeOpt), &error);
    if (!windowSize) return fail(error);

    tlui::MainWindow w;  // applies the remembered zoom and theme; the command line's go over them
    if (theme) tlui::applyTheme(*theme, false);
    if (zoom) tlui::Zoom::instance().setFactor(*zoom, false);
    if (cli.isSet(presentOpt)) tlui::Zoom::instance().setPresentation(true);
    tlui::fitToScreen(&w, *windowSize);

    QString prompt = cli.value(promptOpt);
    bool autorun = cli.isSet(autorunOpt);
    if (cli.isSet(demoOpt)) {
        prompt = cli.value(demoOpt);
        autorun = true;
    }
    if (!prompt.isEmpty()) w.setPrompt(prompt);
    if (cli.isSet(presetOpt)) w.applyPreset(cli.value(presetOpt));  // again once the model is in
    const QString tab = cli.value(tabOpt).toLower();
    const QStringList tabs = {"lens", "depth", "speculative", "timing"};
    if (tabs.contains(tab)) w.plotTabs()->setCurrentIndex(tabs.indexOf(tab));
    const QStringList metrics = {"final", "emitted", "entropy", "kl"};
    const QString metric = cli.value(metricOpt).toLower();
    if (metrics.contains(metric)) w.heatmap()->setMetric(static_cast<tlui::LensMetric>(metrics.indexOf(metric)));

    const QString shot = cli.value(shotOpt);
    int exitCode = 0;
    auto grabAndQuit = [&w, &shot, &exitCode, &cli, &gateTokenOpt] {
        if (cli.isSet(gateTokenOpt)) w.depthPlot()->selectToken(cli.value(gateTokenOpt).toInt());
        // let the 30 Hz frame timer draw the last tokens and plots first
        QTimer::singleShot(400, &w, [&w, &shot, &exitCode] {
            QDir().mkpath(QFileInfo(shot).absolutePath());
            if (!w.grab().save(shot, "PNG", 0)) {  // quality 0: PNG's strongest compression
                std::fprintf(stderr, "tinyloop-workbench: could not write %s\n", qPrintable(shot));
                exitCode = 1;
            } else {
                std::printf("screenshot: %s\n", qPrintable(shot));
                if (!layoutClean(&w)) exitCode = 1;
            }
            w.close();
        });
    };

    QObject::connect(&w, &tlui::MainWindow::modelReady, &w, [&](bool ok) {
        static bool first = true;
        if (!first) return;
        first = false;
        if (!ok && (autorun || !shot.isEmpty())) {
            std::fprintf(stderr, "tinyloop-workbench: %s\n", qPrintable(w.lastError()));
            exitCode = 1;
            w.close();
            return;
        }
        if (cli.isSet(maxTokOpt)) {
            if (auto c = w.configPanel()->config()) {
                c->max_tokens = cli.value(maxTokOpt).toInt();
                w.configPanel()->setConfig(*c);
            }
        }
        if (tourStep > 0) {
            tlui::Tour* tour = w.startTour(tourStep - 1);
            if (!shot.isEmpty())
                QObject::connect(tour, &tlui::Tour::stepFinished, &w, [&, tour](int, bool stepOk) {
                    if (!stepOk) std::fprintf(stderr, "tinyloop-workbench: tour step %d: %s\n", tourStep, qPrintable(tour->stepError()));
                    QTimer::singleShot(400, &w, [&, tour, stepOk] {
                        QWidget* target = tour->stepWindow();
                        QDir().mkpath(QFileInfo(shot).absolutePath());
                        const bool saved = target->grab().save(shot);
                        if (saved)
                            std::printf("tour step %d of %d (%s) %s; screenshot: %s\n", tourStep, tour->count(),
                                        qPrintable(tlui::tourSteps()[static_cast<size_t>(tourStep - 1)].title),
                                        stepOk ? "ran" : "failed", qPrintable(shot));
                        else std::fprintf(stderr, "tinyloop-workbench: could not write %s\n", qPrintable(shot));
                        exitCode = saved && stepOk && layoutClean(target) ? 0 : 1;
                        QApplication::quit();
                    });
                });
            return;
        }
        if (cli.isSet(viewOpt)) {
            w.analysisViews()->demo(cli.value(viewOpt).toLower(), prompt.isEmpty() ? QString("In the beginning") : prompt,
                                    cli.isSet(maxTokOpt) ? cli.value(maxTokOpt).toInt() : 24, shot, [&](bool ok) {
                                        if (!ok) std::fprintf(stderr, "tinyloop-workbench: the view could not be filled\n");
                                        else if (!shot.isEmpty()) std::printf("screenshot: %s\n", qPrintable(shot));
                                        if (!shot.isEmpty()) {
                                            const QWidget* view = w.analysisViews()->window(cli.value(viewOpt).toLower());
                                            exitCode = ok && (!view || layoutClean(view)) ? 0 : 1;
                                            QApplication::quit();
                                        }
                                    });
            return;
        }
        if (autorun) {
            if (!w.generate()) {
                std::fprintf(stderr, "tinyloop-workbench: could not start the run\n");
                if (!shot.isEmpty()) grabAndQuit();
            }
        } else if (!shot.isEmpty()) {
            grabAndQuit();
        }
    });
    if (cli.isSet(saveSessionOpt))
        QObject::connect(&w, &tlui::MainWindow::sessionSettled, &w, [&] {
            QString err;
            if (w.exportSessionJson(cli.value(saveSessionOpt), &err)) {
                std::printf("session: %s\n", qPrintable(cli.value(saveSessionOpt)));
            } else {
                std::fprintf(stderr, "tinyloop-workbench: session not saved: %s\n", qPrintable(err));
                exitCode = 1;
            }
        });
    if (!shot.isEmpty() && autorun)
        QObject::connect(&w, &tlui::MainWindow::sessionSettled, &w, [&] { grabAndQuit(); });

    QStringList pos = cli.positionalArguments();
    if (!sessionFile.isEmpty()) {  // (taken from argv before Qt: take_session_arg)
        QString err;
        if (!w.openSession(sessionFile, &err)) {
            std::fprintf(stderr, "tinyloop-workbench: session not opened: %s\n", qPrintable(err));
            return 1;
        }
        // the model the session was run on, when it is still there and none is named
        if (pos.isEmpty() && QFileInfo(w.session().modelPath).isFile()) pos << w.session().modelPath;
    }
    const tlui::StartupModel sm = tlui::resolveStartupModel(pos.isEmpty() ? QString() : pos.first());
    w.show();
    if (sm.path.isEmpty()) {
        std::fprintf(stderr, "tinyloop-workbench: no model found; looked at:\n  %s\n",
                     qPrintable(sm.tried.join("\n  ")));
        if (!shot.isEmpty()) return 1;
    } else {
        if (sm.randomFallback)
            std::fprintf(stderr, "tinyloop-workbench: the bundled model is not there; opening %s (random model: text is noise)\n",
                         qPrintable(sm.path));
        w.openModel(sm.path, sm.randomFallback);
    }
    const int rc = app.exec();
    return exitCode ? exitCode : rc;
}
