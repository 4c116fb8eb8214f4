// `fedshard report`: a Markdown table and gnuplot figures (PNG and SVG) from any set of run directories:
// validation perplexity against training time and against tokens, throughput bars, and measured against
// predicted step time where the runs carry a plan.json.
#pragma once

#include <string>
#include <vector>

#include "report/run_data.h"

namespace fedshard::report {

// The Markdown table of the runs (also written as OUT/report.md).
std::string markdown_table(const std::vector<RunData>& runs);

// Writes OUT/report.md, the figures and their gnuplot inputs. Returns the figure files written.
// Throws fedshard::Error if OUT is not writable or gnuplot fails.
std::vector<std::string> write_report(const std::vector<RunData>& runs, const std::string& out);

}  // namespace fedshard::report
