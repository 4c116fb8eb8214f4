#include "federation/codec.h"

#include "util/error.h"

namespace fedshard::federation {

Codec::Codec(const std::string& spec, int64_t block) : int8_(spec == "int8"), block_(block) {
  FS_CHECK(spec == "bf16" || spec == "int8", "federation.compress must be none, bf16 or int8, got '", spec, "'");
  // Multiples of 4 keep every encoded chunk's scales 4-byte aligned in the byte buffers.
  FS_CHECK(block_ > 0 && block_ % 4 == 0, "federation.compress_block must be a positive multiple of 4, got ", block_);
}

int64_t Codec::encoded_bytes(int64_t n) const {
  return int8_ ? n + (n / block_) * static_cast<int64_t>(sizeof(float)) : 2 * n;
}

double Codec::bytes_per_element() const { return int8_ ? 1.0 + static_cast<double>(sizeof(float)) / block_ : 2.0; }

void Codec::encode(const at::Tensor& x, at::Tensor bytes) const {
  const int64_t n = x.numel();
  FS_ASSERT(n % granule() == 0 && bytes.numel() == encoded_bytes(n) && bytes.scalar_type() == at::kByte,
            "codec buffer sizes");
  if (!int8_) {
    bytes.view(at::kBFloat16).copy_(x);
    return;
  }
  // Scales are computed and applied in the master dtype, then sent as fp32; the decoder uses the fp32 scale,
  // so the sender's residual (value - decode(encode(value))) is what the receivers really lose.
  const auto blocks = x.reshape({n / block_, block_});
  const auto scale = (blocks.abs().amax(1) / 127.0).to(at::kFloat);
  const auto safe = at::where(scale > 0, scale, at::ones_like(scale)).to(x.scalar_type());
  const auto q = at::round(blocks / safe.unsqueeze(1)).clamp_(-127, 127).to(at::kChar);
  bytes.narrow(0, 0, n).view(at::kChar).copy_(q.reshape({-1}));
  bytes.narrow(0, n, encoded_bytes(n) - n).view(at::kFloat).copy_(scale);
}

at::Tensor Codec::decode(const at::Tensor& bytes, int64_t n, at::ScalarType dtype) const {
  if (!int8_) return bytes.view(at::kBFloat16).to(dtype);
  const auto q = bytes.narrow(0, 0, n).view(at::kChar).to(dtype).reshape({n / block_, block_});
  const auto scale = bytes.narrow(0, n, encoded_bytes(n) - n).view(at::kFloat).to(dtype);
  return (q * scale.unsqueeze(1)).reshape({-1});
}

}  // namespace fedshard::federation
