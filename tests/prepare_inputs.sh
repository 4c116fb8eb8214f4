#!/usr/bin/env bash
# prepare's JSONL inputs against text files and Python's own reading of the same documents: the same documents
# as text files, as JSONL (some lines ASCII-escaped), gzip'ed and zstd'ed by the real CLIs, and split over
# files matched by a glob give byte-identical token shards, and as many tokens as Python counts bytes (+ EOS);
# --source-key sorts records into the sources the records name; bad inputs end with one error line and leave
# no output. Usage: prepare_inputs.sh FEDSHARD_BINARY
set -u
bin=$(realpath "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
cd "$tmp"

python3 - <<'PY'
import json, os
docs = [open(f"/usr/share/common-licenses/{n}", encoding="utf-8").read() for n in ("GPL-3", "Apache-2.0", "MPL-2.0")]
docs += ["naïve café — Ελληνικά, русский, 中文, emoji 😀🇫🇷, \"quotes\" and \\backslashes\\",
         "tab\there, line\nbreaks\r\nand a NUL-free control \x07 bell", "   ", "1234567890" * 50, "x"]
os.makedirs("txt/corpus"); os.makedirs("jsonl/corpus"); os.makedirs("split/corpus")
for i, d in enumerate(docs):
    open(f"txt/corpus/{i:03d}.txt", "w", encoding="utf-8", newline="").write(d)
lines = [json.dumps({"text": d, "id": i}, ensure_ascii=(i % 2 == 0)) for i, d in enumerate(docs)]
open("jsonl/corpus/docs.jsonl", "w", encoding="utf-8").write("\n".join(lines[:4]) + "\n\n" + "\n".join(lines[4:]) + "\n")
open("split/corpus/part-0.jsonl", "w", encoding="utf-8").write("\n".join(lines[:3]) + "\n")
open("split/corpus/part-1.jsonl", "w", encoding="utf-8").write("\n".join(lines[3:]))  # no final newline
open("tokens", "w").write(str(sum(len(d.encode("utf-8")) + 1 for d in docs)))
src = [{"text": f"record {i} " * (i % 7 + 1), "src": "ab"[i % 3 == 0]} for i in range(200)]
os.makedirs("keyed")
open("keyed/records.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in src))
open("counts", "w").write(" ".join(str(sum(r["src"] == s for r in src)) for s in "ab"))
PY
mkdir -p gz/corpus zst/corpus
gzip -c jsonl/corpus/docs.jsonl >gz/corpus/docs.jsonl.gz
zstd -q -c jsonl/corpus/docs.jsonl >zst/corpus/docs.jsonl.zst
zstd -q split/corpus/part-1.jsonl && rm split/corpus/part-1.jsonl

fails=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi; }
run() { "$bin" prepare --val-fraction 0 "$@" >/dev/null || { echo "FAIL: prepare $*"; exit 1; }; }
run --input txt/corpus --out out-txt
run --input jsonl/corpus --out out-jsonl
run --input gz/corpus/docs.jsonl.gz --out out-gz
run --input zst/corpus --out out-zst
run --input 'split/corpus/part-*' --out out-glob
tokens=$(python3 -c "import json; print(json.load(open('out-txt/manifest.json'))['shards'][0]['tokens'])")
check "text files: as many tokens as Python counts ($tokens)" '[ "$tokens" = "$(cat tokens)" ]'
for o in jsonl gz zst glob; do
  check "$o: the same shard as the text files" 'cmp -s out-txt/train-corpus-000.bin out-$o/train-corpus-000.bin'
done

"$bin" prepare --input keyed --out out-keyed --source-key src --val-fraction 0.3 >/dev/null || { echo "FAIL: keyed"; exit 1; }
"$bin" prepare --input keyed/records.jsonl --out out-keyed2 --source-key src --val-fraction 0.3 >/dev/null || exit 1
read -r a b <<<"$(python3 -c "
import json
m = json.load(open('out-keyed/manifest.json'))
print(*[sum(s['documents'] for s in m['shards'] if s['source'] == x) for x in m['sources']])")"
check "--source-key: sources a, b with Python's counts ($a $b)" \
  '[ "$(python3 -c "import json; print(*json.load(open(\"out-keyed/manifest.json\"))[\"sources\"])")" = "a b" ] && [ "$a $b" = "$(cat counts)" ]'
val=$(python3 -c "import json; print(sum(s['documents'] for s in json.load(open('out-keyed/manifest.json'))['shards'] if s['split'] == 'val'))")
check "a 0.3 validation share of 200 records holds out $val (30..90)" '[ "$val" -ge 30 ] && [ "$val" -le 90 ]'
check "the split does not depend on how the file is named on the command line" 'cmp -s out-keyed/manifest.json out-keyed2/manifest.json'

# --workers: byte-identical output for any number of workers, with a real BPE, many small shards and a split.
fixture=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/fixtures/hf_tokenizers/llama3-style.json
for w in 1 2 5; do
  "$bin" prepare --input txt/corpus keyed --out "out-w$w" --workers "$w" --tokenizer "hf:$fixture" \
    --max-shard-tokens 997 --val-fraction 0.3 >"w$w.log" || { echo "FAIL: --workers $w"; exit 1; }
done
check "--workers 1, 2 and 5: the same $(ls out-w1 | wc -l) files, byte for byte" \
  'diff -r out-w1 out-w2 >/dev/null && diff -r out-w1 out-w5 >/dev/null && [ "$(ls out-w1 | wc -l)" -gt 10 ]'
check "--workers 5 says so" 'grep -q "on 5 workers" w5.log'

# Kill + --resume: SIGKILL after each K-th finished shard, before progress.json names it (FEDSHARD_PREPARE_KILL),
# on 3 workers; --resume on 1 worker keeps the K-1 shards the progress names and ends with the uninterrupted
# run's files, byte for byte, at every K (documents longer than a shard are cut across shards, so some kills
# land inside a document).
resume_args=(--input txt/corpus keyed --tokenizer "hf:$fixture" --max-shard-tokens 3001 --val-fraction 0.3)
"$bin" prepare "${resume_args[@]}" --out out-ref >/dev/null || { echo "FAIL: prepare for resume"; exit 1; }
total=$(ls out-ref/*.bin | wc -l)
bad="" carried=0
for k in $(seq 1 "$total"); do
  FEDSHARD_PREPARE_KILL=$k "$bin" prepare "${resume_args[@]}" --out out-res --workers 3 >/dev/null 2>&1
  killed=$?
  grep -q '"carry":[1-9]' out-res.partial/progress.json 2>/dev/null && carried=$((carried + 1))
  "$bin" prepare "${resume_args[@]}" --out out-res --workers 1 --resume >resume.log 2>&1 || bad="$bad $k(resume failed)"
  kept=$(sed -n 's/.*resumed: \([0-9]*\) finished shards kept/\1/p' resume.log)
  [ "$killed" -eq 137 ] && [ "${kept:-0}" -eq $((k - 1)) ] && diff -r out-ref out-res >/dev/null || bad="$bad $k"
  rm -rf out-res
done
check "kill after each of the $total shards, --resume: the same files, the shards before kept ($carried kills inside a document)" \
  '[ -z "$bad" ] && [ "$carried" -gt 0 ]'
[ -z "$bad" ] || echo "  failed at:$bad"
FEDSHARD_PREPARE_KILL=3 "$bin" prepare "${resume_args[@]}" --out out-res >/dev/null 2>&1
expect "--resume with other options" "out-res.partial was made with other options (/max_shard_tokens differs)" -- \
  "$bin" prepare "${resume_args[@]/3001/4001}" --out out-res --resume
check "a refused --resume keeps the partial corpus" '[ -f out-res.partial/progress.json ]'

printf '{"text": "a"}\n{"text": "b"\n' >bad.jsonl
printf '{"text": "a"}\n{"body": "b"}\n' >nokey.jsonl
printf '{"text": 7}\n' >number.jsonl
printf '["text"]\n' >array.jsonl
printf '{"text": "a", "src": "../x"}\n' >badlabel.jsonl
head -c 200 zst/corpus/docs.jsonl.zst >cut.jsonl.zst
head -c 300 gz/corpus/docs.jsonl.gz >cut.jsonl.gz
cp jsonl/corpus/docs.jsonl notgzip.jsonl.gz
touch data.parquet
expect "invalid JSON" "bad.jsonl:2: invalid JSON" -- "$bin" prepare --input bad.jsonl --out x
expect "missing text key" 'nokey.jsonl:2: the record has no "text" key' -- "$bin" prepare --input nokey.jsonl --out x
expect "text not a string" '"text" is not a string' -- "$bin" prepare --input number.jsonl --out x
expect "a line that is not an object" "array.jsonl:1: the line is not a JSON object" -- "$bin" prepare --input array.jsonl --out x
expect "a source label that cannot name a file" "cannot name a shard file" -- \
  "$bin" prepare --input badlabel.jsonl --source-key src --out x
expect "truncated zstd" "truncated Zstandard stream" -- "$bin" prepare --input cut.jsonl.zst --out x
expect "truncated gzip" "corrupt or truncated gzip stream" -- "$bin" prepare --input cut.jsonl.gz --out x
expect "not gzip" "not a gzip stream" -- "$bin" prepare --input notgzip.jsonl.gz --out x
# An empty .parquet: not a Parquet file; a build without pyarrow has no helper to read it and says so.
if [ -x "$(dirname "$bin")/fedshard-parquet" ]; then
  expect "an empty parquet" "data.parquet: not a Parquet file" -- "$bin" prepare --input data.parquet --out x
else
  expect "parquet without pyarrow" "data.parquet: Parquet input needs the helper fedshard-parquet" -- \
    "$bin" prepare --input data.parquet --out x
fi
expect "glob matching nothing" "matches nothing" -- "$bin" prepare --input 'nowhere/*.jsonl' --out x
expect "--source-key over text files" "is a text document" -- "$bin" prepare --input txt/corpus --source-key src --out x
expect "another key missing" 'no "body" key' -- "$bin" prepare --input jsonl/corpus --text-key body --out x
check "no failed run left an output behind" '[ ! -e x ] && [ ! -e x.partial ] && [ -z "$(ls -d x.tmp-* x.old-* 2>/dev/null)" ]'
[ "$fails" -eq 0 ] || { echo "$fails failed"; exit 1; }
