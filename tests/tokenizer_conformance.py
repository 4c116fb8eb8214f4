"""What the tokenizer conformance tests (tests/hf_tokenizer.py, tests/sentencepiece.py) share: the adversarial
documents, the corpus, and running `fedshard tokenize` and `fedshard prepare` to compare with a library's ids."""
import glob
import json
import os
import struct
import subprocess

ADVERSARIAL = [
    "", " ", "a", "Hello, world!", "  leading and trailing  ", "tabs\tand\nnewlines\r\n\r\nend",
    "I'm you're he'LL she'S we'VE they'D it's 'tis", "don't DON'T Don'T",
    "1234567890 12 123 1234 3.14159 1,000,000 -42 +7e10", "٣٤٥ ٦٧ ४२ 一二三 Ⅻ ½",
    "naïve café résumé Ångström Æsir œuvre straße", "Ελληνικά Русский язык עברית العربية हिन्दी",
    "日本語のテキスト、中文文本，한국어 텍스트", "ไทย ລາວ ខ្មែរ ქართული Հայերեն",
    "emoji 😀😃🎉👍🏽 👨‍👩‍👧‍👦 🇩🇪🇯🇵 ❤️ ✔︎", "zero\u200bwidth\u200djoiner\ufeffbom",
    "control \x01\x02\x07\x1b[31m\x7f chars", "nbsp\u00a0thin\u2009ideo\u3000line\u2028para\u2029end",
    "mongolian\u180evowel's separator", "               many spaces", "x" + " " * 40 + "y",
    "\n\n\n\n\n\n", "\t\t\t  \n \n", "9" * 50, "!!!???...,,,;;;:::---___***", "a" * 200,
    "<|endoftext|> and <|end_of_text|> as plain text", "Mixed123Numbers456and789Letters", "CamelCaseWords AND ALLCAPS",
    "http://example.com/path?q=1&r=2#frag user@example.org", "def f(x):\n    return x ** 2  # comment\n",
    "{\"json\": [1, 2, {\"k\": null}]}", "é" * 30 + " " + "😀" * 10, "Ω≈ç√∫˜µ≤≥÷ ¡™£¢∞§¶•ªº–≠",
    "’curly’ “quotes” ‘single’ — dashes – … ellipsis", "A\u0301 combining e\u0301\u0302 marks",
    # letters and digits of Unicode 15 and 16 (Nag Mundari, Todhri, Garay, Kawi, CJK extension H)
    "Nag \U0001E4D0\U0001E4D1\U0001E4D2 \U0001E4F0\U0001E4F1\U0001E4F2\U0001E4F3\U0001E4F4 Todhri \U000105C0\U000105C1's "
    "Garay \U00010D40\U00010D41\U00010D42\U00010D43 Kawi \U00011F50\U00011F51 \U00031350\U00031351x9",
]


def many_words():
    """Documents of 100,000 made-up words, each said twice far apart: more distinct pieces than fedshard's BPE
    keeps cached (65,536), so pieces are served from its cache, forgotten when it fills, and merged again."""
    words = []
    for i in range(100_000):
        n, w = i * 7919 + 12345, ""
        while n:
            n, r = divmod(n, 26)
            w += "abcdefghijklmnopqrstuvwxyz"[r]
        words.append(w)
    return [" ".join(words[:50_000] + words[:20_000]), " ".join(words[50_000:] + words[:30_000])]


def read_documents(corpus_dir):
    """Every file below corpus_dir is a document; returns (label, documents)."""
    docs = []
    for path in sorted(glob.glob(os.path.join(corpus_dir, "**", "*"), recursive=True)):
        if os.path.isfile(path) and not os.path.basename(path).startswith("."):
            with open(path, encoding="utf-8") as f:
                docs.append(f.read())
    if len(docs) < 10:
        raise SystemExit(f"FAIL: only {len(docs)} documents in {corpus_dir}")
    return ("Brown" if len(docs) == 500 else os.path.basename(corpus_dir)), docs


def tokenize(bin_, spec, docs, work):
    """fedshard tokenize's ids of each document (through a JSONL file)."""
    path = os.path.join(work, "docs.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    out = subprocess.run([bin_, "tokenize", "--tokenizer", spec, path], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"FAIL fedshard tokenize {spec}: {out.stderr.strip()}")
    return [json.loads(line) for line in out.stdout.splitlines()]


def compare(name, docs, ours, theirs, library):
    """Prints the first difference; True when every document's ids are equal."""
    if len(ours) != len(docs):
        print(f"FAIL {name}: {len(ours)} lines for {len(docs)} documents")
        return False
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
            print(f"FAIL {name}: document {i} ({docs[i][:40]!r}...) differs at token {k}: "
                  f"fedshard {a[max(0, k - 3):k + 3]} {library} {b[max(0, k - 3):k + 3]}")
            return False
    return True


def prepare(bin_, spec, docs, work):
    """fedshard prepare of docs (str or bytes, one .txt file each): (manifest, each document's ids), the ids read
    back from the shards, which hold each document followed by the end-of-text id."""
    raw = os.path.join(work, "raw", "one")
    os.makedirs(raw, exist_ok=True)
    for i, d in enumerate(docs):
        with open(os.path.join(raw, f"d{i}.txt"), "wb") as f:
            f.write(d if isinstance(d, bytes) else d.encode("utf-8"))
    corpus = os.path.join(work, "corpus")
    subprocess.run([bin_, "prepare", "--input", os.path.dirname(raw), "--out", corpus, "--tokenizer", spec,
                    "--val-fraction", "0"], check=True, capture_output=True)
    manifest = json.load(open(os.path.join(corpus, "manifest.json")))
    eos = manifest["tokenizer"]["eos"]
    got = []
    for shard in manifest["shards"]:
        data = open(os.path.join(corpus, shard["file"]), "rb").read()  # a 48-byte header, then uint32 tokens
        tokens = struct.unpack(f"<{(len(data) - 48) // 4}I", data[48:])
        ends = [i for i, t in enumerate(tokens) if t == eos]
        got += [tuple(tokens[a + 1:b]) for a, b in zip([-1] + ends, ends)]
    return manifest, got
