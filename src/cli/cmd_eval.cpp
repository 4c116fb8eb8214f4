// `fedshard eval SOURCE --data DIR`: loss, perplexity (and bits per byte for the bytes tokenizer) of a checkpoint
// or a Hugging Face directory on a prepared split. Under mpirun the model is sharded over the ranks (FSDP), each
// rank reading only its slice of the weights.
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "cli/startup.h"
#include "comm/mpi_runtime.h"
#include "comm/topology.h"
#include "data/token_dataset.h"
#include "data/tokenizer.h"
#include "model/llama.h"
#include "parallel/sharded_model.h"
#include "train/evaluator.h"
#include "util/error.h"
#include "util/posix_file.h"
#include "util/safetensors.h"

namespace fedshard::cli {

namespace {

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

// Bytes of text behind the predicted tokens of the first `windows` windows (bytes tokenizer: ids below 256 are
// bytes; BOS/EOS are none).
int64_t target_bytes(const data::TokenDataset& val, int64_t windows) {
  int64_t bytes = 0;
  for (int64_t w = 0; w < windows; ++w) {
    const auto targets = val.batch({w}).narrow(1, 1, val.seq_len());
    bytes += targets.lt(256).sum().item<int64_t>();
  }
  return bytes;
}

struct EvalArgs {
  std::string source, data, split = "val", json = "eval.json", save_logits, strategy = "fsdp";
  int64_t seq_len = 0, batch_size = 4, windows = 0;
};

void add_eval_options(CLI::App& app, EvalArgs& a) {
  add_model_source_option(app, a.source);
  app.add_option("--data", a.data, "directory written by fedshard prepare")->required();
  app.add_option("--split", a.split, "train | val")->check(CLI::IsMember({"train", "val"}))->capture_default_str();
  app.add_option("--seq-len", a.seq_len,
                 "tokens per window (default: the checkpoint's data.seq_len; 1024 for a Hugging Face directory, "
                 "or its max_position_embeddings if smaller)")
      ->check(CLI::PositiveNumber);
  app.add_option("--batch-size", a.batch_size, "windows per forward pass per rank")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--windows", a.windows, "evaluate the first N windows (0 = all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--strategy", a.strategy, "fsdp (the model sharded over all ranks) | ddp (a copy per rank)")
      ->check(CLI::IsMember({"fsdp", "ddp"}))
      ->capture_default_str();
  app.add_option("--json", a.json, "write the result here")->capture_default_str();
  app.add_option("--save-logits", a.save_logits,
                 "also write the first --windows windows' tokens [N, T+1] and logits [N, T, V] (float32) as "
                 "safetensors, to compare with another implementation");
}

// The model and the split, checked on every rank before anything collective.
struct EvalInput {
  ModelSource source;
  std::shared_ptr<data::TokenDataset> val;
  int64_t windows = 0;
};

EvalInput open_eval_input(const EvalArgs& a) {
  EvalInput in;
  run_startup_phase([&] {
    in.source = open_model_source(a.source);
    const auto& cfg = in.source.config;
    const int64_t seq = a.seq_len > 0                  ? a.seq_len
                        : in.source.trained_seq_len > 0 ? in.source.trained_seq_len
                                                        : std::min<int64_t>(1024, cfg.max_seq_len);
    FS_CHECK(seq <= cfg.max_seq_len, "--seq-len ", seq, " exceeds the max_seq_len ", cfg.max_seq_len, " of ",
             in.source.description);
    in.val = std::make_shared<data::TokenDataset>(a.data, a.split, seq, cfg.vocab_size);
    FS_CHECK(in.val->num_windows() > 0, a.data, ": the ", a.split, " split has no window of ", seq + 1, " tokens");
    in.windows = a.windows > 0 ? std::min(a.windows, in.val->num_windows()) : in.val->num_windows();
    FS_CHECK(a.save_logits.empty() || a.windows > 0, "--save-logits needs --windows N (logits of every window ",
             "would be vocab x tokens floats)");
  });
  return in;
}

// --save-logits: the first windows' tokens and logits, written by rank 0.
void save_logits(const EvalArgs& a, const EvalInput& in, parallel::ShardedModel& sharded, int rank) {
  at::NoGradGuard no_grad;
  std::vector<int64_t> ids(static_cast<size_t>(in.windows));
  for (int64_t i = 0; i < in.windows; ++i) ids[static_cast<size_t>(i)] = i;
  const auto tokens = in.val->batch(ids);
  const auto logits = sharded.forward(tokens.narrow(1, 0, in.val->seq_len())).to(at::kFloat).contiguous();
  if (rank == 0) write_safetensors(a.save_logits, {{"tokens", tokens.contiguous()}, {"logits", logits}});
}

// eval.json and the line on stdout; `mem`: every rank's [peak after load, peak, shard bytes].
void report_eval(const EvalArgs& a, const EvalInput& in, const train::EvalResult& result, const at::Tensor& mem) {
  const auto& val = *in.val;
  const bool bytes = val.manifest().tokenizer.spec == "bytes";
  const double bpb = bytes ? result.loss * static_cast<double>(result.tokens) /
                                 (std::log(2.0) * static_cast<double>(target_bytes(val, in.windows)))
                           : 0.0;
  nlohmann::json ranks = nlohmann::json::array();
  for (int64_t r = 0; r < mem.size(0); ++r)
    ranks.push_back({{"rank", r},
                     {"peak_rss_after_load_bytes", static_cast<int64_t>(mem[r][0].item<double>())},
                     {"peak_rss_bytes", static_cast<int64_t>(mem[r][1].item<double>())},
                     {"shard_state_bytes", static_cast<int64_t>(mem[r][2].item<double>())}});
  const nlohmann::json j = {{"source", in.source.description},
                            {"model", in.source.config.name},
                            {"parameters", in.source.config.param_count()},
                            {"data", a.data},
                            {"split", a.split},
                            {"seq_len", val.seq_len()},
                            {"windows", in.windows},
                            {"tokens", result.tokens},
                            {"loss", result.loss},
                            {"ppl", result.ppl},
                            {"bits_per_byte", bytes ? nlohmann::json(bpb) : nlohmann::json(nullptr)},
                            {"strategy", a.strategy},
                            {"world", mem.size(0)},
                            {"ranks", ranks}};
  write_file_atomically(a.json, j.dump(2) + "\n");
  std::printf("%s on %s/%s (%lld windows of %lld tokens): loss %.4f, perplexity %.3f", in.source.description.c_str(),
              a.data.c_str(), a.split.c_str(), static_cast<long long>(in.windows),
              static_cast<long long>(val.seq_len()), result.loss, result.ppl);
  if (bytes) std::printf(", %.4f bits per byte", bpb);
  std::printf("\nwrote %s\n", a.json.c_str());
}

int run_eval(const EvalArgs& a) {
  auto& mpi = comm::MpiRuntime::get();
  const int world = mpi.world_size(), rank = mpi.world_rank();
  const EvalInput in = open_eval_input(a);
  const int host_ranks = mpi.host_rank_and_size().second;
  at::set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / host_ranks));

  comm::Topology topo(comm::Layout::uniform(world, world, a.strategy == "fsdp" ? world : 1), {});
  model::Llama model(in.source.config, at::kFloat, /*materialize=*/false);
  parallel::ShardingOptions opts;
  opts.recompute = false;
  opts.gradients = false;
  parallel::ShardedModel sharded(model, topo.shard(), topo.replica(), opts, topo.layout().pad_multiple(),
                                 in.source.init);
  const int64_t after_load = peak_rss_bytes();
  int64_t shard_bytes = 0;
  for (const auto& u : sharded.units()) shard_bytes += u->flat().shard().nbytes();

  const auto result = train::evaluate(sharded, *in.val, in.windows, a.batch_size, topo.world());
  if (!a.save_logits.empty()) save_logits(a, in, sharded, rank);
  // Every rank's memory, gathered for the report: [peak after load, peak, shard bytes] per rank.
  auto mem = at::zeros({world, 3}, at::kDouble);
  mem[rank][0] = static_cast<double>(after_load);
  mem[rank][1] = static_cast<double>(peak_rss_bytes());
  mem[rank][2] = static_cast<double>(shard_bytes);
  topo.world().all_reduce(mem, comm::ReduceOp::Sum, comm::Traffic::Control)->wait();
  if (rank == 0) report_eval(a, in, result, mem);
  return 0;
}

}  // namespace

Command add_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  Command c;
  c.needs_mpi = true;
  c.app = app.add_subcommand("eval", "Loss and perplexity of a checkpoint or Hugging Face model on a prepared split");
  add_eval_options(*c.app, *a);
  c.run = [a] { return run_eval(*a); };
  return c;
}

}  // namespace fedshard::cli
