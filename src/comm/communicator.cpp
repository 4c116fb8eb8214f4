#include "comm/communicator.h"

#include <chrono>

#include "comm/link_emulation.h"
#include "util/error.h"

namespace fedshard::comm {

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::AllGather: return "all_gather";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::AllReduce: return "all_reduce";
    case Collective::AllToAll: return "all_to_all";
    case Collective::Broadcast: return "broadcast";
    case Collective::Barrier: return "barrier";
  }
  return "?";
}

double ring_bus_bytes(Collective c, double full_bytes, int p) {
  if (p <= 1) return 0.0;
  const double frac = static_cast<double>(p - 1) / static_cast<double>(p);
  switch (c) {
    case Collective::AllGather:
    case Collective::ReduceScatter:
    case Collective::AllToAll:
    case Collective::Broadcast: return frac * full_bytes;
    case Collective::AllReduce: return 2.0 * frac * full_bytes;
    case Collective::Barrier: return 0.0;
  }
  return 0.0;
}

int ring_steps(Collective c, int p) {
  if (p <= 1) return 0;
  return c == Collective::AllReduce ? 2 * (p - 1) : p - 1;
}

Work::Clock::time_point record_completion(const std::string& comm, Tier tier, Lane lane, Traffic k, Collective c,
                                          double full_bytes, int p, double sent_bytes, Work::Clock::time_point t0,
                                          Work::Clock::time_point t1) {
  const auto release = LinkEmulator::instance().release_time(tier, lane, c, full_bytes, p, t0, t1);
  Tally tally;
  tally.sent_bytes = sent_bytes;
  tally.formula_bytes = ring_bus_bytes(c, full_bytes, p);
  tally.payload_bytes = full_bytes;
  tally.calls = 1;
  tally.seconds = std::chrono::duration<double>(t1 - t0).count();
  tally.emulated_seconds = std::chrono::duration<double>(release - t1).count();
  Ledger::instance().record(comm, tier, lane, k, tally);
  return release;
}

std::string Communicator::describe(Collective c, const at::Tensor& t) const {
  return cat(collective_name(c), " of ", t.numel(), " x ", t.dtype().name(), " on '", name_, "' (rank ",
             rank_, " of ", size(), ")");
}

}  // namespace fedshard::comm
