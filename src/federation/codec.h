// How a compressed round puts a group's model delta on the wire (federation.compress): bf16 (2 bytes per
// element) or int8 blockwise absmax (1 byte per element plus one fp32 scale per block of `block` elements,
// the int8 all-reduce of OpenDiLoCo/prime). Encoded chunks are raw bytes, so they travel through all-to-all
// and all-gather unchanged; the sum happens after decoding, in the master dtype.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace fedshard::federation {

class Codec {
 public:
  // spec: bf16 | int8; block: elements per int8 scale.
  Codec(const std::string& spec, int64_t block);

  // Chunks are cut in multiples of this many elements (int8: the block; bf16: 1).
  int64_t granule() const { return int8_ ? block_ : 1; }
  int64_t encoded_bytes(int64_t n) const;  // n: a multiple of granule()
  // bytes: a uint8 tensor of encoded_bytes(x.numel()).
  void encode(const at::Tensor& x, at::Tensor bytes) const;
  // The n values that `bytes` encodes, in `dtype`.
  at::Tensor decode(const at::Tensor& bytes, int64_t n, at::ScalarType dtype) const;
  // Bytes on the wire per element (int8: 1 + 4/block), for the plan.
  double bytes_per_element() const;

 private:
  bool int8_;
  int64_t block_;
};

}  // namespace fedshard::federation
