#!/usr/bin/env bash
# prepare's throughput on the Brown corpus (6.0 MB, 500 documents), side by side in one run:
#  1. by tokenizer (text files in): fedshard prepare's own seconds with --workers 1 and --workers $WORKERS
#     (default 2), and the reference library encoding the same documents in Python on one thread (HF tokenizers
#     with RAYON_NUM_THREADS=1, tiktoken's encode_ordinary, sentencepiece), load time excluded on both sides;
#  2. by input format (bytes tokenizer, --workers 1): text files, JSONL, JSONL.zst, Parquet (snappy).
# Each figure is the best of REPEATS runs (default 3). Prints a markdown table for docs/perf.md.
# Usage: bench/tokenize.sh [BUILD_DIR]   (FEDSHARD_VENV: the venv of scripts/setup-hf.sh, default .venv;
#        FEDSHARD_BROWN_TARBALL as for scripts/fetch-brown.sh)
set -euo pipefail
build=$(realpath "${1:-build}")
cd "$(dirname "$0")/.."
py=$(realpath "${FEDSHARD_VENV:-.venv}")/bin/python3
repeats=${REPEATS:-3}
export PYTHONDONTWRITEBYTECODE=1
workers=${WORKERS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash scripts/fetch-brown.sh "$work/brown" >/dev/null

# Inputs and a Llama-2-style SentencePiece model, made by the real libraries.
"$py" - "$work" <<'EOF'
import glob, json, os, sys
import pyarrow as pa, pyarrow.parquet as pq
import sentencepiece as spm
work = sys.argv[1]
docs = [open(p, encoding="utf-8").read() for p in sorted(glob.glob(os.path.join(work, "brown", "*", "*.txt")))]
os.makedirs(os.path.join(work, "jsonl"))
with open(os.path.join(work, "jsonl", "brown.jsonl"), "w", encoding="utf-8") as f:
    for d in docs:
        f.write(json.dumps({"text": d}) + "\n")
os.makedirs(os.path.join(work, "parquet"))
pq.write_table(pa.table({"text": docs}), os.path.join(work, "parquet", "brown.parquet"), compression="snappy")
lines = [l for d in docs for l in d.splitlines() if l.strip()]
spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=os.path.join(work, "llama2-style"),
                               vocab_size=8000, model_type="bpe", byte_fallback=True, split_digits=True,
                               normalization_rule_name="identity", remove_extra_whitespaces=False, minloglevel=2)
# A larger vocabulary (32,000 tokens: what Brown's 6 MB can train; Llama 3 has 128,256) with Llama 3's
# pre-tokenizer, by the real tokenizers trainer, and both vocabularies' ranks as tiktoken files (as
# tests/tiktoken_tokenizer.py writes them).
import base64
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
sys.path.insert(0, "tests")
from tiktoken_tokenizer import FIXTURE, LLAMA3, ranks_of
big = Tokenizer(models.BPE(ignore_merges=True))
big.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
                                             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
big.decoder = decoders.ByteLevel()
big.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=32000, show_progress=False,
                                                  special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
big.save(os.path.join(work, "llama3-style-32k.json"))
for name, source in (("llama3-style", FIXTURE), ("llama3-style-32k", os.path.join(work, "llama3-style-32k.json"))):
    with open(os.path.join(work, name + ".tiktoken"), "w") as f:
        for token, rank in ranks_of(source).items():
            f.write(f"{base64.b64encode(token).decode()} {rank}\n")
EOF
mkdir -p "$work/zst" && zstd -q -19 "$work/jsonl/brown.jsonl" -o "$work/zst/brown.jsonl.zst"

# fedshard prepare's seconds (its summary line), best of $repeats.
prepare_s() {
  local input=$1 tok=$2 w=$3 best=""
  for _ in $(seq "$repeats"); do
    rm -rf "$work/out"
    s=$("$build/fedshard" prepare --input "$input" --out "$work/out" --tokenizer "$tok" --val-fraction 0 --workers "$w" |
      awk '$2 == "s" && $3 == "on" {print $1}')
    best=$(awk -v a="$s" -v b="$best" 'BEGIN {print (b == "" || a < b) ? a : b}')
  done
  echo "$best"
}
tokens() { awk '/train:/ {print $4}' < <("$build/fedshard" prepare --input "$1" --out "$work/out" --tokenizer "$2" --val-fraction 0); }

# The reference library's seconds on the same documents, one thread, best of $repeats.
library_s() {
  RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false "$py" - "$work" "$1" "$repeats" <<'EOF'
import glob, os, sys, time
work, spec, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
docs = [open(p, encoding="utf-8").read() for p in sorted(glob.glob(os.path.join(work, "brown", "*", "*.txt")))]
kind, path = spec.split(":", 1)
if kind == "hf":
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(path)
    tok.encode_special_tokens = True
    encode = lambda: tok.encode_batch(docs, add_special_tokens=False)
elif kind == "tiktoken":
    import base64, tiktoken
    sys.path.insert(0, "tests")
    from tiktoken_tokenizer import LLAMA3
    ranks = {base64.b64decode(t): int(r) for t, r in (line.split() for line in open(path))}
    enc = tiktoken.Encoding(name="bench", pat_str=LLAMA3, mergeable_ranks=ranks, special_tokens={})
    encode = lambda: [enc.encode_ordinary(d) for d in docs]
else:
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=path)
    encode = lambda: [sp.encode(d) for d in docs]
best = None
for _ in range(repeats):
    t = time.perf_counter()
    encode()
    best = min(best or 1e9, time.perf_counter() - t)
print(f"{best:.3f}")
EOF
}

mb=$(du -sb --apparent-size "$work/brown" | awk '{printf "%.2f", $1 / 1e6}')
echo "## prepare on Brown ($mb MB of text, 500 documents), best of $repeats"
echo
echo "| tokenizer | tokens | fedshard prepare s, 1 worker | MB/s | $workers workers s | speed-up | library, one thread, s | library | fedshard (1 worker) / library time |"
echo "|---|---:|---:|---:|---:|---:|---:|---|---:|"
fixtures=tests/fixtures/hf_tokenizers
for spec in bytes "hf:$fixtures/gpt2-style.json" "hf:$fixtures/llama3-style.json" "tiktoken:$work/llama3-style.tiktoken" \
  "hf:$work/llama3-style-32k.json" "tiktoken:$work/llama3-style-32k.tiktoken" "sentencepiece:$work/llama2-style.model"; do
  ours=$(prepare_s "$work/brown" "$spec" 1)
  many=$(prepare_s "$work/brown" "$spec" "$workers")
  n=$(tokens "$work/brown" "$spec")
  case $spec in
    bytes) lib="-"; name="-"; ratio="-" ;;
    hf:*) lib=$(library_s "$spec"); name="tokenizers $("$py" -c 'import tokenizers; print(tokenizers.__version__)')" ;;
    tiktoken:*) lib=$(library_s "$spec"); name="tiktoken $("$py" -c 'import tiktoken; print(tiktoken.__version__)')" ;;
    *) lib=$(library_s "$spec"); name="sentencepiece $("$py" -c 'import sentencepiece; print(sentencepiece.__version__)')" ;;
  esac
  [ "$lib" = "-" ] || ratio=$(awk -v a="$ours" -v b="$lib" 'BEGIN {printf "%.2f", a / b}')
  label=${spec/$work\//}
  label=${label/$fixtures\//}
  echo "| $label | $n | $ours | $(awk -v m="$mb" -v s="$ours" 'BEGIN {printf "%.1f", m / s}') | $many |" \
    "$(awk -v a="$ours" -v b="$many" 'BEGIN {printf "%.2f", a / b}') | $lib | $name | $ratio |"
done
echo
echo "| input (bytes tokenizer, 1 worker) | fedshard prepare s | MB/s of text |"
echo "|---|---:|---:|"
for input in "text files:$work/brown" "JSONL:$work/jsonl" "JSONL.zst:$work/zst" "Parquet (snappy):$work/parquet"; do
  s=$(prepare_s "${input#*:}" bytes 1)
  echo "| ${input%%:*} | $s | $(awk -v m="$mb" -v s="$s" 'BEGIN {printf "%.1f", m / s}') |"
done
