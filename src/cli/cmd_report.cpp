// `fedshard report RUN_DIR... --out DIR`: figures and a Markdown table from run directories.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "report/plan_time.h"
#include "report/report.h"

namespace fedshard::cli {

Command add_report(CLI::App& app) {
  struct Args {
    std::vector<std::string> runs;
    std::string out = "report";
    std::string time_from_plan;
  };
  auto a = std::make_shared<Args>();
  Command c;
  c.app = app.add_subcommand("report", "Plot and tabulate run directories (gnuplot PNG + SVG, Markdown)");
  c.app->add_option("runs", a->runs, "run directories (each with metrics.jsonl)")->required();
  c.app->add_option("--out", a->out, "output directory")->capture_default_str();
  c.app->add_option("--time-from-plan", a->time_from_plan,
                    "fedshard plan --json output: also plot perplexity against the wall time that plan predicts for "
                    "each run's strategy (e.g. plan --paper: hours on 512 A100)");
  c.run = [a] {
    std::vector<report::RunData> runs;
    for (const auto& r : a->runs) runs.push_back(report::load_run(r));
    if (!a->time_from_plan.empty()) report::attach_plan_times(runs, a->time_from_plan);
    const auto files = report::write_report(runs, a->out);
    std::cout << report::markdown_table(runs);
    for (const auto& f : files) std::cout << "wrote " << f << "\n";
    return 0;
  };
  return c;
}

}  // namespace fedshard::cli
