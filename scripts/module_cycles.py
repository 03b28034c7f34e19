#!/usr/bin/env python3
"""Import cycles between the files of one crate.

    scripts/module_cycles.py crates/http/src [--edges]

Reads every `.rs` file under the crate's `src` folder and, per file, the module paths it
names: `use crate::…`, `use super::…`, `use self::…` (brace groups expanded), the same paths
written inline (`crate::observe::Telemetry::new()`), and `child::…` for a module the file
declares itself. Inline modules (`mod tests { … }`) are followed, so their `super::` is the
file's own module. Comments and string literals are ignored. Each path is resolved to the
file of the longest module prefix it names (through `pub use` re-exports to where the name
is defined); an edge is drawn from the file to that file.

Prints every strongly connected set of files (a cycle) with the edges inside it, and exits 1
when there is one; `--edges` prints the whole graph as well. No tool of the toolchain does
this, and `cargo modules` is not installed where aigw is built.
"""

import os
import re
import sys


def module_files(src):
    """{module path tuple: file path} of every `.rs` file under `src`."""
    modules = {}
    for folder, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, src)[: -len(".rs")].split(os.sep)
            if rel in (["lib"], ["main"]):
                key = ()
            elif rel[-1] == "mod":
                key = tuple(rel[:-1])
            else:
                key = tuple(rel)
            # `main.rs` is a crate of its own beside `lib.rs`: only the library is mapped.
            if rel == ["main"] and os.path.exists(os.path.join(src, "lib.rs")):
                continue
            modules[key] = path
    return modules


def strip(text):
    """`text` with comments and the contents of string and char literals blanked."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not text[i - 1].isalnum()):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            out.append('""')
            i = n if end < 0 else end + 1 + len(hashes)
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:]):
            m = re.match(r"'(\\.|[^\\'])'", text[i:])
            out.append("' '")
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_use(tree):
    """The paths of a `use` tree: `crate::a::{b, c::d as e, self}` -> crate::a::b, …, each
    with the name it is known by (`e` for `c::d as e`)."""
    tree = re.sub(r"\s*(::|\{|\}|,)\s*", r"\1", " ".join(tree.split()))
    paths = []

    def walk(prefix, t):
        if not t:
            return
        brace = t.find("{")
        if brace < 0:
            words = t.split(" ")
            alias = words[2] if len(words) == 3 and words[1] == "as" else None
            paths.append((prefix + words[0], alias))
            return
        head, inner = t[:brace], t[brace + 1 : t.rfind("}")]
        depth, part, parts = 0, "", []
        for ch in inner:
            if ch == "," and depth == 0:
                parts.append(part)
                part = ""
                continue
            depth += ch == "{"
            depth -= ch == "}"
            part += ch
        parts.append(part)
        for p in parts:
            if p == "self":
                paths.append(((prefix + head).rstrip(":"), None))
            elif p:
                walk(prefix + head, p)

    walk("", tree)
    return [(p, a) for p, a in paths if p and not p.endswith("*")]


TOKEN = re.compile(
    r"\buse\s+([^;]+);"  # 1: a use tree
    r"|\bmod\s+(\w+)\s*\{"  # 2: an inline module
    r"|\bmod\s+(\w+)\s*;"  # 3: a module in a file of its own
    r"|(\{)|(\})"  # 4, 5
    r"|(?<![\w:])((?:crate|super|self|[a-z_]\w*)(?:::\w+)+)"  # 6: an inline path
)


def absolute(segments, here, declared):
    """`segments` of a path written in module `here` as a path from the crate root, or None
    for another crate's (or a local name's)."""
    if segments[0] == "crate":
        return segments[1:]
    if segments[0] in ("super", "self"):
        base, rest = list(here), list(segments)
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                base = base[:-1]
            rest = rest[1:]
        return base + rest
    if segments[0] in declared:
        return list(here) + list(segments)
    return None


def reexports(modules):
    """{module: {name: absolute path}} of the `pub use` (any `pub(…)` too) of each file."""
    out = {}
    for module, path in modules.items():
        text = strip(open(path, encoding="utf-8").read())
        declared = {m.group(1) for m in re.finditer(r"\bmod\s+(\w+)\s*;", text)}
        names = {}
        for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", text):
            for p, alias in expand_use(m.group(1)):
                target = absolute(p.split("::"), module, declared)
                if target:
                    names[alias or target[-1]] = target
        out[module] = names
    return out


def references(path, module, modules, exported):
    """The module paths (tuples) that the file `path` of module `module` names; a name that a
    module re-exports (`pub use`) counts as the module it comes from."""
    text = strip(open(path, encoding="utf-8").read())
    declared = {m.group(1) for m in re.finditer(r"\bmod\s+(\w+)\s*;", text)}
    found = set()
    inline = []  # (name, brace depth at which it closes)
    depth = 0

    def resolve(segments):
        here = list(module) + [name for name, _ in inline]
        full = absolute(segments, here, declared if not inline else set())
        if full is None:
            return
        for _ in range(16):
            k = max(k for k in range(len(full) + 1) if tuple(full[:k]) in modules)
            target = exported.get(tuple(full[:k]), {}).get(full[k]) if k < len(full) else None
            if target is None or tuple(full[:k]) == tuple(module):
                break
            full = target + full[k + 1 :]
        found.add(tuple(full[:k]))

    for m in TOKEN.finditer(text):
        if m.group(1):
            for p, _ in expand_use(m.group(1)):
                resolve(p.split("::"))
        elif m.group(2):
            depth += 1
            inline.append((m.group(2), depth))
        elif m.group(4):
            depth += 1
        elif m.group(5):
            if inline and inline[-1][1] == depth:
                inline.pop()
            depth -= 1
        elif m.group(6):
            resolve(m.group(6).split("::"))
    return found


def cycles(graph):
    """Strongly connected sets of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    src = args[0].rstrip("/")
    modules = module_files(src)
    exported = reexports(modules)
    graph = {}
    for module, path in modules.items():
        rel = os.path.relpath(path, src)
        found = references(path, module, modules, exported)
        targets = {os.path.relpath(modules[t], src) for t in found}
        graph[rel] = targets - {rel}
    if "--edges" in sys.argv:
        for f in sorted(graph):
            print(f"{f} -> {', '.join(sorted(graph[f])) or '-'}")
    found = cycles(graph)
    for component in found:
        members = set(component)
        print(f"cycle of {len(component)} files:")
        for f in component:
            inside = sorted(graph[f] & members)
            print(f"  {f} -> {', '.join(inside)}")
    if not found:
        print(f"no import cycle between the {len(graph)} files of {src}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
