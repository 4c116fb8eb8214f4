// The resolved training configuration: TOML file, then command-line overrides, then validation. Every key
// has one name ("section.key") used by the file, by `--set section.key=value` and by config.json.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fedshard::train {

struct TrainConfig {
  // [model]
  std::string model;  // preset; empty: model.init_from's config.json, else small
  int64_t vocab_size = 0;                 // 0: the preset's, else the tokenizer's; >= the tokenizer's (padding)
  int64_t n_layers = 0;                   // 0: the preset's
  std::string tie_embeddings = "preset";  // preset | true | false
  std::string dtype = "float32";          // master weights and optimizer state: float32 | float64
  std::string compute_dtype = "float32";  // gathered parameters and activations: float32 | bfloat16 | float64
  std::string init_from;                  // Hugging Face Llama directory (config.json + model.safetensors)
  std::string device = "cpu";             // cpu | cuda (rank r uses GPU local_rank % GPUs on its host)
  std::string attention = "auto";         // auto (sdpa where LibTorch has it) | sdpa | math
  std::string kernels = "aten";           // norms, RoPE, SwiGLU gate: aten | fused (src/kernels)
  std::string matmul_dtype = "compute";   // the blocks' linear layers: compute | float8 (GPUs of capability 8.9+)
  std::string cross_entropy = "chunked";  // the head's loss: chunked | chunked:ROWS | full (the logits at once)
  // [data]
  std::string data_dir = "data/brown";
  int64_t seq_len = 256;
  int64_t batch_size = 8;  // sequences per rank per step
  std::string partition = "iid";  // iid | by-source | dirichlet:ALPHA (across federation groups)
  bool pin_memory = true;         // cuda: pinned host batch, copied to the device without blocking
  // [optim]
  std::string optimizer = "adamw";  // adamw | sgd
  double lr = 3e-4;
  double min_lr_ratio = 0.1;  // cosine floor as a fraction of lr
  int64_t warmup_steps = -1;  // -1: 10% of steps
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  bool decay_norms_and_embeddings = true;  // torchtitan and the paper decay everything
  double grad_clip = 1.0;  // 0: off
  double momentum = 0.0;   // sgd only
  std::string fused = "auto";  // adamw in one fused kernel: auto (where LibTorch has it) | on | off
  // [parallel]
  std::string strategy = "fsdp";  // ddp | fsdp | hsdp | fl-ddp | fl-fsdp | fl-hsdp
  int64_t group_size = 0;         // S (fl-*); 0: whole world
  std::vector<int> groups;        // S_g of groups of different sizes (fl-*); empty: group_size
  int64_t shard_size = 0;         // H (hsdp, fl-hsdp)
  int64_t sync_every = 8;         // K (fl-*)
  bool reshard_after_forward = true;
  std::string activation_checkpointing = "auto";  // auto (on when parameters are sharded) | on | off
  int64_t ranks_per_node = 0;  // 0: detect; >0 emulate nodes of that many ranks
  std::string emulate;         // virtual layout played by the real ranks: "" | W | GxS (parallel/emulation.h)
  int64_t threads = 0;         // intra-op threads per rank; 0: cores per node / ranks per node
  std::string backend = "auto";  // auto (nccl for cuda in a CUDA build, else mpi) | mpi | nccl
  std::string reduce_dtype = "float32";  // gradient reductions and the federation average: float32 | bfloat16 | float64
  // [federation]
  std::string outer_optimizer = "fedavg";  // fedavg | nesterov
  double outer_lr = 1.0;
  double outer_momentum = 0.9;
  std::string inner_state = "keep";  // keep | average | reset
  std::string overlap = "none";      // none | delayed | streaming:F (federation/schedule.h)
  std::string compress = "none";     // none | bf16 | int8 | int4 | topk:D: a group's delta on the wire (federation/codec.h)
  int64_t compress_block = 256;      // elements per block of the blockwise codecs
  std::string topk_values = "means"; // topk:D's kept values: means | levels (federation/codec.h)
  double ef_decay = 1.0;             // error feedback's decay per round (federation/aggregator.h)
  std::string sparse_mean = "union"; // topk:D: union | sparsified (federation/aggregator.h)
  bool eval_backlog = false;         // the last evaluation also evaluates the global model plus the residuals
  std::string round = "steps";       // steps | steps:K | seconds:T (federation/schedule.h)
  std::string normalize = "none";    // none | steps (FedNova: deltas divided by the steps each group took)
  std::string clock = "wall";        // wall | emulated:SECONDS: what time-based rounds measure a step with
  bool eval_after_sync = true;       // evaluate the global model after every aggregation
  bool eval_group_model = false;     // also evaluate group 0's local model before each aggregation
  bool audit = false;                // each rank writes its checksum of the global model after every round
  int64_t rejoin_after = 0;          // rounds after a lost group (in-job recovery) until it is restarted; 0: never
  // [sites] across facilities (DESIGN.md "Sites"): this job is one site, its rounds through the round server
  std::string site;         // sites.name: the site, as its certificate names it
  std::string server;       // sites.server: HOST:PORT of each round server shard, in order (comma-separated); "" = none
  std::string tls_cert, tls_key, tls_ca;  // sites.tls_*: PEM files (mutual TLS)
  std::string server_name;  // sites.server_name: the name the server's certificate carries (default: each host)
  double patience = 600;    // sites.patience: seconds a shard may be unreachable before the site gives up
  std::string site_data;    // sites.data: "I/N": read the data as group I of N equal groups of one job would
  // [network] link emulation per tier: "BANDWIDTH,LATENCY" (e.g. "1Gbit/s,500us"); empty = real network
  std::string link_node;
  std::string link_inter_node;
  std::string link_inter_group;
  // [eval]
  int64_t eval_every = 50;     // 0: only at the end
  int64_t eval_windows = 256;  // validation windows per evaluation; 0: all
  // [checkpoint]
  int64_t checkpoint_every = 0;  // steps between checkpoints; 0: only at the end
  int64_t checkpoint_keep = 3;   // complete checkpoints kept
  // [train]
  std::string resume;  // "" (fresh run) | auto (RUN_DIR/checkpoints/latest if any) | a checkpoint directory
  std::vector<int> resume_groups;  // ids of this run's groups; resuming onto another layout: which continue
  int64_t steps = 100;
  bool force = false;  // run even when the preflight predicts the job does not fit in memory
  int64_t grad_accum = 1;  // micro-batches of data.batch_size per rank per optimizer step
  uint64_t seed = 0;
  std::string out = "runs/latest";
  int64_t log_every = 1;
  std::string tensorboard;  // directory of TensorBoard event files (rank 0 writes them); empty = none
  double peak_flops = 0;  // per rank, for MFU; 0: measure a float32 matmul at start-up
  bool defer_host_sync = true;  // loss and grad norm stay on the device until the step's log line
  std::string profile_steps;  // "A:B": LibTorch's profiler over steps A..B (train/step_profiler.h); "" = off
  std::string slow;  // emulated stragglers: RANK=FACTOR,group:G=FACTOR (parallel/slow_ranks.h)

  nlohmann::json to_json() const;
};

// A value set on the command line, applied after the file; origin names the flag in error messages.
struct Override {
  std::string key;  // "optim.lr"
  std::string value;
  std::string origin;  // "--lr"
};
using Overrides = std::vector<Override>;

// Loads `path` (empty: defaults only), applies overrides, validates. Throws fedshard::Error naming the file,
// key or flag at fault: unknown keys, wrong types, out-of-range values.
TrainConfig load_config(const std::string& path, const Overrides& overrides);

// All keys with their descriptions, for --help.
std::vector<std::pair<std::string, std::string>> config_keys();

}  // namespace fedshard::train
