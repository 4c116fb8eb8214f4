#!/usr/bin/env python3
"""fedshard's tiktoken: tokenizer (a ranks file, Llama 3's pre-tokenizer) against the real `tiktoken` (the venv's
pin) with the same ranks and the same pattern.

The ranks are those of tests/fixtures/hf_tokenizers/llama3-style.json (1,000 tokens trained on Brown), written
as a tiktoken file (base64 token, rank). `fedshard tokenize` of every document (Brown's 500, or the license
texts), of the adversarial set and of documents holding every code point but the surrogates, each between
letters, digits and spaces (so every code point's letter/digit/space class decides a split), gives exactly
tiktoken's Encoding.encode_ordinary ids: the pre-tokenizer classifies code points as tiktoken's regex engine
does, Unicode 15 and 16 included.

Usage: tiktoken_tokenizer.py FEDSHARD_BINARY DOCUMENTS_DIR WORK_DIR (every file below DOCUMENTS_DIR a document)
"""
import base64
import json
import os
import sys

import tiktoken

from tokenizer_conformance import ADVERSARIAL, compare, many_words, read_documents, tokenize

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "hf_tokenizers", "llama3-style.json")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")


def byte_level_decoder():
    """GPT-2's byte-level alphabet: the printable character that stands for each byte in tokenizer.json."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    chars, n = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def ranks_of(tokenizer_json):
    """The model's tokens (not its special ones) as bytes, ranked in the order of their ids (a BPE trainer's
    merge order)."""
    decode = byte_level_decoder()
    data = json.load(open(tokenizer_json))
    specials = {t["content"] for t in data["added_tokens"]}
    tokens = sorted((i, t) for t, i in data["model"]["vocab"].items() if t not in specials)
    return {bytes(decode[c] for c in token): rank for rank, (_, token) in enumerate(tokens)}


def every_code_point():
    """Documents holding every code point but the surrogates, each after a letter and before a digit and a
    space, 2,048 code points a document."""
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    return ["".join(f"a{chr(cp)}1{chr(cp)} " for cp in cps[i:i + 2048]) for i in range(0, len(cps), 2048)]


def main():
    bin_, corpus_dir, work = sys.argv[1:4]
    corpus, docs = read_documents(corpus_dir)
    ranks = ranks_of(FIXTURE)
    path = os.path.join(work, "llama3-style.tiktoken")
    with open(path, "w") as f:
        for token, rank in ranks.items():
            f.write(f"{base64.b64encode(token).decode()} {rank}\n")
    enc = tiktoken.Encoding(name="llama3-style", pat_str=LLAMA3, mergeable_ranks=ranks, special_tokens={})
    ok = True
    for label, set_ in ((corpus, docs), ("adversarial", ADVERSARIAL), ("many words", many_words()), ("every code point", every_code_point())):
        ours = tokenize(bin_, "tiktoken:" + path, set_, work)
        same = compare(f"{label}", set_, ours, [enc.encode_ordinary(d) for d in set_], "tiktoken")
        ok &= same
        if same:
            print(f"ok   {label}: {len(set_)} documents, {sum(map(len, ours))} tokens, ids identical to tiktoken "
                  f"{tiktoken.__version__}")
    print("every tiktoken case holds" if ok else "tiktoken conformance failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
