#!/usr/bin/env python3
"""Names a unity build would silently rebind (fedshard_core is compiled in batches: CMakeLists.txt, FEDSHARD_UNITY).

A batch is one translation unit, so what one source keeps to itself (an anonymous namespace, `static` at namespace
scope, a #define) is seen by the sources after it. Two sources with the same internal name in one namespace either
fail to compile (the lucky case) or overload each other, and an internal name equal to a function of a header in
the same or an enclosing namespace hides that function from the later sources. Both can change which function a
call binds to without any error. This check reads the sources and fails on each such name, and on a #define
in a source that is not #undef'd at its end. Aliases (`using X = Y;`, `namespace x = y;`) to the same target are
harmless and allowed.

Usage: tests/unity_names.py SRC_DIR     (exit 1 and one line per collision)
"""
import re
import sys
from collections import defaultdict
from pathlib import Path

KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "alignof", "decltype", "static_assert",
            "catch", "noexcept", "throw", "new", "delete", "operator", "const", "constexpr", "inline", "static",
            "template", "typename", "explicit", "auto", "void", "int", "bool", "char", "double", "float", "long",
            "unsigned", "signed", "short", "size_t", "extern"}


def strip(text):
    """Comments, string and character literals blanked (newlines kept), preprocessor lines removed."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            out.append("\n" * text.count("\n", i, j))
            i = n if j < 0 else j + 2
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            k = text.find("(", i)
            close = ")" + text[i + 2:k] + '"'
            j = text.find(close, k)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + len(close)
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        elif c == "#" and (i == 0 or text[text.rfind("\n", 0, i) + 1:i].strip() == ""):
            j = i
            while True:  # a directive runs on past backslash-newlines
                j = text.find("\n", j)
                if j < 0 or text[j - 1] != "\\":
                    break
                j += 1
            i = n if j < 0 else j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def declared_name(stmt):
    """(kind, name, alias target) of a namespace-scope declaration, or None."""
    stmt = re.sub(r"\s+", " ", stmt).strip()
    while stmt.startswith("template"):  # template <...> prefix, nested angle brackets included
        depth, j = 0, len("template")
        for j in range(len("template"), len(stmt)):
            depth += {"<": 1, ">": -1}.get(stmt[j], 0)
            if depth == 0 and stmt[j] == ">":
                break
        stmt = stmt[j + 1:].strip()
    if not stmt or stmt.startswith(("using namespace", "extern \"", "static_assert", "friend")):
        return None
    m = re.match(r"using (\w+) = (.*)", stmt) or re.match(r"namespace (\w+) = (.*)", stmt)
    if m:
        return ("alias", m.group(1), m.group(2).strip())
    m = re.match(r"(?:typedef) (.*?)(\w+)$", stmt)
    if m:
        return ("alias", m.group(2), m.group(1).strip())
    if re.match(r"using [\w:]+::(\w+)$", stmt):  # a using-declaration brings a name in; it declares nothing new
        return None
    m = re.match(r"(?:(?:static|inline|constexpr|const) )*(?:struct|class|enum(?: class| struct)?|union) (\w+)", stmt)
    if m:
        return ("type", m.group(1), None)
    head = stmt.split("=", 1)[0]
    paren = head.find("(")
    if paren >= 0:  # a function (its name is the identifier before the parameter list) or an initialised variable
        m = re.search(r"(operator\s*\S+?|[\w:~]+)\s*$", head[:paren])
        if m and "::" in m.group(1):  # a member or a qualified name defined out of line: declared elsewhere
            return None
        if m and m.group(1) not in KEYWORDS:
            return ("function", m.group(1).replace(" ", ""), None)
        return None
    m = re.search(r"(\w+)\s*(?:\[[^\]]*\])*\s*$", head.split("{", 1)[0])
    if m and m.group(1) not in KEYWORDS:
        return ("variable", m.group(1), None)
    return None


def scan(path):
    """Yield (namespace parts, kind, name, alias target, static?) for each namespace-scope declaration."""
    text = strip(path.read_text())
    stack = []  # one entry per open brace: a namespace's parts ([""] for an anonymous one), None for other blocks
    stmt_start = 0
    for i, c in enumerate(text):
        at_ns_scope = all(s is not None for s in stack)
        if c not in "{};":
            continue
        head = text[stmt_start:i]
        if c == "{":
            m = re.search(r"(?:^|[;\s}])namespace\s*([\w:]*)\s*$", head)
            if m and at_ns_scope:
                stack.append(m.group(1).split("::") if m.group(1) else [""])
                stmt_start = i + 1
                continue
            stack.append(None)
        elif c == "}":
            if stack:
                stack.pop()
            if all(s is not None for s in stack) and not text[i + 1:].lstrip().startswith(";"):
                stmt_start = i + 1  # a function body or a namespace ends a statement; a class body goes on to `;`
            continue
        else:
            stmt_start = i + 1
        if at_ns_scope and "}" not in head:
            decl = declared_name(head)
            if decl:
                parts = [p for s in stack if s is not None for p in s]
                yield (parts, *decl, re.search(r"(^|\s)static\s", " " + head) is not None)
        if c == "{" and at_ns_scope:
            stmt_start = i + 1


def main():
    src = Path(sys.argv[1])
    sources = [p for p in sorted(src.rglob("*.cpp"))
               if p.name != "main.cpp" and not p.name.endswith("_helper.cpp")]
    internal = defaultdict(list)   # (namespace, name) -> [(file, kind, alias target)]
    external = defaultdict(set)    # (namespace, name) -> {file}
    for path in sources + sorted(src.rglob("*.h")):
        for stack, kind, name, target, is_static in scan(path):
            named = tuple(s for s in stack if s)
            anonymous = "" in stack or (is_static and kind in ("function", "variable") and path.suffix == ".cpp")
            if anonymous and path.suffix == ".cpp":
                internal[(named, name)].append((path.relative_to(src), kind, target))
            elif not anonymous and kind in ("function", "type"):
                external[(named, name)].add(path.relative_to(src))
    problems = []
    for (ns, name), decls in sorted(internal.items()):
        files = sorted({str(f) for f, _, _ in decls})
        qualified = "::".join(ns + (name,))
        if len(files) > 1 and not all(k == "alias" for _, k, _ in decls):
            problems.append(f"{qualified}: internal to each of {', '.join(files)}")
        elif len(files) > 1 and len({t for _, _, t in decls}) > 1:
            problems.append(f"{qualified}: an alias to different things in {', '.join(files)}")
        for depth in range(len(ns), -1, -1):
            outer = external.get((ns[:depth], name))
            if outer and decls[0][1] != "alias":
                where = "::".join(ns[:depth] + (name,))
                problems.append(f"{qualified} ({files[0]}) hides {where} of {', '.join(sorted(map(str, outer)))}")
    for path in sources:
        text = path.read_text()
        for macro in re.findall(r"^\s*#\s*define\s+(\w+)", text, re.M):
            if not re.search(rf"^\s*#\s*undef\s+{macro}\b", text, re.M):
                problems.append(f"{path.relative_to(src)}: #define {macro} is not #undef'd at its end")
    for line in problems:
        print(f"unity_names: {line}")
    print(f"unity_names: {len(sources)} sources, {len(internal)} internal names, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
