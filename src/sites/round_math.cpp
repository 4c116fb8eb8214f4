#include "sites/round_math.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>

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

Aggregation Aggregation::parse(const std::string& spec) {
  Aggregation a;
  if (spec == "mean") return a;
  if (spec == "median") {
    a.kind = Kind::Median;
    return a;
  }
  const std::string prefix = "trimmed:";
  FS_CHECK(spec.rfind(prefix, 0) == 0, "--aggregate must be mean, trimmed:F or median, not '", spec, "'");
  size_t used = 0;
  try {
    a.trim = std::stod(spec.substr(prefix.size()), &used);
  } catch (const std::exception&) {
    used = 0;
  }
  FS_CHECK(used > 0 && used == spec.size() - prefix.size() && a.trim >= 0 && a.trim < 0.5, "--aggregate ", spec,
           ": F must be a fraction in [0, 0.5) (of the sites dropped at each end, per coordinate)");
  a.kind = Kind::Trimmed;
  return a;
}

int64_t Aggregation::dropped(int64_t n) const {
  switch (kind) {
    case Kind::Mean: return 0;
    case Kind::Median: return (n - 1) / 2;
    case Kind::Trimmed: return std::min((n - 1) / 2, static_cast<int64_t>(trim * static_cast<double>(n)));
  }
  return 0;
}

double delta_norm2(Payload payload, const at::Tensor& values, const at::Tensor& global) {
  at::NoGradGuard no_grad;
  const auto d = (payload == Payload::Model ? values - global : values).to(at::kDouble);
  return d.dot(d).item<double>();
}

namespace {

// Site i's delta from the global model, times its clip.
at::Tensor delta_of(const SiteData& s, Payload payload, const at::Tensor& global) {
  const auto d = payload == Payload::Model ? s.values - global : s.values;
  return s.scale == 1 ? d : d * s.scale;
}

// The round's mean model before the outer step.
at::Tensor combine(const ShardModel& m, Payload payload, const std::vector<SiteData>& sites, const Aggregation& a) {
  if (sites.empty()) return m.global;  // every site refused (the norm bound): the outer step sees no change
  const bool clipped = std::any_of(sites.begin(), sites.end(), [](const SiteData& s) { return s.scale != 1; });
  if (a.kind == Aggregation::Kind::Mean) {
    // The weighted sum, one site after the other in name order: with two sites the in-job plain round's sum (its
    // ring adds two buffers, an addition that does not depend on the order). A clipped site's model is the global
    // one plus its clipped delta.
    const auto w = site_weights(sites);
    at::Tensor sum;
    for (size_t i = 0; i < sites.size(); ++i) {
      at::Tensor v;
      if (payload == Payload::Model)
        v = clipped ? m.global + delta_of(sites[i], payload, m.global) : sites[i].values;
      else
        v = delta_of(sites[i], payload, m.global);
      const auto term = v * w[i];
      sum = sum.defined() ? sum + term : term;
    }
    return payload == Payload::Model ? sum : m.global + sum;
  }
  // Coordinate-wise: the sites' deltas sorted per element, the extremes dropped, the rest averaged unweighted.
  std::vector<at::Tensor> deltas;
  for (const auto& s : sites) deltas.push_back(delta_of(s, payload, m.global));
  const int64_t n = static_cast<int64_t>(sites.size()), cut = a.dropped(n);
  const auto sorted = std::get<0>(at::stack(deltas).sort(0));
  return m.global + sorted.narrow(0, cut, n - 2 * cut).mean(0);
}

}  // namespace

void apply_round(ShardModel& m, int64_t round, Payload payload, const std::vector<SiteData>& sites,
                 const std::optional<federation::Codec>& codec, const Aggregation& aggregation) {
  at::NoGradGuard no_grad;
  if (round == 0) {
    FS_ASSERT(!sites.empty(), "round 0 without a site");
    m.global = sites.front().values.clone();
    return;
  }
  const auto mean = combine(m, payload, sites, aggregation);
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
