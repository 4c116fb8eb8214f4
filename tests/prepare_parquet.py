#!/usr/bin/env python3
"""`fedshard prepare` of Parquet files (read by fedshard-parquet with the pinned pyarrow's Arrow C++), against the
same records as JSONL.

The documents (Brown's 500, or the license texts where Brown is not at hand), each with a source label, are
written by pyarrow as Parquet in several layouts (row groups of 37 rows so batches cross them, string,
large_string and dictionary-encoded columns, snappy, zstd, gzip and no compression, the columns in another order
with an extra one) and
as one JSONL file. With the records' own labels (--source-column) and no validation split, every Parquet layout
gives the shards of the JSONL file, byte for byte (the manifest's checksums); with a validation split, the same
file prepared twice gives the same shards, and a directory mixing a Parquet and a JSONL file gives their
documents together. A missing or non-string column, a null text or source, a truncated file and a text file
named .parquet are refused in one line naming the file (and the row), exit 2, no output directory left.

Usage: prepare_parquet.py FEDSHARD_BINARY DOCUMENTS_DIR WORK_DIR (every file below DOCUMENTS_DIR a document)
"""
import json
import os
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from tokenizer_conformance import read_documents


def prepare(bin_, inputs, out, *flags):
    cmd = [bin_, "prepare", "--out", out, "--tokenizer", "bytes", "--input", *inputs, *flags]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def shards(out):
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    return [(s["file"], s["tokens"], s["documents"], s["checksum"]) for s in manifest["shards"]]


def main():
    bin_, corpus_dir, work = sys.argv[1:4]
    corpus, docs = read_documents(corpus_dir)
    labels = [f"s{i % 3}" for i in range(len(docs))]
    ok = True

    jsonl = os.path.join(work, "records.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for text, label in zip(docs, labels):
            f.write(json.dumps({"text": text, "source": label}, ensure_ascii=False) + "\n")
    out = os.path.join(work, "from-jsonl")
    r = prepare(bin_, [jsonl], out, "--source-key", "source", "--val-fraction", "0")
    if r.returncode != 0:
        raise SystemExit(f"FAIL prepare of JSONL: {r.stderr.strip()}")
    want = shards(out)

    layouts = {
        "string, snappy": (pa.table({"text": docs, "source": labels}), "snappy"),
        "large_string, zstd": (pa.table({"text": pa.array(docs, pa.large_string()),
                                         "source": pa.array(labels, pa.large_string())}), "zstd"),
        "gzip, other columns first": (pa.table({"id": list(range(len(docs))), "source": labels, "text": docs}),
                                      "gzip"),
        "uncompressed": (pa.table({"text": docs, "source": labels}), "none"),
        "dictionary-encoded (a pandas category)": (pa.table({"text": pa.array(docs).dictionary_encode(),
                                                             "source": pa.array(labels).dictionary_encode()}),
                                                   "snappy"),
    }
    for i, (name, (table, compression)) in enumerate(layouts.items()):
        path = os.path.join(work, f"layout{i}.parquet")
        pq.write_table(table, path, row_group_size=37, compression=compression)
        out = os.path.join(work, f"from-parquet{i}")
        r = prepare(bin_, [path], out, "--source-column", "source", "--text-column", "text", "--val-fraction", "0")
        same = r.returncode == 0 and shards(out) == want
        print(f"{'ok  ' if same else 'FAIL'} Parquet ({name}, {len(docs)} rows in row groups of 37) gives the "
              f"JSONL file's shards of {corpus}: {len(want)} shards" + ("" if same else f": {r.stderr.strip()}"))
        ok &= same

    # With a validation split: deterministic, and every document lands in train or val once.
    path = os.path.join(work, "layout0.parquet")
    runs = []
    for k in range(2):
        out = os.path.join(work, f"split{k}")
        r = prepare(bin_, [path], out, "--val-fraction", "0.5", "--seed", "3")  # some val even of 17 records
        runs.append(shards(out) if r.returncode == 0 else r.stderr.strip())
    documents = {"train": 0, "val": 0}
    for shard in runs[0] if isinstance(runs[0], list) else []:
        documents[shard[0].split("-")[0]] += shard[2]  # train-SOURCE-000.bin
    same = runs[0] == runs[1] and documents["val"] > 0 and sum(documents.values()) == len(docs)
    print(f"{'ok  ' if same else 'FAIL'} a validation split of Parquet records: the same twice, {documents}")
    ok &= same

    # A directory mixing Parquet and JSONL: one source, every record of both.
    mixed = os.path.join(work, "mixed", "web")
    os.makedirs(mixed)
    pq.write_table(pa.table({"text": docs[:7]}), os.path.join(mixed, "a.parquet"))
    with open(os.path.join(mixed, "b.jsonl"), "w", encoding="utf-8") as f:
        for text in docs[7:12]:
            f.write(json.dumps({"text": text}) + "\n")
    out = os.path.join(work, "from-mixed")
    r = prepare(bin_, [os.path.dirname(mixed)], out, "--val-fraction", "0")
    same = r.returncode == 0 and sum(s[2] for s in shards(out)) == 12
    print(f"{'ok  ' if same else 'FAIL'} a directory of a Parquet and a JSONL file: "
          f"{sum(s[2] for s in shards(out)) if r.returncode == 0 else r.stderr.strip()} documents of 12")
    ok &= same

    # One column as both the text and the source.
    both = os.path.join(work, "both.parquet")
    pq.write_table(pa.table({"text": ["alpha", "beta", "alpha"]}), both)
    out = os.path.join(work, "from-both")
    r = prepare(bin_, [both], out, "--source-column", "text", "--val-fraction", "0")
    got = sorted((s[0], s[2]) for s in shards(out)) if r.returncode == 0 else r.stderr.strip()
    same = got == [("train-alpha-000.bin", 2), ("train-beta-000.bin", 1)]
    print(f"{'ok  ' if same else 'FAIL'} one column as the text and the source: {got}")
    ok &= same

    # Refusals: one line naming the file (and row), exit 2, nothing left at --out.
    bad = os.path.join(work, "bad.parquet")
    cases = [
        ("a missing text column", pa.table({"body": ["x"]}), [], 'no column "text" (the text); its columns: body'),
        ("a column of numbers", pa.table({"text": [1, 2]}), [], 'column "text" (the text) holds int64, not strings'),
        ("a null text", pa.table({"text": ["a", None, "c"]}), [], 'row 2: the text ("text") is null'),
        ("a null source", pa.table({"text": ["a", "b"], "src": ["x", None]}), ["--source-column", "src"],
         'row 2: the source ("src") is null'),
        ("a truncated file", None, [], "not a Parquet file"),
        ("a text file named .parquet", "just text\n", [], "not a Parquet file"),
    ]
    for name, content, flags, want_text in cases:
        if isinstance(content, pa.Table):
            pq.write_table(content, bad)
        elif content is None:
            data = open(os.path.join(work, "layout0.parquet"), "rb").read()
            open(bad, "wb").write(data[:len(data) // 2])
        else:
            open(bad, "w").write(content)
        out = os.path.join(work, "refused")
        r = prepare(bin_, [bad], out, *flags)
        # Under ASan, LeakSanitizer's exit-time scan may note "==PID==Unable to get registers from thread N" for
        # an Arrow thread that is exiting as it stops the world: the runtime's line, not ours. A real sanitizer
        # report changes the exit status, which is checked.
        lines = [line for line in r.stderr.strip().splitlines() if not re.match(r"==\d+==", line)]
        same = (r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"fedshard: error: {bad}: ")
                and want_text in lines[0] and not os.path.exists(out))
        print(f"{'ok  ' if same else 'FAIL'} refused {name}: exit {r.returncode}, {r.stderr.strip()[:200]}")
        ok &= same

    print("every Parquet case holds" if ok else "Parquet input failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
