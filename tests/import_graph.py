"""The import graphs of the Rust core (`src/`) and of the Python package (`python/vdifrec/`), and
the circles in them. `tests/test_layout.py` asserts there are none; run this file to see them:

    python tests/import_graph.py

Rust: a node is a module file; an edge is a path one file names in another (`use crate::a::b`,
`super::x::Y`, `crate::a::f()` in the code), resolved to the module that defines the name (a
`pub use` re-export is followed to its source). `mod x;` declarations are containment, not edges,
and `#[cfg(test)]` modules are left out: tests may use any stage.

Python: a node is a module; an edge is any import in it, at any depth (a function's import
counts: it is a circle all the same once both run), except those under `if TYPE_CHECKING:`, which
never run."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

Graph = dict[str, set[str]]


# -- Rust ------------------------------------------------------------------------------------


def rust_modules(src: Path) -> dict[str, Path]:
    """Module path (`crate::record::ring`) → file, for every module file under `src`."""
    found: dict[str, Path] = {}
    for f in sorted(src.rglob("*.rs")):
        parts = list(f.relative_to(src).with_suffix("").parts)
        if parts in (["lib"], ["main"]):
            parts = []
        elif parts[-1] == "mod":
            parts = parts[:-1]
        found["::".join(["crate", *parts])] = f
    return found


_COMMENT_OR_TEXT = re.compile(
    r'//[^\n]*|/\*.*?\*/|b?r(#*)".*?"\1|b?"(?:\\.|[^"\\])*"|b?\'(?:\\.|[^\'\\])\'',
    re.S,
)


def _strip(code: str) -> str:
    """The code without comments, strings and character literals (lifetimes stay)."""
    return _COMMENT_OR_TEXT.sub(" ", code)


def _drop_test_modules(code: str) -> str:
    """The code without its `#[cfg(test)]` items (a `mod tests { ... }` block or one item)."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", code):
        if m.start() < i:
            continue
        out.append(code[i : m.start()])
        j = m.end()
        brace, semi = code.find("{", j), code.find(";", j)
        if semi != -1 and (brace == -1 or semi < brace):
            i = semi + 1
            continue
        depth = 0
        for k in range(brace, len(code)):
            depth += {"{": 1, "}": -1}.get(code[k], 0)
            if depth == 0:
                i = k + 1
                break
        else:
            i = len(code)
    out.append(code[i:])
    return "".join(out)


def _inline_modules_flattened(code: str) -> str:
    """The code with `super::` inside an inline `mod name { ... }` read as the file's own module
    (`self::`), so that an inline module's paths count as its file's."""
    out, i = [], 0
    for m in re.finditer(r"\bmod\s+\w+\s*\{", code):
        if m.start() < i:
            continue
        depth, end = 0, len(code)
        for k in range(m.end() - 1, len(code)):
            depth += {"{": 1, "}": -1}.get(code[k], 0)
            if depth == 0:
                end = k + 1
                break
        out.append(code[i : m.start()])
        out.append(code[m.start() : end].replace("super::", "self::"))
        i = end
    out.append(code[i:])
    return "".join(out)


def _use_trees(code: str) -> Iterator[tuple[bool, str]]:
    """(is `pub use`, the use tree's text) of each `use` statement."""
    for m in re.finditer(r"(\bpub(?:\([^)]*\))?\s+)?\buse\s+([^;]+);", code):
        tree = re.sub(r"\s+", " ", m.group(2)).strip()
        yield bool(m.group(1)), re.sub(r"\s*([{},]|::)\s*", r"\1", tree)


def _expand(tree: str, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(path, name it is known by) for every leaf of a use tree (`a::{b, c::{self, d as e}}`)."""
    depth, start = 0, None
    for i, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}":
            depth -= 1
    if start is None:
        path, _, alias = tree.partition(" as ")
        full = prefix + path
        if full.endswith("::self"):
            full = full[: -len("::self")]
        yield full, alias or full.rpartition("::")[2]
        return
    head = tree[:start]
    inner = tree[start + 1 : tree.rindex("}")]
    depth, piece = 0, ""
    for ch in inner + ",":
        if ch == "," and depth == 0:
            if piece:
                yield from _expand(piece, prefix + head)
            piece = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        piece += ch


def _absolute(path: str, module: str) -> str | None:
    """`path` written in `module` as an absolute `crate::...` path; None for other crates."""
    parts = path.split("::")
    base = module.split("::")
    if parts[0] == "crate":
        return path
    if parts[0] == "self":
        return "::".join(base + parts[1:])
    if parts[0] == "super":
        while parts and parts[0] == "super":
            base, parts = base[:-1], parts[1:]
        return "::".join(base + parts)
    return None


class RustCrate:
    """The crate's modules, what each names, and what each re-exports."""

    def __init__(self, src: Path) -> None:
        files = rust_modules(src)
        # A module declared `#[cfg(test)] mod name;` lives in its own file: a test module too.
        test_only = {
            f"{m}::{name}" for m, f in files.items() for name in re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", f.read_text())
        }
        self.files = {m: f for m, f in files.items() if not any(m == t or m.startswith(t + "::") for t in test_only)}
        self.code = {m: _inline_modules_flattened(_drop_test_modules(_strip(f.read_text()))) for m, f in self.files.items()}
        # module → {name: absolute path} of its `pub use` re-exports.
        self.reexports: dict[str, dict[str, str]] = {}
        self.globs: dict[str, list[str]] = {}
        for m, code in self.code.items():
            for public, tree in _use_trees(code):
                if not public:
                    continue
                for path, name in _expand(tree):
                    full = _absolute(path, m) or self._child(m, path)
                    if full is None:
                        continue
                    if name == "*":
                        self.globs.setdefault(m, []).append(full.rpartition("::")[0])
                    else:
                        self.reexports.setdefault(m, {})[name] = full

    def _child(self, module: str, path: str) -> str | None:
        """A path that starts at one of `module`'s own submodules (`pub use decode::X` in mod.rs)."""
        full = f"{module}::{path}"
        head = full.rpartition("::")[0]
        return full if any(head == k or head.startswith(k + "::") for k in self.files if k.startswith(module + "::")) else None

    def resolve(self, path: str, seen: frozenset[str] = frozenset()) -> str | None:
        """The module file that defines what `path` names."""
        parts = path.split("::")
        for n in range(len(parts), 0, -1):
            module = "::".join(parts[:n])
            if module in self.files:
                rest = parts[n:]
                if rest and module not in seen:
                    target = self.reexports.get(module, {}).get(rest[0])
                    if target is not None:
                        return self.resolve("::".join([target, *rest[1:]]), seen | {module})
                    for glob in self.globs.get(module, []):
                        inner = self.resolve(f"{glob}::{rest[0]}", seen | {module})
                        if inner is not None and inner != glob:
                            return inner
                return module
        return None

    def graph(self) -> Graph:
        edges: Graph = {m: set() for m in self.files}
        for m, code in self.code.items():
            aliases: dict[str, str] = {}
            names: list[str] = []
            for _public, tree in _use_trees(code):
                for path, name in _expand(tree):
                    full = _absolute(path, m) or self._child(m, path)
                    if full is None:
                        continue
                    names.append(full)
                    if full in self.files:
                        aliases[name] = full
            body = re.sub(r"\b(?:pub(?:\([^)]*\))?\s+)?use\s+[^;]+;", " ", code)
            for p in re.finditer(r"\b(?:crate|super|self)(?:::[A-Za-z_]\w*)+", body):
                full = _absolute(p.group(0), m)
                if full is not None:
                    names.append(full)
            for p in re.finditer(r"(?<![:\w])([A-Za-z_]\w*)((?:::[A-Za-z_]\w*)+)", body):
                if p.group(1) in aliases:
                    names.append(aliases[p.group(1)] + p.group(2))
            for full in names:
                target = self.resolve(full)
                if target is not None and target != m and not m.startswith(target + "::") or (
                    target is not None and target != m and self._names_item_of(target, full)
                ):
                    edges[m].add(target)  # type: ignore[arg-type]
        return edges

    def _names_item_of(self, module: str, path: str) -> bool:
        """Whether `path` names an item of `module` itself rather than walking through it to a
        submodule (a parent's own items count; passing through `crate::record` does not)."""
        return path != module and self.resolve(path) == module


# -- Python ----------------------------------------------------------------------------------


def python_modules(package: Path) -> dict[str, Path]:
    """Dotted module name → file, for every module of the package (extension stubs included)."""
    found: dict[str, Path] = {}
    base = package.parent
    for f in sorted(package.rglob("*.py*")):
        if f.suffix not in (".py", ".pyi") or "__pycache__" in f.parts:
            continue
        parts = list(f.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(parts)
        if f.suffix == ".pyi" and name in found:
            continue
        found[name] = f
    return found


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _type_checking_only(node):
            yield from (n for child in node.orelse for n in _imports(ast.Module(body=[child], type_ignores=[])))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _imports(node)


def python_graph(package: Path) -> Graph:
    modules = python_modules(package)
    edges: Graph = {m: set() for m in modules}
    for name, f in modules.items():
        if f.suffix == ".pyi":
            continue
        is_package = f.name == "__init__.py"
        here = name.split(".") if is_package else name.split(".")[:-1]
        for node in _imports(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = here[: len(here) - node.level + 1] if node.level else []
                mod = ".".join(base + ([node.module] if node.module else []))
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names]
            for t in targets:
                if isinstance(node, ast.ImportFrom) and node.level and t not in modules:
                    # A relative import names a module of the package, which must exist.
                    raise ImportError(f"{f}:{node.lineno}: imports {t}, which is no module of the package")
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges[name].add(t)
    return edges


# -- circles ---------------------------------------------------------------------------------


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def cycle_in(graph: Graph, component: Iterable[str]) -> list[str]:
    """One closed path through a circle's nodes, to show in a failure."""
    nodes = set(component)
    start = min(nodes)
    path, seen = [start], {start}
    while True:
        nxt = sorted(w for w in graph[path[-1]] if w in nodes)
        back = [w for w in nxt if w == start]
        if back and len(path) > 1:
            return [*path, start]
        fresh = [w for w in nxt if w not in seen]
        if not fresh:
            i = path.index(next(w for w in nxt if w in seen))
            return [*path[i:], path[i]]
        path.append(fresh[0])
        seen.add(fresh[0])


def rust_graph(src: Path = ROOT / "src") -> Graph:
    return RustCrate(src).graph()


def report(kind: str, graph: Graph) -> int:
    found = circles(graph)
    for c in found:
        print(f"{kind} circle: {' -> '.join(cycle_in(graph, c))}")
    print(f"{kind}: {len(graph)} modules, {sum(map(len, graph.values()))} edges, {len(found)} circle(s)")
    return len(found)


if __name__ == "__main__":
    n = report("rust", rust_graph()) + report("python", python_graph(ROOT / "python" / "vdifrec"))
    sys.exit(1 if n else 0)
