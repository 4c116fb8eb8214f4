// How a compressed round puts a group's model delta on the wire (federation.compress). Every codec but bf16 cuts
// the delta into blocks of `block` elements, each with an fp32 scale (its largest magnitude over the levels):
//   bf16     2 bytes per element;
//   int8     blockwise absmax, values in [-127, 127], 1 + 4/block bytes per element (OpenDiLoCo/prime);
//   int4     blockwise absmax, values in [-7, 7], two per byte, 1/2 + 4/block (Streaming DiLoCo's 4-bit);
//   topk:D   the ceil(D x block) largest magnitudes of each block (SparseLoCo's top-k per chunk), each as its
//            index within the block in ceil(log2 block) bits and a 2-bit value, packed; every other element travels
//            as zero. Values (federation.topk_values): `means` (a sign and a magnitude bin, small or large at the
//            kept magnitudes' mean, each bin decoded to its magnitudes' mean, two bf16 per block; an exact zero
//            decodes to zero) or `levels` (-1, -1/3, 1/3, 1 of the block's largest magnitude, an fp32 scale).
// Encoded chunks are fixed-size raw bytes, so they travel through all-to-all and all-gather unchanged; the sum
// happens after decoding, in the master dtype, and what an encoding lost stays in the sender's error feedback.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace fedshard::federation {

// Whether a codec is cut into blocks (int8, int4, topk:D): its residuals are cut the same way.
bool blockwise_codec(const std::string& spec);
// Whether spec is topk:D.
bool sparse_codec(const std::string& spec);

// How topk:D's kept values travel (federation.topk_values).
enum class TopkValues { Means, Levels };
TopkValues parse_topk_values(const std::string& name);  // means | levels; throws on anything else

class Codec {
 public:
  // spec: bf16 | int8 | int4 | topk:D (0 < D <= 1); block: elements per scale. Throws on anything else.
  Codec(const std::string& spec, int64_t block, TopkValues values = TopkValues::Means);

  // Chunks are cut in multiples of this many elements (the block; bf16: 1).
  int64_t granule() const { return kind_ == Kind::Bf16 ? 1 : block_; }
  int64_t encoded_bytes(int64_t n) const;  // n: a multiple of granule()
  // bytes: a uint8 tensor of encoded_bytes(x.numel()).
  void encode(const at::Tensor& x, at::Tensor bytes) const;
  // The n values that `bytes` encodes, in `dtype`.
  at::Tensor decode(const at::Tensor& bytes, int64_t n, at::ScalarType dtype) const;
  // From `bytes`, the encoding of `total` elements, the encoding of elements [from, from + n) alone (every count a
  // multiple of granule()): a range of a round's encoded change sent without encoding it again.
  at::Tensor cut(const at::Tensor& bytes, int64_t total, int64_t from, int64_t n) const;
  // Bytes on the wire per element, for the plan.
  double bytes_per_element() const;

 private:
  enum class Kind { Bf16, Int8, Int4, TopK };
  int64_t block_bytes() const;  // one block's encoding (not bf16)
  void encode_topk(const at::Tensor& blocks, at::Tensor bytes) const;
  at::Tensor decode_topk(const at::Tensor& bytes, int64_t blocks, at::ScalarType dtype) const;

  Kind kind_;
  int64_t block_;
  TopkValues values_;
  int64_t kept_ = 0;        // topk: values kept per block
  int64_t entry_bits_ = 0;  // topk: bits of one kept value, its index and 2-bit code
};

}  // namespace fedshard::federation
