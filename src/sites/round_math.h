// What a round server shard computes from a round's submissions (DESIGN.md "Sites"), as the in-job aggregator does
// for a segment: each site weighs tokens / the participants' tokens; float32 models are summed weighted (the in-job
// plain round's sum, in the same ATen operations, so two sites give the in-job bits), deltas decoded, weighted and
// added to the global model; the outer optimizer steps once; where deltas travel encoded, the new global model
// travels back as the encoding of its change, with the shard's own error feedback, and every site and the shard
// hold the same decoded model. For sites that do not fully trust each other the deltas may be combined robustly
// instead (`Aggregation`): each clipped to a norm bound first (the coordinator's scale), then a coordinate-wise
// trimmed mean or median of the sites' deltas, unweighted (a site's tokens are its own claim).
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "federation/codec.h"
#include "federation/outer_optimizer.h"
#include "sites/wire.h"

namespace fedshard::sites {

// One site's data of the round over the shard's elements, decoded to float32: its model or its delta.
struct SiteData {
  std::string site;
  double tokens = 0;
  at::Tensor values;
  double scale = 1;  // its delta is multiplied by this (the norm bound's clip)
};

// How a round combines the sites' deltas (`fedshard serve --aggregate`).
struct Aggregation {
  enum class Kind { Mean, Trimmed, Median };
  Kind kind = Kind::Mean;
  double trim = 0;  // Trimmed: the fraction of sites dropped at each end, per coordinate, in [0, 0.5)

  // "mean", "trimmed:F" or "median"; throws Error naming the spec otherwise.
  static Aggregation parse(const std::string& spec);
  // Sites dropped at each end of n, per coordinate (Median: all but the middle one or two).
  int64_t dropped(int64_t n) const;
};

// The squared norm of a site's delta over the shard's elements (`values`: its model or its decoded delta; `global`:
// the shard's global model, for a model).
double delta_norm2(Payload payload, const at::Tensor& values, const at::Tensor& global);

// A shard's state between rounds.
struct ShardModel {
  at::Tensor global;         // float32: the model every site holds after the last round
  std::unique_ptr<federation::OuterOptimizer> outer;
  at::Tensor down_residual;  // encoded rounds: what the encodings of the global model's changes lost so far
  at::Tensor down_delta;     // encoded rounds: the last round's change, as the blocks sent (uint8)
};

// The weights of `sites` (sorted by name): tokens over their sum (equal where none trained).
std::vector<double> site_weights(const std::vector<SiteData>& sites);

// Round `round` over the participants `sites` (sorted by name; round 0: one site's initial model, taken as it is).
// `payload`: what they sent. Updates `m` (global, outer state, residual, delta).
void apply_round(ShardModel& m, int64_t round, Payload payload, const std::vector<SiteData>& sites,
                 const std::optional<federation::Codec>& codec, const Aggregation& aggregation = {});

// The codec's encoding of `values` in blocks of its granule from element 0 (the last block padded with zeros), and
// back: what Submit and Fetch chunks carry (sites/wire.h).
at::Tensor encode_blocks(const federation::Codec& codec, const at::Tensor& values);
at::Tensor decode_blocks(const federation::Codec& codec, const at::Tensor& bytes, int64_t count);
// Bytes of `count` elements' blocks.
int64_t encoded_size(const federation::Codec& codec, int64_t count);

}  // namespace fedshard::sites
