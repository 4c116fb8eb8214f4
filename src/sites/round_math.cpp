#include "sites/round_math.h"

#include <ATen/core/grad_mode.h>

#include "util/error.h"

namespace fedshard::sites {

int64_t encoded_size(const federation::Codec& codec, int64_t count) {
  const int64_t g = codec.granule();
  return codec.encoded_bytes((count + g - 1) / g * g);
}

at::Tensor encode_blocks(const federation::Codec& codec, const at::Tensor& values) {
  const int64_t n = values.numel(), g = codec.granule(), padded = (n + g - 1) / g * g;
  auto x = values;
  if (padded != n) {
    x = at::zeros({padded}, values.options());
    x.narrow(0, 0, n).copy_(values);
  }
  auto bytes = at::empty({codec.encoded_bytes(padded)}, at::TensorOptions().dtype(at::kByte));
  codec.encode(x.contiguous(), bytes);
  return bytes;
}

at::Tensor decode_blocks(const federation::Codec& codec, const at::Tensor& bytes, int64_t count) {
  const int64_t g = codec.granule(), padded = (count + g - 1) / g * g;
  FS_ASSERT(bytes.numel() == codec.encoded_bytes(padded), "encoded block sizes");
  return codec.decode(bytes, padded, at::kFloat).narrow(0, 0, count);
}

std::vector<double> site_weights(const std::vector<SiteData>& sites) {
  double total = 0;
  for (const auto& s : sites) total += s.tokens;
  std::vector<double> w;
  for (const auto& s : sites) w.push_back(total > 0 ? s.tokens / total : 1.0 / static_cast<double>(sites.size()));
  return w;
}

void apply_round(ShardModel& m, int64_t round, Payload payload, const std::vector<SiteData>& sites,
                 const std::optional<federation::Codec>& codec) {
  at::NoGradGuard no_grad;
  FS_ASSERT(!sites.empty(), "a round without sites");
  if (round == 0) {
    m.global = sites.front().values.clone();
    return;
  }
  // The weighted sum, one site after the other in name order: with two sites the in-job plain round's sum (its
  // ring adds two buffers, an addition that does not depend on the order).
  const auto w = site_weights(sites);
  at::Tensor sum;
  for (size_t i = 0; i < sites.size(); ++i) {
    const auto term = sites[i].values * w[i];
    sum = sum.defined() ? sum + term : term;
  }
  const auto mean = payload == Payload::Model ? sum : m.global + sum;
  auto target = at::empty_like(m.global);
  m.outer->step(0, mean, target);
  if (!codec) {
    m.global = target;
    return;
  }
  const auto change = target - m.global + m.down_residual;
  m.down_delta = encode_blocks(*codec, change);
  const auto sent = decode_blocks(*codec, m.down_delta, change.numel());
  m.down_residual = change - sent;
  m.global = m.global + sent;
}

}  // namespace fedshard::sites
