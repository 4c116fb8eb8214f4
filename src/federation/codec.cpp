#include "federation/codec.h"

#include <cmath>
#include <cstdlib>
#include <tuple>

#include "util/error.h"

namespace fedshard::federation {

namespace {

constexpr int64_t kScaleBytes = sizeof(float);
constexpr int64_t kMaxTopkBlock = 16384;

// D of topk:D, or 0 where spec is not of that form.
double topk_density(const std::string& spec) {
  if (spec.rfind("topk:", 0) != 0) return 0;
  const std::string d = spec.substr(5);
  char* end = nullptr;
  const double v = std::strtod(d.c_str(), &end);
  FS_CHECK(!d.empty() && end == d.c_str() + d.size() && v > 0 && v <= 1,
           "D of federation.compress = topk:D must be a fraction in (0, 1], got '", d, "'");
  return v;
}

}  // namespace

bool blockwise_codec(const std::string& spec) { return spec == "int8" || spec == "int4" || topk_density(spec) > 0; }

bool sparse_codec(const std::string& spec) { return topk_density(spec) > 0; }

TopkValues parse_topk_values(const std::string& name) {
  FS_CHECK(name == "means" || name == "levels", "federation.topk_values must be means or levels, got '", name, "'");
  return name == "means" ? TopkValues::Means : TopkValues::Levels;
}

Codec::Codec(const std::string& spec, int64_t block, TopkValues values) : block_(block), values_(values) {
  const double density = topk_density(spec);
  FS_CHECK(spec == "bf16" || spec == "int8" || spec == "int4" || density > 0,
           "federation.compress must be none, bf16, int8, int4 or topk:D, got '", spec, "'");
  kind_ = spec == "bf16" ? Kind::Bf16 : spec == "int8" ? Kind::Int8 : spec == "int4" ? Kind::Int4 : Kind::TopK;
  // Multiples of 4 keep every encoded chunk's scales 4-byte aligned in the byte buffers (int4: of 8, two values
  // per byte); topk's indices are one byte.
  FS_CHECK(block_ > 0 && block_ % 4 == 0, "federation.compress_block must be a positive multiple of 4, got ", block_);
  FS_CHECK(kind_ != Kind::Int4 || block_ % 8 == 0, "federation.compress_block must be a multiple of 8 under int4, got ",
           block_);
  FS_CHECK(kind_ != Kind::TopK || block_ <= kMaxTopkBlock, "federation.compress_block must be at most ", kMaxTopkBlock,
           " under topk:D (an index and its 2-bit value in 16 bits), got ", block_);
  if (kind_ != Kind::TopK) return;
  kept_ = std::min<int64_t>(block_, static_cast<int64_t>(std::ceil(density * block_)));
  int64_t index_bits = 1;
  while ((int64_t{1} << index_bits) < block_) ++index_bits;
  entry_bits_ = index_bits + 2;
}

int64_t Codec::block_bytes() const {
  switch (kind_) {
    case Kind::Int8: return block_ + kScaleBytes;
    case Kind::Int4: return block_ / 2 + kScaleBytes;
    case Kind::TopK: return kScaleBytes + (kept_ * entry_bits_ + 7) / 8;  // means: two bf16; levels: one fp32
    case Kind::Bf16: break;
  }
  return 2 * block_;
}

int64_t Codec::encoded_bytes(int64_t n) const { return kind_ == Kind::Bf16 ? 2 * n : n / block_ * block_bytes(); }

double Codec::bytes_per_element() const {
  return static_cast<double>(kind_ == Kind::Bf16 ? 2 * block_ : block_bytes()) / static_cast<double>(block_);
}

void Codec::encode(const at::Tensor& x, at::Tensor bytes) const {
  const int64_t n = x.numel();
  FS_ASSERT(n % granule() == 0 && bytes.numel() == encoded_bytes(n) && bytes.scalar_type() == at::kByte,
            "codec buffer sizes");
  if (kind_ == Kind::Bf16) {
    bytes.view(at::kBFloat16).copy_(x);
    return;
  }
  const auto blocks = x.reshape({n / block_, block_});
  if (kind_ == Kind::TopK) return encode_topk(blocks, bytes);
  // Scales are computed and applied in the master dtype, then sent as fp32; the decoder uses the fp32 scale,
  // so the sender's residual (value - decode(encode(value))) is what the receivers really lose. Layout: every
  // block's values, then every block's scale.
  const int64_t levels = kind_ == Kind::Int8 ? 127 : 7;
  const auto scale = (blocks.abs().amax(1) / static_cast<double>(levels)).to(at::kFloat);
  const auto safe = at::where(scale > 0, scale, at::ones_like(scale)).to(x.scalar_type());
  const auto q = at::round(blocks / safe.unsqueeze(1)).clamp_(-levels, levels).reshape({-1});
  const int64_t values = encoded_bytes(n) - (n / block_) * kScaleBytes;
  if (kind_ == Kind::Int8) {
    bytes.narrow(0, 0, values).view(at::kChar).copy_(q.to(at::kChar));
  } else {
    // Two values per byte, offset to [1, 15]: element 2i in the low nibble, 2i+1 in the high one.
    const auto pairs = (q + 8).to(at::kShort).reshape({n / 2, 2});
    bytes.narrow(0, 0, values).copy_(pairs.select(1, 0) + pairs.select(1, 1) * 16);
  }
  bytes.narrow(0, values, encoded_bytes(n) - values).view(at::kFloat).copy_(scale);
}

at::Tensor Codec::cut(const at::Tensor& bytes, int64_t total, int64_t from, int64_t n) const {
  FS_ASSERT(from % granule() == 0 && n % granule() == 0 && total % granule() == 0 && from + n <= total &&
                bytes.numel() == encoded_bytes(total),
            "codec cut bounds");
  if (kind_ != Kind::Int8 && kind_ != Kind::Int4) return bytes.narrow(0, encoded_bytes(from), encoded_bytes(n));
  // Every block's values, then every block's scale: the range's values and its scales, joined.
  const auto values = [&](int64_t count) { return kind_ == Kind::Int8 ? count : count / 2; };
  return at::cat({bytes.narrow(0, values(from), values(n)),
                  bytes.narrow(0, values(total) + from / block_ * kScaleBytes, n / block_ * kScaleBytes)});
}

void Codec::encode_topk(const at::Tensor& blocks, at::Tensor bytes) const {
  // Per block: [4 header bytes][kept_ entries of entry_bits_ bits, packed from bit 0 of the first byte on]; an
  // entry is index * 4 + code. Top-k sorts by magnitude, so entry 0 is the block's largest.
  const int64_t nb = blocks.size(0), k = kept_;
  const auto largest = blocks.abs().topk(k, 1);
  const auto& magnitude = std::get<0>(largest);  // a plain name: C++17 lambdas cannot capture structured bindings
  auto index = std::get<1>(largest);
  const auto kept = blocks.gather(1, index);
  auto out = bytes.view({nb, block_bytes()});
  at::Tensor code;
  if (values_ == TopkValues::Levels) {
    // Levels -1, -1/3, 1/3, 1 of the largest magnitude, as codes 0..3.
    const auto scale = magnitude.select(1, 0).to(at::kFloat).contiguous();
    const auto safe = at::where(scale > 0, scale, at::ones_like(scale)).to(blocks.scalar_type());
    code = at::round((kept / safe.unsqueeze(1) + 1) * 1.5).clamp_(0, 3).to(at::kInt);
    out.narrow(1, 0, kScaleBytes).copy_(scale.reshape({nb, 1}).view(at::kByte));
  } else {
    // Code: bit 0 the sign, bit 1 the large bin (at or above the mean of the kept non-zero magnitudes). A kept
    // zero (a block with fewer than k non-zeros) repeats entry 0, so the duplicate writes the same value there.
    const auto nonzero = magnitude > 0;
    const auto count = nonzero.sum(1, /*keepdim=*/true).clamp_min(1).to(magnitude.scalar_type());
    const auto threshold = magnitude.sum(1, /*keepdim=*/true) / count;
    const auto large = nonzero.logical_and(magnitude >= threshold);
    const auto small = nonzero.logical_and(large.logical_not());
    const auto bin_mean = [&](const at::Tensor& in) {
      return (magnitude * in).sum(1) / in.sum(1).clamp_min(1).to(magnitude.scalar_type());
    };
    const auto means = at::stack({bin_mean(small), bin_mean(large)}, 1).to(at::kBFloat16);  // [nb, 2]
    out.narrow(1, 0, kScaleBytes).copy_(means.contiguous().view(at::kByte));
    code = (kept < 0).to(at::kInt) + large.to(at::kInt) * 2;
    code = at::where(nonzero, code, code.narrow(1, 0, 1));
    index = at::where(nonzero, index, index.narrow(1, 0, 1));
  }
  // Each entry's bits, low bit first, then 8 at a time into bytes.
  const int64_t w = entry_bits_, packed = block_bytes() - kScaleBytes;
  const auto entry = index.to(at::kInt) * 4 + code;
  auto bits = entry.unsqueeze(2).bitwise_right_shift(at::arange(w, entry.options())).bitwise_and_(1).reshape({nb, k * w});
  bits = at::constant_pad_nd(bits, {0, packed * 8 - k * w}).reshape({nb, packed, 8});
  const auto weights = at::pow(2, at::arange(8, bits.options()));
  out.narrow(1, kScaleBytes, packed).copy_((bits * weights).sum(2));
}

at::Tensor Codec::decode_topk(const at::Tensor& bytes, int64_t nb, at::ScalarType dtype) const {
  const int64_t k = kept_, w = entry_bits_, packed = block_bytes() - kScaleBytes;
  const auto in = bytes.view({nb, block_bytes()});
  const auto header = in.narrow(1, 0, kScaleBytes).contiguous();
  const auto octets = in.narrow(1, kScaleBytes, packed).to(at::kInt);
  const auto bits = octets.unsqueeze(2).bitwise_right_shift(at::arange(8, octets.options())).bitwise_and_(1)
                        .reshape({nb, packed * 8})
                        .narrow(1, 0, k * w)
                        .reshape({nb, k, w});
  const auto entry = (bits * at::pow(2, at::arange(w, bits.options()))).sum(2);  // [nb, k]
  const auto code = entry.bitwise_and(3);
  const auto index = entry.bitwise_right_shift(2).to(at::kLong);
  at::Tensor values;
  if (values_ == TopkValues::Levels) {
    const auto scale = header.view(at::kFloat).to(dtype);  // [nb, 1]
    values = (code.to(dtype) / 1.5 - 1) * scale;
  } else {
    const auto means = header.view(at::kBFloat16).to(dtype);  // [nb, 2]: small, large
    const auto sign = 1 - 2 * code.bitwise_and(1).to(dtype);
    values = sign * means.gather(1, code.bitwise_right_shift(1).to(at::kLong));
  }
  return at::zeros({nb, block_}, at::TensorOptions().dtype(dtype).device(bytes.device())).scatter_(1, index, values);
}

at::Tensor Codec::decode(const at::Tensor& bytes, int64_t n, at::ScalarType dtype) const {
  if (kind_ == Kind::Bf16) return bytes.view(at::kBFloat16).to(dtype);
  if (kind_ == Kind::TopK) return decode_topk(bytes, n / block_, dtype).reshape({-1});
  const int64_t values = encoded_bytes(n) - (n / block_) * kScaleBytes;
  at::Tensor q;
  if (kind_ == Kind::Int8) {
    q = bytes.narrow(0, 0, values).view(at::kChar).to(dtype);
  } else {
    const auto packed = bytes.narrow(0, 0, values).to(at::kShort);
    const auto high = at::floor_divide(packed, 16);
    q = (at::stack({packed - high * 16, high}, 1).reshape({n}) - 8).to(dtype);
  }
  const auto scale = bytes.narrow(0, values, encoded_bytes(n) - values).view(at::kFloat).to(dtype);
  return (q.reshape({n / block_, block_}) * scale.unsqueeze(1)).reshape({-1});
}

}  // namespace fedshard::federation
