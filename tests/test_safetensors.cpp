// safetensors against its specification: a file assembled byte by byte here must read back; fedshard's
// writer must produce what the spec says; malformed files are rejected with the file named. Also the Hugging
// Face name and config mapping.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/config.h"
#include "model/hf_adapter.h"
#include "util/error.h"
#include "util/posix_file.h"
#include "util/safetensors.h"

using namespace fedshard;
namespace fs = std::filesystem;

namespace {

fs::path tmp(const std::string& name) {
  return fs::temp_directory_path() / ("fedshard-st-" + std::to_string(::getpid()) + "-" + name);
}

// 8-byte little-endian header length, the header, the buffer.
void write_raw(const fs::path& p, const std::string& header, const std::string& buffer) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  std::ofstream(p, std::ios::binary) << bytes << header << buffer;
}

std::string floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

}  // namespace

TEST(Safetensors, ReadsAFileBuiltFromTheSpec) {
  const auto p = tmp("spec.safetensors");
  // Two tensors, the second first in the buffer, plus metadata; the header is not padded (allowed).
  const std::string header =
      R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},"__metadata__":{"format":"pt"}})";
  write_raw(p, header, floats({9.5f, -1.0f}) + floats({1, 2, 3, 4}));
  const SafetensorsFile f(p.string());
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const auto a = f.tensor("a");
  EXPECT_EQ(a.sizes().vec(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(a[1][0].item<float>(), 3.0f);
  EXPECT_EQ(f.tensor("b")[0].item<float>(), 9.5f);
  fs::remove(p);
}

TEST(Safetensors, WriterFollowsTheSpec) {
  const auto p = tmp("w.safetensors");
  auto x = at::arange(6, at::kFloat).view({2, 3});
  auto y = at::tensor({1.5, 2.5}, at::kDouble);
  write_safetensors(p.string(), {{"x", x}, {"y", y.to(at::kBFloat16)}}, {{"step", "7"}});
  const std::string bytes = read_file(p.string());
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u);  // buffer aligned
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["x"]["dtype"], "F32");
  EXPECT_EQ(header["x"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(header["y"]["dtype"], "BF16");
  EXPECT_EQ(header["__metadata__"]["step"], "7");
  EXPECT_EQ(bytes.size(), 8 + n + 24 + 4);
  float third;
  std::memcpy(&third, bytes.data() + 8 + n + 8, 4);
  EXPECT_EQ(third, 2.0f);
  EXPECT_TRUE(at::equal(SafetensorsFile(p.string()).tensor("x"), x));
  EXPECT_EQ(file_checksum(p.string()), write_safetensors(p.string(), {{"x", x}, {"y", y.to(at::kBFloat16)}}, {{"step", "7"}}));
  fs::remove(p);
}

TEST(Safetensors, MalformedFilesAreRejectedWithTheFileNamed) {
  const auto p = tmp("bad.safetensors");
  auto expect_error = [&](const std::string& header, const std::string& buffer, const std::string& needle) {
    write_raw(p, header, buffer);
    try {
      SafetensorsFile f(p.string());
      ADD_FAILURE() << "accepted: " << header;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    }
  };
  expect_error(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", floats({1, 2}), "outside the file");
  expect_error(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", floats({1, 2}), "needing 12");
  expect_error(R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", floats({1, 2}), "unknown dtype");
  expect_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
               floats({1, 2}), "overlap");
  expect_error("{not json", "", "not valid JSON");
  std::ofstream(p, std::ios::binary) << std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) << "{}";
  EXPECT_THROW(SafetensorsFile(p.string()), Error);  // header length larger than the file
  fs::remove(p);
}

TEST(HfAdapter, NamesRoundTripAndConfigMatchesTheArchitecture) {
  for (const std::string n : {"tok_embeddings.weight", "norm.weight", "output.weight", "layers.0.attention.wq.weight",
                              "layers.31.feed_forward.w2.weight", "layers.7.ffn_norm.weight"})
    EXPECT_EQ(model::from_hf_name(model::to_hf_name(n)), n);
  EXPECT_EQ(model::to_hf_name("layers.3.feed_forward.w1.weight"), "model.layers.3.mlp.gate_proj.weight");
  EXPECT_EQ(model::to_hf_name("layers.3.attention_norm.weight"), "model.layers.3.input_layernorm.weight");
  EXPECT_THROW(model::to_hf_name("layers.3.bogus.weight"), Error);
  EXPECT_THROW(model::from_hf_name("model.layers.3.mlp.bogus.weight"), Error);
  const auto c = model::preset("llama3.1-8b");
  const auto j = model::hf_config(c, "bfloat16", {{128000}, {128001}});
  EXPECT_EQ(j["intermediate_size"], 14336);
  EXPECT_EQ(j["num_key_value_heads"], 8);
  EXPECT_EQ(j["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(j["eos_token_id"], 128001);
  EXPECT_EQ(model::architecture_difference(model::model_from_hf_config(j, "x", "hf"), c), "");
}

// Meta-Llama-3.1-8B's published config.json (transformers 4.43), and the same in transformers 5's form.
TEST(HfAdapter, PublishedConfigGivesThePreset) {
  auto published = nlohmann::json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
    "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})");
  const auto c = model::preset("llama3.1-8b");
  EXPECT_EQ(model::architecture_difference(model::model_from_hf_config(published, "x", "hf"), c), "");
  EXPECT_EQ(model::hf_token_ids(published).eos, std::vector<int64_t>{128001});
  auto v5 = published;
  v5["rope_parameters"] = v5["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  EXPECT_EQ(model::architecture_difference(model::model_from_hf_config(v5, "x", "hf"), c), "");
  auto unscaled = published;
  unscaled["rope_scaling"] = nullptr;
  EXPECT_EQ(model::architecture_difference(model::model_from_hf_config(unscaled, "x", "hf"), c), "rope scaling 0 vs 1");
  auto wider = published;
  wider["intermediate_size"] = 14000;
  EXPECT_EQ(model::architecture_difference(model::model_from_hf_config(wider, "x", "hf"), c),
            "ffn hidden 14000 vs 14336");

  const std::vector<std::pair<std::string, nlohmann::json>> refused = {
      {"model_type", "mistral"},     {"hidden_act", "gelu"},  {"attention_bias", true}, {"mlp_bias", true},
      {"head_dim", 64},              {"attention_dropout", 0.1}, {"pretraining_tp", 2},
      {"rope_scaling", nlohmann::json::parse(R"({"rope_type": "yarn", "factor": 4.0})")}};
  for (const auto& [key, value] : refused) {
    auto bad = published;
    bad[key] = value;
    try {
      model::model_from_hf_config(bad, "DIR/config.json", "hf");
      ADD_FAILURE() << key << " = " << value.dump() << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("DIR/config.json: " + key), std::string::npos) << e.what();
    }
  }
}
