#include "report/report.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/error.h"
#include "util/posix_file.h"

namespace fedshard::report {

namespace {

namespace fs = std::filesystem;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string quoted(const std::string& s) {
  std::string q = "\"";
  for (char c : s) q += (c == '"' ? '\'' : c);
  return q + "\"";
}

void run_gnuplot(const fs::path& script) {
  const std::string cmd = "gnuplot " + quoted(script.string()) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  FS_CHECK(p != nullptr, "cannot run gnuplot (install gnuplot-nox)");
  std::string output;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) output += buf;
  const int status = ::pclose(p);
  FS_CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "gnuplot failed on ", script.string(),
           ": ", output.empty() ? "exit status " + std::to_string(WEXITSTATUS(status)) : output);
}

// One figure in both formats from the same plot commands.
void figure(const fs::path& out, const std::string& name, const std::string& setup, const std::string& plot,
            std::vector<std::string>& written) {
  std::ostringstream gp;
  for (const char* term : {"pngcairo size 900,560 font 'sans,10'", "svg size 900,560 font 'sans,10'"}) {
    const std::string ext = std::string(term).rfind("png", 0) == 0 ? ".png" : ".svg";
    gp << "set terminal " << term << "\n"
       << "set output " << quoted((out / (name + ext)).string()) << "\n"
       << setup << "\n"
       << plot << "\n"
       << "unset output\n";
    written.push_back((out / (name + ext)).string());
  }
  const fs::path script = out / (name + ".gp");
  write_file_atomically(script.string(), gp.str());
  run_gnuplot(script);
}

}  // namespace

std::string markdown_table(const std::vector<RunData>& runs) {
  std::ostringstream md;
  md << "| run | strategy | steps | tokens | step s (mean) | tokens/s | node B/step | inter-node B/step | "
        "inter-group B/step | final val ppl | predicted step s | measured/predicted |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : runs) {
    const auto b = r.mean_bytes();
    std::string ppl = "-";
    for (const auto& e : r.evals)
      if (e.model == "global") ppl = fmt("%.3f", e.val_ppl);
    const double step_s = r.mean_step_seconds();
    md << "| " << fs::path(r.dir).filename().string() << " | " << r.label << " | " << r.steps.back().step << " | "
       << r.steps.back().tokens << " | " << fmt("%.3f", step_s) << " | " << fmt("%.0f", r.tok_per_s())
       << " | " << fmt("%.0f", b[0]) << " | " << fmt("%.0f", b[1]) << " | " << fmt("%.0f", b[2]) << " | " << ppl
       << " | " << (r.predicted_step_s ? fmt("%.3f", *r.predicted_step_s) : "-") << " | "
       << (r.predicted_step_s ? fmt("%.3f", step_s / *r.predicted_step_s) : "-") << " |\n";
  }
  return md.str();
}

std::vector<std::string> write_report(const std::vector<RunData>& runs, const std::string& out_dir) {
  FS_CHECK(!runs.empty(), "report needs at least one run directory");
  ensure_writable_dir(out_dir);
  const fs::path out(out_dir);
  std::vector<std::string> written;

  // Data files: one per run for the curves, one for the bars.
  std::string ppl_time, ppl_tokens, ppl_plan;
  for (size_t i = 0; i < runs.size(); ++i) {
    std::ostringstream d;
    d << "# tokens train_seconds val_ppl predicted_hours\n";
    for (const auto& e : runs[i].evals)
      if (e.model == "global")
        d << e.tokens << " " << e.train_seconds << " " << e.val_ppl << " "
          << static_cast<double>(e.step) * runs[i].plan_step_s.value_or(0.0) / 3600.0 << "\n";
    const std::string file = (out / ("eval_" + std::to_string(i) + ".dat")).string();
    write_file_atomically(file, d.str());
    const std::string sep = i ? ", " : "plot ";
    ppl_time += sep + quoted(file) + " using 2:3 with linespoints title " + quoted(runs[i].label);
    ppl_tokens += sep + quoted(file) + " using 1:3 with linespoints title " + quoted(runs[i].label);
    ppl_plan += sep + quoted(file) + " using 4:3 with linespoints title " + quoted(runs[i].label);
  }
  std::ostringstream bars;
  bool any_prediction = false;
  for (const auto& r : runs) {
    bars << quoted(r.label) << " " << r.tok_per_s() << " " << r.mean_step_seconds() << " "
         << (r.predicted_step_s ? *r.predicted_step_s : 0.0) << "\n";
    any_prediction = any_prediction || r.predicted_step_s.has_value();
  }
  const std::string bars_file = (out / "runs.dat").string();
  write_file_atomically(bars_file, bars.str());

  const std::string common = "set grid\nset key top right\n";
  // Perplexity falls by orders of magnitude early on: a log axis keeps the end of training readable.
  const std::string ppl_axis = common + "set logscale y\nset ylabel 'validation perplexity (log scale)'\n";
  figure(out, "ppl_vs_time", ppl_axis + "set xlabel 'training time (s)'", ppl_time, written);
  figure(out, "ppl_vs_tokens", ppl_axis + "set xlabel 'tokens (global)'", ppl_tokens, written);
  if (runs.front().plan_step_s)
    figure(out, "ppl_vs_predicted_time",
           ppl_axis + "set xlabel 'hours on " + runs.front().plan_cluster + " (PREDICTED by fedshard plan, not measured)'\n" +
               "set title 'time axis predicted: each step priced at fedshard plan step time of its strategy'",
           ppl_plan, written);
  const std::string bar_setup = "set style fill solid 0.7 border -1\nset boxwidth 0.6\nset xtics rotate by -25\n"
                                "set grid ytics\nset yrange [0:*]\nset bmargin 6\n";
  figure(out, "throughput", bar_setup + "set ylabel 'tokens/s'",
         "plot " + quoted(bars_file) + " using 0:2:xtic(1) with boxes notitle", written);
  if (any_prediction)
    figure(out, "step_time", bar_setup + "set style data histograms\nset style histogram clustered gap 1\n"
                             "set ylabel 'step time (s)'\nset key top left",
           "plot " + quoted(bars_file) + " using 3:xtic(1) title 'measured', '' using 4 title 'predicted'", written);

  std::ostringstream md;
  md << "# fedshard report\n\n" << markdown_table(runs) << "\n";
  for (const auto& f : written)
    if (fs::path(f).extension() == ".png")
      md << "![" << fs::path(f).stem().string() << "](" << fs::path(f).filename().string() << ")\n";
  write_file_atomically((out / "report.md").string(), md.str());
  written.push_back((out / "report.md").string());
  return written;
}

}  // namespace fedshard::report
