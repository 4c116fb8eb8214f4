#!/usr/bin/env python3
"""fedshard's tokenizer.json reader against the real Hugging Face `tokenizers` library (the venv's pin).

For each tokenizer.json of tests/fixtures/hf_tokenizers (GPT-2-style and Llama-3-style, trained on Brown by
make_fixtures.py): `fedshard tokenize` of every document (Brown's 500, or the license texts where Brown is not at
hand) and of an adversarial set (mixed scripts, emoji, control characters, long runs of spaces, digits and
punctuation, contractions in odd cases, special tokens' text, letters and digits of Unicode 15 and 16) gives
exactly the ids of Tokenizer.encode(text, add_special_tokens=False) with encode_special_tokens set (a special
token's text inside a document is text, as fedshard encodes it), document by document; so does a file that lists
a merge twice. Then `prepare --tokenizer hf:` writes those ids followed by the end-of-text id, and a file asking
for what the reader lacks is refused in one line naming the key.

Usage: hf_tokenizer.py FEDSHARD_BINARY DOCUMENTS_DIR WORK_DIR (every file below DOCUMENTS_DIR a document)
"""
import copy
import glob
import json
import os
import subprocess
import sys

from tokenizers import Tokenizer

from tokenizer_conformance import ADVERSARIAL, compare, many_words, prepare, read_documents, tokenize

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "hf_tokenizers")


def refused(bin_, base, work, name, mutate, want):
    data = copy.deepcopy(base)
    mutate(data)
    path = os.path.join(work, "bad.json")
    with open(path, "w") as f:
        f.write(data if isinstance(data, str) else json.dumps(data))
    out = subprocess.run([bin_, "tokenize", "--tokenizer", "hf:" + path, os.devnull], capture_output=True,
                         text=True)
    lines = out.stderr.strip().splitlines()
    ok = out.returncode != 0 and len(lines) == 1 and lines[0].startswith("fedshard: error: ") and want in lines[0]
    print(f"{'ok  ' if ok else 'FAIL'} refused {name}: exit {out.returncode}, {out.stderr.strip()[:160]}")
    return ok


def main():
    bin_, corpus_dir, work = sys.argv[1:4]
    corpus, docs = read_documents(corpus_dir)
    ok = True
    for fixture in sorted(glob.glob(os.path.join(FIXTURES, "*.json"))):
        name = os.path.basename(fixture)
        hf = Tokenizer.from_file(fixture)
        hf.encode_special_tokens = True  # a special token's text in a document is text (fedshard's rule)
        for label, set_ in ((corpus, docs), ("adversarial", ADVERSARIAL), ("many words", many_words())):
            ours = tokenize(bin_, "hf:" + fixture, set_, work)
            theirs = [e.ids for e in hf.encode_batch(set_, add_special_tokens=False)]
            same = compare(f"{name} {label}", set_, ours, theirs, "tokenizers")
            ok &= same
            if same:
                print(f"ok   {name} {label}: {len(set_)} documents, {sum(map(len, ours))} tokens, ids identical")

    # A pair listed twice in merges: the library keeps its last rank (here the first merge moves to the end).
    dup = json.load(open(os.path.join(FIXTURES, "gpt2-style.json")))
    dup["model"]["merges"].append(dup["model"]["merges"][0])
    dup_path = os.path.join(work, "duplicate-merge.json")
    with open(dup_path, "w") as f:
        json.dump(dup, f)
    hf = Tokenizer.from_file(dup_path)
    hf.encode_special_tokens = True
    set_ = docs[:20] + ADVERSARIAL
    theirs = [e.ids for e in hf.encode_batch(set_, add_special_tokens=False)]
    same = compare("a duplicate merge", set_, tokenize(bin_, "hf:" + dup_path, set_, work), theirs, "tokenizers")
    ok &= same
    if same:
        print(f"ok   a duplicate merge: {len(set_)} documents, ids identical")

    # prepare writes each document's ids and then the end-of-text id; the manifest names the tokenizer.
    fixture = os.path.join(FIXTURES, "llama3-style.json")
    manifest, got = prepare(bin_, "hf:" + fixture, docs[:3], work)
    hf = Tokenizer.from_file(fixture)
    eos = hf.token_to_id("<|end_of_text|>")
    want = sorted(tuple(hf.encode(d, add_special_tokens=False).ids) for d in docs[:3])
    tok = manifest["tokenizer"]
    same = (tok["kind"] == "hf" and tok["vocab_size"] == hf.get_vocab_size() and tok["eos"] == eos
            and sorted(got) == want)
    print(f"{'ok  ' if same else 'FAIL'} prepare --tokenizer hf: {len(got)} documents, kind {tok['kind']}, "
          f"vocab {tok['vocab_size']}, eos {tok['eos']}")
    ok &= same

    base = json.load(open(fixture))

    def drop_byte(d):
        del d["model"]["vocab"]["Ā"]  # byte 0x00 in byte-level form

    cases = [
        ("a normalizer", lambda d: d.update(normalizer={"type": "NFC"}), "normalizer"),
        ("truncation", lambda d: d.update(truncation={"max_length": 8}), "truncation"),
        ("a WordPiece model", lambda d: d["model"].update(type="WordPiece"), "model.type"),
        ("a Metaspace pre-tokenizer", lambda d: d.update(pre_tokenizer={"type": "Metaspace"}), "pre_tokenizer"),
        ("add_prefix_space", lambda d: d["pre_tokenizer"]["pretokenizers"][1].update(add_prefix_space=True),
         "add_prefix_space"),
        ("a non-special added token", lambda d: d["added_tokens"].append(
            {"id": 1000, "content": "hello", "special": False}), "added_tokens[2]"),
        ("byte fallback", lambda d: d["model"].update(byte_fallback=True), "model.byte_fallback"),
        ("a missing byte", drop_byte, "byte 0 has no token"),
        ("an id far beyond the tokens", lambda d: d["model"]["vocab"].update({"zzzq": 1888888885}),
         "id 1888888885 is beyond the"),
        ("a merge of unknown tokens", lambda d: d["model"]["merges"].append(["zzzq", "qqqz"]), "model.merges[742]"),
        ("no end-of-text token", lambda d: d.update(added_tokens=d["added_tokens"][:1]), "end-of-document"),
        ("a Sentencepiece decoder", lambda d: d.update(decoder={"type": "Metaspace"}), "decoder"),
    ]
    for name, mutate, want in cases:
        ok &= refused(bin_, base, work, name, mutate, want)
    ok &= refused(bin_, "{\"model\": ", work, "invalid JSON", lambda d: None, "not valid JSON")
    print("every tokenizer case holds" if ok else "tokenizer conformance failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
