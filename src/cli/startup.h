// Start-up checks of a multi-rank job (config, topology, data) that every rank runs before any collective.
// If any rank fails, the lowest failing rank prints its one-line error and every rank exits with status 2:
// one message, no abort banner, no rank left waiting.
#pragma once

#include <functional>

namespace fedshard::cli {

struct StartupFailed {
  int code = 2;
};

// Runs body; on a fedshard::Error anywhere, throws StartupFailed on every rank after the report.
void run_startup_phase(const std::function<void()>& body);

}  // namespace fedshard::cli
