#!/usr/bin/env python3
"""Report import cycles between the files of a Rust crate.

Usage: scripts/module_cycles.py [--tests] [--reexports] [--edges] [--folders] [SRC_DIR ...]
(default: every crates/*/src).

Each `.rs` file is one node (`lib.rs`/`main.rs` is the crate root, `a/mod.rs` is module `a`).
An edge A -> B means that A's code names a path into B: `use crate::…`, `use super::…`,
`use self::…`, a child module's name, or such a path written inline (`crate::x::y(…)`).
Comments, string literals and `mod x;` declarations are not edges; `#[cfg(test)]` items are
left out unless `--tests` is given; inside an inline module (`mod tests { … }`), `super::`
names the file's own module. A path through a re-export (`pub use x::Y` in another
file) is followed to the file that defines the item. A re-export is an edge of the
re-exporting file only where its own code names the item too (or with `--reexports`): a
folder's `mod.rs` that re-exports its files' API does not depend on them for that.

Exit status 1 when some strongly connected component holds two files or more; each is
printed with one cycle through it. `--edges` prints the whole graph; `--folders` checks the
graph of top-level modules instead (a file's node is its first path segment).
"""

import os
import re
import sys
from collections import defaultdict

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
KEYWORDS = {"crate", "super", "self", "Self"}


def strip_comments_and_strings(text):
    """Blank out comments, string and char literals, keeping line structure."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
            continue
        m = re.match(r'b?r(#*)"', text[i:i + 260])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
            continue
        if c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12])
            if m:
                out.append("' '")
                i += m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


def matching_brace(text, open_at):
    depth = 0
    for j in range(open_at, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def drop_test_items(text):
    """Remove items behind `#[cfg(test)]` (a module body or one item)."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]", text)
        if not m:
            return text
        rest = text[m.end():]
        semi, brace = rest.find(";"), rest.find("{")
        if brace >= 0 and (semi < 0 or brace < semi):
            end = matching_brace(text, m.end() + brace)
        else:
            end = m.end() + (semi if semi >= 0 else len(rest))
        text = text[:m.start()] + "\n" * text.count("\n", m.start(), end + 1) + text[end + 1:]


def inline_modules(text):
    """Split out the bodies of inline modules (`mod tests { ... }`): returns the text without
    them and a list of (name, body); a body's `super::` names the file's own module."""
    bodies = []
    while True:
        m = re.search(r"\bmod\s+(" + IDENT + r")\s*\{", text)
        if not m:
            return text, bodies
        end = matching_brace(text, m.end() - 1)
        bodies.append((m.group(1), text[m.end():end]))
        text = text[:m.start()] + "\n" * text.count("\n", m.start(), end + 1) + text[end + 1:]


def expand_use_tree(tree):
    """`a::{b, c::{d, e}}` -> [["a","b"], ["a","c","d"], ["a","c","e"]]."""
    tree = re.sub(r"\s+as\s+" + IDENT, "", tree)
    tree = re.sub(r"\s+", "", tree)
    results = []

    def walk(prefix, s):
        # split s at top-level commas
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        for part in parts:
            if "{" in part:
                head, inner = part.split("{", 1)
                inner = inner[: inner.rfind("}")]
                head_segs = [x for x in head.split("::") if x]
                walk(prefix + head_segs, inner)
            else:
                results.append(prefix + [x for x in part.split("::") if x])

    walk([], tree)
    return results


class Crate:
    def __init__(self, src, tests, reexport_edges=False):
        self.src = src
        self.reexport_edges = reexport_edges
        self.files = {}  # module path tuple -> relative file name
        self.code = {}
        self.children = defaultdict(set)
        self.reexports = defaultdict(dict)  # module -> name -> full path
        for root, _, names in os.walk(src):
            for name in names:
                if not name.endswith(".rs"):
                    continue
                full = os.path.join(root, name)
                rel = os.path.relpath(full, src)
                mod = self.module_of(rel)
                if mod is None:
                    continue
                text = strip_comments_and_strings(open(full, encoding="utf-8").read())
                if not tests:
                    text = drop_test_items(text)
                self.files[mod] = rel
                self.code[mod] = text
        for mod, text in self.code.items():
            for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*;", text):
                if mod + (m.group(1),) in self.files:
                    self.children[mod].add(m.group(1))
        self.uses = {mod: self.module_paths(mod, text) for mod, text in self.code.items()}
        for mod, paths in self.uses.items():
            for public, path, _ in paths:
                if public and path and path[-1] not in ("*", "self"):
                    self.reexports[mod][path[-1]] = path

    @staticmethod
    def module_of(rel):
        parts = rel[:-3].split(os.sep)
        if parts[0] in ("bin", "tests", "benches", "examples"):
            return None
        if parts == ["lib"] or parts == ["main"]:
            return ()
        if parts[-1] == "mod":
            parts = parts[:-1]
        return tuple(parts)

    def absolute(self, mod, segs):
        """Turn a path seen in module `mod` into an absolute one, or None if external."""
        if not segs:
            return None
        if segs[0] == "crate":
            return tuple(segs[1:])
        if segs[0] in ("super", "self"):
            base = list(mod)
            i = 0
            while i < len(segs) and segs[i] in ("super", "self"):
                if segs[i] == "super":
                    base = base[:-1]
                i += 1
            return tuple(base) + tuple(segs[i:])
        if segs[0] in self.children.get(tuple(mod), ()):
            return tuple(mod) + tuple(segs)
        return None

    def module_paths(self, mod, text, inner=()):
        """The paths file `mod` names, its inline modules' (`inner`: the path to them) too."""
        outer, bodies = inline_modules(text)
        paths = self.use_paths(mod + inner, outer)
        for name, body in bodies:
            paths += self.module_paths(mod, body, inner + (name,))
        return paths

    def use_paths(self, mod, text):
        paths = []
        body = re.sub(r"\buse\s+[^;]+;", "", text)
        for m in re.finditer(r"(\bpub(?:\([^)]*\))?\s+)?\buse\s+([^;]+);", text):
            for segs in expand_use_tree(m.group(2)):
                path = self.absolute(mod, segs)
                if path is None:
                    continue
                # A re-export alone is no use of the item: a path through it is followed to
                # the defining file. It is one when the file's own code names the item too.
                used = not m.group(1) or self.reexport_edges or (
                    segs[-1] not in ("*", "self")
                    and re.search(r"(?<!::)\b" + re.escape(segs[-1]) + r"\b", body))
                paths.append((bool(m.group(1)), path, bool(used)))
        body = re.sub(r"\bmod\s+" + IDENT + r"\s*;", "", body)
        heads = "|".join(["crate", "super", "self"] + sorted(self.children.get(mod, ())))
        for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:" + heads + r")(?:::" + IDENT + r")+)", body):
            segs = m.group(1).split("::")
            if segs[0] == "self" and len(segs) == 1:
                continue
            path = self.absolute(mod, segs)
            if path is not None:
                paths.append((False, path, True))
        return paths

    def file_of(self, path, seen=None):
        """The module (file) that defines what `path` names, following re-exports."""
        seen = seen or set()
        for k in range(len(path), -1, -1):
            prefix = path[:k]
            if prefix in self.files:
                if k < len(path):
                    name = path[k]
                    target = self.reexports[prefix].get(name)
                    if target is not None and (prefix, name) not in seen:
                        seen.add((prefix, name))
                        return self.file_of(target + path[k + 1:], seen)
                return prefix
        return ()

    def edges(self):
        graph = defaultdict(set)
        for mod, paths in self.uses.items():
            graph[mod]
            for _, path, used in paths:
                if not used:
                    continue
                if path and path[-1] in ("*",):
                    path = path[:-1]
                if path and path[-1] == "self":
                    path = path[:-1]
                target = self.file_of(path)
                if target != mod:
                    graph[mod].add(target)
        return graph


def tarjan(graph):
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(comp)

    for v in list(graph):
        if v not in index:
            visit(v)
    return comps


def one_cycle(graph, comp):
    members = set(comp)
    start = min(comp)
    # BFS back to start
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w in members and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return [start]


def name(crate, mod):
    return crate.files.get(mod, "::".join(mod) or "lib.rs")


def main(argv):
    tests = "--tests" in argv
    show = "--edges" in argv
    folders = "--folders" in argv
    dirs = [a for a in argv if not a.startswith("--")]
    if not dirs:
        here = os.path.dirname(os.path.abspath(__file__))
        crates = os.path.join(here, "..", "crates")
        dirs = sorted(os.path.join(crates, c, "src") for c in os.listdir(crates)
                      if os.path.isdir(os.path.join(crates, c, "src")))
    failed = False
    for src in dirs:
        crate = Crate(src, tests, "--reexports" in argv)
        graph = crate.edges()
        label = lambda m: name(crate, m)
        if folders:
            folded = defaultdict(set)
            for v, ws in graph.items():
                fv = v[:1]
                folded[fv]
                for w in ws:
                    if w[:1] != fv and w != ():
                        folded[fv].add(w[:1])
            graph = folded
            label = lambda m: (m[0] + ("/" if os.path.isdir(os.path.join(src, m[0])) else ".rs")) if m else "lib.rs"
        if show:
            for v in sorted(graph):
                for w in sorted(graph[v]):
                    print(f"{label(v)} -> {label(w)}")
        cycles = [c for c in tarjan(graph) if len(c) > 1]
        rel = os.path.relpath(src)
        if not cycles:
            print(f"{rel}: no cycles between {'folders' if folders else 'files'} ({len(graph)} nodes)")
            continue
        failed = True
        for comp in cycles:
            cyc = one_cycle(graph, comp)
            print(f"{rel}: cycle among {len(comp)}: {' -> '.join(label(m) for m in cyc)}")
            print("    members: " + ", ".join(sorted(label(m) for m in comp)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
