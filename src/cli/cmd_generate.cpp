// `fedshard generate SOURCE --prompt TEXT`: samples a continuation from a checkpoint or a Hugging Face directory
// with a KV cache (one position of work per new token); greedy at temperature 0, else temperature and nucleus
// (top-p) sampling from a seeded generator, so a run repeats exactly.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <set>
#include <thread>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "data/tokenizer.h"
#include "model/llama.h"
#include "util/error.h"
#include "util/int_list.h"
#include "util/posix_file.h"

namespace fedshard::cli {

namespace {

int64_t next_token(const at::Tensor& logits, double temperature, double top_p, at::Generator& gen) {
  if (temperature == 0) return logits.argmax().item<int64_t>();
  auto probs = at::softmax(logits.to(at::kDouble) / temperature, -1);
  // Nucleus: the most likely tokens whose mass reaches top_p (at least one), renormalized.
  const auto [sorted, order] = probs.sort(/*dim=*/-1, /*descending=*/true);
  const auto before = sorted.cumsum(-1) - sorted;
  const auto kept = sorted.masked_fill(before.ge(top_p), 0.0);
  const auto pick = at::multinomial(kept / kept.sum(), 1, /*replacement=*/false, gen).item<int64_t>();
  return order[pick].item<int64_t>();
}

struct GenerateArgs {
  std::string source, prompt, prompt_ids, tokenizer, json;
  int64_t max_new_tokens = 64;
  double temperature = 0.8, top_p = 0.95;
  uint64_t seed = 0;
  bool ignore_eos = false;
};

void add_generate_options(CLI::App& app, GenerateArgs& a) {
  add_model_source_option(app, a.source);
  auto* prompt = app.add_option("--prompt", a.prompt, "text to continue (encoded after the tokenizer's BOS)");
  auto* ids = app.add_option("--prompt-ids", a.prompt_ids, "token ids to continue, e.g. 256,72,101 (BOS not added)");
  prompt->excludes(ids);
  app.add_option("--max-new-tokens", a.max_new_tokens, "tokens to generate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--temperature", a.temperature, "0 = greedy")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--top-p", a.top_p, "nucleus sampling mass, in (0, 1]")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--seed", a.seed, "sampling seed")->capture_default_str();
  app.add_flag("--ignore-eos", a.ignore_eos, "keep generating past the end-of-sequence token");
  app.add_option("--tokenizer", a.tokenizer, std::string(data::kTokenizerSpecs) + " (default: the source's)");
  app.add_option("--json", a.json, "also write prompt ids, generated ids and text here");
}

// The prompt's ids: --prompt-ids as given, or BOS and --prompt's tokens.
std::vector<int64_t> prompt_ids_of(const GenerateArgs& a, const data::Tokenizer* tok, int64_t vocab) {
  std::vector<int64_t> ids;
  if (!a.prompt_ids.empty()) {
    for (int64_t id : parse_int_list(a.prompt_ids, "--prompt-ids")) {
      FS_CHECK(id >= 0 && id < vocab, "--prompt-ids: token ", id, " is outside the vocabulary of ", vocab);
      ids.push_back(id);
    }
    return ids;
  }
  ids.push_back(tok->bos_id());
  for (uint32_t id : tok->encode(a.prompt)) ids.push_back(id);
  return ids;
}

// Up to max_new_tokens ids after the prompt, one position of work each, ending at a stop id unless --ignore-eos;
// `seconds`: the time they took (the model's loading not counted).
std::vector<int64_t> sample(const GenerateArgs& a, const ModelSource& source, const std::vector<int64_t>& prompt_ids,
                            const std::set<int64_t>& stop, double& seconds) {
  at::NoGradGuard no_grad;
  model::Llama model(source.config, at::kFloat);
  for (const auto& p : model.named_parameters()) source.init(p, 0, p.tensor->view({-1}));
  auto gen = at::detail::createCPUGenerator(a.seed);
  model::KvCache cache(static_cast<int64_t>(prompt_ids.size()) + a.max_new_tokens);
  const auto t0 = std::chrono::steady_clock::now();
  auto logits = model.forward(at::tensor(prompt_ids, at::kLong).unsqueeze(0), cache);
  std::vector<int64_t> out;
  while (static_cast<int64_t>(out.size()) < a.max_new_tokens) {
    const int64_t id = next_token(logits[0][logits.size(1) - 1], a.temperature, a.top_p, gen);
    out.push_back(id);
    if (!a.ignore_eos && stop.count(id)) break;
    if (static_cast<int64_t>(out.size()) == a.max_new_tokens) break;
    logits = model.forward(at::tensor(std::vector<int64_t>{id}, at::kLong).unsqueeze(0), cache);
  }
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

// The continuation's text, decoded after the prompt's tokens less their text: a SentencePiece decoder drops the
// space before a text's first word, and the continuation's first word is not first.
std::string continuation_text(const data::Tokenizer& tok, const std::vector<int64_t>& prompt_ids,
                              const std::vector<int64_t>& out, bool text_prompt) {
  std::string text = tok.decode(std::vector<uint32_t>(out.begin(), out.end()));
  if (!text_prompt) return text;
  std::vector<uint32_t> ids(prompt_ids.begin() + 1, prompt_ids.end());  // after BOS
  const std::string before = tok.decode(ids);
  ids.insert(ids.end(), out.begin(), out.end());
  const std::string all = tok.decode(ids);
  return all.compare(0, before.size(), before) == 0 ? all.substr(before.size()) : text;
}

int run_generate(const GenerateArgs& a) {
  FS_CHECK(!a.prompt.empty() || !a.prompt_ids.empty(), "generate needs --prompt TEXT or --prompt-ids IDS");
  FS_CHECK(a.top_p > 0, "--top-p must be in (0, 1], got ", a.top_p);
  const auto source = open_model_source(a.source);
  const auto& cfg = source.config;
  std::unique_ptr<data::Tokenizer> tok;
  if (!a.prompt.empty() || !a.tokenizer.empty() || !source.tokenizer.empty())
    tok = data::make_tokenizer(tokenizer_spec(source, a.tokenizer));
  FS_CHECK(!tok || tok->vocab_size() <= cfg.vocab_size, "tokenizer ", tok->spec(), " has ", tok->vocab_size(),
           " tokens but ", source.description, " has a vocabulary of ", cfg.vocab_size);
  const auto prompt_ids = prompt_ids_of(a, tok.get(), cfg.vocab_size);
  const int64_t total = static_cast<int64_t>(prompt_ids.size()) + a.max_new_tokens;
  FS_CHECK(total <= cfg.max_seq_len, "prompt and --max-new-tokens need ", total, " positions; ", source.description,
           " has ", cfg.max_seq_len);
  std::set<int64_t> stop(source.ids.eos.begin(), source.ids.eos.end());
  if (tok) stop.insert(tok->eos_id());

  at::set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  double seconds = 0;
  const auto out = sample(a, source, prompt_ids, stop, seconds);

  std::string text;
  if (tok) {
    text = continuation_text(*tok, prompt_ids, out, !a.prompt.empty());
    std::cout << a.prompt << text << "\n";
  } else {
    for (size_t i = 0; i < out.size(); ++i) std::cout << (i ? "," : "") << out[i];
    std::cout << "\n";
  }
  std::cout.flush();  // the text before the timing line
  std::fprintf(stderr, "generated %zu tokens in %.2f s (%.1f tokens/s) from %s\n", out.size(), seconds,
               static_cast<double>(out.size()) / seconds, source.description.c_str());
  if (!a.json.empty())
    write_file_atomically(a.json, nlohmann::json{{"source", source.description},
                                                 {"prompt_ids", prompt_ids},
                                                 {"ids", out},
                                                 {"text", text},
                                                 {"temperature", a.temperature},
                                                 {"top_p", a.top_p},
                                                 {"seed", a.seed},
                                                 {"seconds", seconds}}
                                          .dump(2) + "\n");
  return 0;
}

}  // namespace

Command add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  Command c;
  c.app = app.add_subcommand("generate", "Sample text from a checkpoint or Hugging Face model (KV cache)");
  add_generate_options(*c.app, *a);
  c.run = [a] { return run_generate(*a); };
  return c;
}

}  // namespace fedshard::cli
