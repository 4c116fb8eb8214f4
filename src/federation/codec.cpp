#include "federation/codec.h"

#include <cmath>
#include <cstdlib>

#include "util/error.h"

namespace fedshard::federation {

namespace {

constexpr int64_t kScaleBytes = sizeof(float);

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

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

}  // namespace

bool blockwise_codec(const std::string& spec) { return spec == "int8" || spec == "int4" || topk_density(spec) > 0; }

Codec::Codec(const std::string& spec, int64_t block) : block_(block) {
  const double density = topk_density(spec);
  FS_CHECK(spec == "bf16" || spec == "int8" || spec == "int4" || density > 0,
           "federation.compress must be none, bf16, int8, int4 or topk:D, got '", spec, "'");
  kind_ = spec == "bf16" ? Kind::Bf16 : spec == "int8" ? Kind::Int8 : spec == "int4" ? Kind::Int4 : Kind::TopK;
  // Multiples of 4 keep every encoded chunk's scales 4-byte aligned in the byte buffers (int4: of 8, two values
  // per byte); topk's indices are one byte.
  FS_CHECK(block_ > 0 && block_ % 4 == 0, "federation.compress_block must be a positive multiple of 4, got ", block_);
  FS_CHECK(kind_ != Kind::Int4 || block_ % 8 == 0, "federation.compress_block must be a multiple of 8 under int4, got ",
           block_);
  FS_CHECK(kind_ != Kind::TopK || block_ <= 256, "federation.compress_block must be at most 256 under topk:D (the "
           "indices within a block are one byte), got ", block_);
  if (kind_ == Kind::TopK) kept_ = std::min<int64_t>(block_, static_cast<int64_t>(std::ceil(density * block_)));
}

int64_t Codec::block_bytes() const {
  switch (kind_) {
    case Kind::Int8: return block_ + kScaleBytes;
    case Kind::Int4: return block_ / 2 + kScaleBytes;
    case Kind::TopK: return round_up(kScaleBytes + kept_ + (kept_ + 3) / 4, 4);
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
  // Per block: [fp32 scale][kept_ indices][2-bit values, 4 per byte, element i in bits 2(i mod 4)][zero padding].
  const int64_t nb = blocks.size(0), k = kept_, packed = (k + 3) / 4;
  const auto index = std::get<1>(blocks.abs().topk(k, 1));
  const auto kept = blocks.gather(1, index);
  const auto scale = kept.abs().amax(1).to(at::kFloat);
  const auto safe = at::where(scale > 0, scale, at::ones_like(scale)).to(blocks.scalar_type());
  // Levels -1, -1/3, 1/3, 1 (of the scale) as 0..3.
  auto q = at::round((kept / safe.unsqueeze(1) + 1) * 1.5).clamp_(0, 3).to(at::kShort);
  q = at::constant_pad_nd(q, {0, 4 * packed - k}).reshape({nb, packed, 4});
  const auto four = q.select(2, 0) + q.select(2, 1) * 4 + q.select(2, 2) * 16 + q.select(2, 3) * 64;
  auto out = bytes.view({nb, block_bytes()});
  out.zero_();
  out.narrow(1, 0, kScaleBytes).copy_(scale.reshape({nb, 1}).view(at::kByte));
  out.narrow(1, kScaleBytes, k).copy_(index);
  out.narrow(1, kScaleBytes + k, packed).copy_(four);
}

at::Tensor Codec::decode_topk(const at::Tensor& bytes, int64_t nb, at::ScalarType dtype) const {
  const int64_t k = kept_, packed = (k + 3) / 4;
  const auto in = bytes.view({nb, block_bytes()});
  const auto scale = in.narrow(1, 0, kScaleBytes).contiguous().view(at::kFloat).to(dtype);  // [nb, 1]
  const auto index = in.narrow(1, kScaleBytes, k).to(at::kLong);
  const auto four = in.narrow(1, kScaleBytes + k, packed).to(at::kShort);
  const auto q = at::stack({four % 4, at::floor_divide(four, 4) % 4, at::floor_divide(four, 16) % 4,
                            at::floor_divide(four, 64)},
                           2)
                     .reshape({nb, 4 * packed})
                     .narrow(1, 0, k);
  const auto values = (q.to(dtype) / 1.5 - 1) * scale;
  return at::zeros({nb, block_}, at::TensorOptions().dtype(dtype)).scatter_(1, index, values);
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
