// The federation's identity: what every site and the round server must agree on before a round means anything (the
// model's architecture and size, the tokenizer its data were made with, what deltas travel as). A site sends it in
// every hello; the server pins the first it sees (or the one in its state directory) and refuses any other in one
// line naming what differs.
#pragma once

#include <nlohmann/json.hpp>

#include "federation/codec.h"

#include <cstdint>
#include <string>

namespace fedshard::sites {

struct Identity {
  std::string model;      // the architecture, e.g. "tiny: dim 64, 2 layers, 4 heads (2 kv), vocab 256, ffn 192, untied"
  std::string tokenizer;  // the training data's tokenizer and its fingerprint
  std::string codec;      // federation.compress: "none" (float32 models) | bf16 | int8 | int4 | topk:D
  int64_t block = 0;      // federation.compress_block
  std::string values;     // topk:D: federation.topk_values (means | levels); else ""
  int64_t total = 0;      // the model's elements (sites/model_ranges.h)

  nlohmann::json to_json() const;
  static Identity from_json(const nlohmann::json& j);  // throws fedshard::Error on a malformed one
  // "" where the two match, else what differs, e.g. "model: tiny: ... here, small: ... at the site".
  std::string differs(const Identity& site) const;
  // The codec deltas travel through (codec != "none").
  federation::Codec make_codec() const;
};

}  // namespace fedshard::sites
