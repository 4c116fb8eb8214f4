// `fedshard export --format safetensors CHECKPOINT --out DIR`: the checkpoint's (global) model as a Hugging
// Face Llama directory: model.safetensors with HF tensor names and config.json.
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "model/hf_adapter.h"
#include "train/checkpoint.h"
#include "util/error.h"
#include "util/posix_file.h"
#include "util/safetensors.h"

namespace fedshard::cli {

Command add_export(CLI::App& app) {
  struct Args {
    std::string checkpoint;
    std::string out;
    std::string format = "safetensors";
    std::string dtype = "float32";
  };
  auto a = std::make_shared<Args>();
  Command c;
  c.app = app.add_subcommand("export", "Write a checkpoint's model as a Hugging Face Llama directory");
  c.app->add_option("checkpoint", a->checkpoint, "checkpoint directory, or a run directory (its latest checkpoint)")
      ->required();
  c.app->add_option("--out", a->out, "output directory")->required();
  c.app->add_option("--format", a->format, "safetensors")->check(CLI::IsMember({"safetensors"}))->capture_default_str();
  c.app->add_option("--dtype", a->dtype, "float32 | bfloat16")
      ->check(CLI::IsMember({"float32", "bfloat16"}))
      ->capture_default_str();
  c.run = [a] {
    namespace fs = std::filesystem;
    std::string dir = a->checkpoint;
    if (!fs::exists(fs::path(dir) / "meta.json")) {
      auto latest = train::find_checkpoint("auto", dir);
      FS_CHECK(latest.has_value(), dir, " is neither a checkpoint nor a run directory with checkpoints");
      dir = *latest;
    }
    const auto cfg = train::checkpoint_model(dir);
    const auto meta = train::load_checkpoint_meta(dir, cfg, /*verify_all_files=*/true, -1);
    const auto params = train::consolidated_parameters(meta);
    const auto type = a->dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& [name, t] : params) tensors.emplace_back(model::to_hf_name(name), t.to(type).contiguous());
    ensure_writable_dir(a->out);
    write_safetensors((fs::path(a->out) / "model.safetensors").string(), tensors, {{"format", "pt"}});
    write_file_atomically((fs::path(a->out) / "config.json").string(), model::hf_config(cfg, a->dtype).dump(2) + "\n");
    std::cout << "exported " << dir << " (step " << meta.step << ", model " << cfg.name << ", "
              << model::with_commas(cfg.param_count()) << " parameters) to " << a->out << "\n";
    return 0;
  };
  return c;
}

}  // namespace fedshard::cli
