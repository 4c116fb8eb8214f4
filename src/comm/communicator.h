// Collectives over flat tensors. Every call is asynchronous and returns a Work handle (call wait() for the
// blocking form); every call is counted in the Ledger under this communicator's tier.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "comm/ledger.h"
#include "comm/tier.h"
#include "comm/work.h"

namespace fedshard::comm {

enum class ReduceOp { Sum, Mean };
enum class Collective { AllGather, ReduceScatter, AllReduce, AllToAll, Broadcast, Barrier };
const char* collective_name(Collective c);

// Bytes one rank sends under the ring algorithm, averaged over ranks: all-gather and reduce-scatter
// (p-1)/p of the full buffer, all-reduce 2(p-1)/p, all-to-all (p-1)/p of one rank's buffer, broadcast (p-1)/p
// (p-1 of p ranks forward the buffer).
double ring_bus_bytes(Collective c, double full_bytes, int p);
// Sequential ring steps (the latency term): p-1, twice that for all-reduce.
int ring_steps(Collective c, int p);

// What every backend does once a collective of p ranks has run from t0 to t1 and this rank handed
// `sent_bytes` to the transport: counts it in the Ledger (next to the ring formula's figure) and returns when
// its Work may be released (later than t1 when the tier's link is emulated).
Work::Clock::time_point record_completion(const std::string& comm, Tier tier, Lane lane, Traffic k, Collective c,
                                          double full_bytes, int p, double sent_bytes, Work::Clock::time_point t0,
                                          Work::Clock::time_point t1);

class Communicator {
 public:
  Communicator(std::string name, Tier tier, int rank, std::vector<int> world_ranks)
      : name_(std::move(name)), tier_(tier), rank_(rank), world_ranks_(std::move(world_ranks)) {}
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const std::string& name() const { return name_; }
  Tier tier() const { return tier_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(world_ranks_.size()); }
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  // out[r*n:(r+1)*n] = in of rank r. in: n elements (may be that slice of out), out: n*size.
  virtual WorkHandle all_gather(const at::Tensor& in, const at::Tensor& out, Traffic k = Traffic::Data) = 0;
  // out (n elements) = reduction over ranks of in[rank*n:(rank+1)*n]. in: n*size elements.
  virtual WorkHandle reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op,
                                    Traffic k = Traffic::Data) = 0;
  virtual WorkHandle all_reduce(const at::Tensor& inout, ReduceOp op, Traffic k = Traffic::Data) = 0;
  // Part r of out = part `rank` of rank r's in; in and out: size equal parts.
  virtual WorkHandle all_to_all(const at::Tensor& in, const at::Tensor& out, Traffic k = Traffic::Data) = 0;
  virtual WorkHandle broadcast(const at::Tensor& inout, int root, Traffic k = Traffic::Data) = 0;
  virtual WorkHandle barrier() = 0;
  // After a PeerLost: every member's pending and later collectives on this communicator fail instead of
  // waiting on a rank that will never answer, so a survivor blocked elsewhere learns of the loss too.
  virtual void revoke() = 0;

 protected:
  std::string describe(Collective c, const at::Tensor& t) const;

 private:
  std::string name_;
  Tier tier_;
  int rank_;
  std::vector<int> world_ranks_;
};

}  // namespace fedshard::comm
