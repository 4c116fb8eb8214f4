#include "sites/identity.h"

#include "util/error.h"

namespace fedshard::sites {

nlohmann::json Identity::to_json() const {
  return {{"model", model}, {"tokenizer", tokenizer}, {"codec", codec}, {"block", block}, {"values", values}, {"total", total}};
}

Identity Identity::from_json(const nlohmann::json& j) {
  try {
    Identity i;
    i.model = j.at("model").get<std::string>();
    i.tokenizer = j.at("tokenizer").get<std::string>();
    i.codec = j.at("codec").get<std::string>();
    i.block = j.at("block").get<int64_t>();
    // Written before topk_values existed: its default.
    i.values = j.contains("values") ? j.at("values").get<std::string>() : federation::sparse_codec(i.codec) ? "means" : "";
    i.total = j.at("total").get<int64_t>();
    FS_CHECK(i.total > 0 && i.block >= 0, "a model of ", i.total, " elements, block ", i.block);
    FS_CHECK(federation::sparse_codec(i.codec) ? i.values == "means" || i.values == "levels" : i.values.empty(),
             "topk values '", i.values, "' for codec ", i.codec);
    return i;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(cat("a malformed federation identity (", e.what(), ")"));
  }
}

std::string Identity::differs(const Identity& site) const {
  if (model != site.model || total != site.total)
    return cat("model: the server's is ", model, " (", total, " elements), the site's ", site.model, " (", site.total,
               " elements)");
  if (tokenizer != site.tokenizer) return cat("tokenizer: the server's is ", tokenizer, ", the site's ", site.tokenizer);
  if (codec != site.codec || block != site.block || values != site.values)
    return cat("federation.compress: the server's is ", codec, " (block ", block, values.empty() ? "" : ", " + values,
               "), the site's ", site.codec, " (block ", site.block, site.values.empty() ? "" : ", " + site.values, ")");
  return "";
}

federation::Codec Identity::make_codec() const {
  return federation::Codec(codec, block, values.empty() ? federation::TopkValues::Means : federation::parse_topk_values(values));
}

}  // namespace fedshard::sites
