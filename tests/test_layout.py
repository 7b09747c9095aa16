"""The layout keeps the promises the docs make of it: dependencies point one way (no import
circle in the Rust core nor in the Python package), a module's underscored names stay its own,
binding files wrap one thing each, and what the code cites is in the repository."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from import_graph import ROOT, circles, cycle_in, python_graph, python_modules, rust_graph

PACKAGE = ROOT / "python" / "vdifrec"

#: A binding file converts, releases the GIL and converts back; past this it wraps two things.
BINDING_FILE_LINES = 400


def test_no_import_circle_in_the_rust_core() -> None:
    graph = rust_graph(ROOT / "src")
    assert len(graph) > 50, "the Rust modules were not found"
    found = circles(graph)
    assert found == [], "; ".join(" -> ".join(cycle_in(graph, c)) for c in found)


#: What each stage of the core may use (besides itself): dependencies point down the data path.
STAGES_MAY_USE = {
    "vdif": {"options", "units"},
    "record": {"vdif", "options", "units", "affinity", "endpoint"},
    "analysis": {"vdif", "record", "options", "units"},
    "sources": {"vdif", "options", "units", "affinity", "endpoint"},
    "transfer": {"vdif", "options", "units"},
    "doctor": {"options", "units"},
    "options": {"units"},
    "endpoint": {"options", "units"},
    "units": set(),
    "affinity": set(),
}


def test_each_stage_uses_only_the_stages_below_it() -> None:
    graph = rust_graph(ROOT / "src")
    stage = lambda module: module.split("::")[1] if "::" in module else "crate"  # noqa: E731
    wrong = sorted(
        f"{a} uses {b}"
        for a, used in graph.items()
        for b in used
        if stage(a) in STAGES_MAY_USE and stage(b) != stage(a) and stage(b) not in STAGES_MAY_USE[stage(a)]
    )
    assert wrong == []
    # Within the record stage, the analysis the live monitor runs is handed to it, never imported.
    assert not any(b.startswith("crate::analysis") for a, used in graph.items() if a.startswith("crate::record") for b in used)


def test_no_import_circle_in_the_python_package() -> None:
    graph = python_graph(PACKAGE)
    assert "vdifrec.cli" in graph and "vdifrec.dask" in graph
    found = circles(graph)
    assert found == [], "; ".join(" -> ".join(cycle_in(graph, c)) for c in found)


def test_the_circle_finder_finds_circles() -> None:
    # The checks above pass on an empty answer: show that a circle, direct or through a
    # function's import, is found.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert cycle_in(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def test_the_python_graph_sees_imports_inside_functions_but_not_type_hints(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n    return g\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import h\n")
    (pkg / "c.py").write_text("from . import a\n")
    graph = python_graph(pkg)
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == set() and graph["pkg.c"] == {"pkg.a"}
    (pkg / "b.py").write_text("from .c import h\n")
    assert circles(python_graph(pkg)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_the_rust_graph_follows_uses_and_reexports(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "x").mkdir(parents=True)
    (src / "lib.rs").write_text("pub mod x;\n")
    (src / "x" / "mod.rs").write_text("pub mod a;\npub mod b;\npub use a::Thing;\n")
    (src / "x" / "a.rs").write_text("use crate::x::b::{Other, more::{self as m}};\npub struct Thing;\n")
    (src / "x" / "b.rs").write_text("// crate::x::a is only a comment here\npub struct Other;\n"
                                    "#[cfg(test)]\nmod tests { use crate::x::Thing; }\n")
    graph = rust_graph(src)
    assert graph["crate::x::a"] == {"crate::x::b"} and graph["crate::x::b"] == set()
    (src / "x" / "b.rs").write_text("pub struct Other;\nfn f() -> crate::x::Thing { crate::x::Thing }\n")
    graph = rust_graph(src)
    assert graph["crate::x::b"] == {"crate::x::a"}, "the re-export leads to the module that defines Thing"
    assert circles(graph) == [["crate::x::a", "crate::x::b"]]


def test_no_module_imports_another_modules_private_names() -> None:
    # An underscore means "only this module uses it"; what another module needs is public
    # inside the package.
    found = []
    for name, path in python_modules(PACKAGE).items():
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("vdifrec")):
                private = [a.name for a in node.names if a.name.startswith("_") and a.name != "_core"]
                if private:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {', '.join(private)}")
    assert found == []


def test_no_module_reaches_into_another_modules_private_names() -> None:
    # The same rule for `module._name` on a module imported whole (`from . import record`).
    modules = python_modules(PACKAGE)
    found = []
    for name, path in modules.items():
        if path.suffix != ".py":
            continue
        tree = ast.parse(path.read_text())
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                prefix = f"{base}.{node.module}" if node.module else base
                imported |= {a.asname or a.name for a in node.names if f"{prefix}.{a.name}" in modules}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in imported
                    and node.value.id != "_core" and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert found == []


def test_no_command_imports_another() -> None:
    # Each command family stands alone; what several share is in cli.args (the options) and
    # cli.printing (what they print).
    graph = python_graph(PACKAGE)
    shared = {"vdifrec.cli", "vdifrec.cli.__main__", "vdifrec.cli.args", "vdifrec.cli.printing"}
    commands = [m for m in graph if m.startswith("vdifrec.cli.") and m not in shared]
    assert len(commands) >= 10
    wrong = {m: sorted(graph[m] & set(commands)) for m in commands if graph[m] & set(commands)}
    assert wrong == {}


def test_binding_files_wrap_one_thing() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sorted((ROOT / "src" / "python").glob("*.rs"))
        if (n := len(p.read_text().splitlines())) > BINDING_FILE_LINES
    }
    assert long == {}, f"binding files over {BINDING_FILE_LINES} lines: split them by what they wrap"


def test_the_package_top_level_reads_in_one_look() -> None:
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    assert {"cli", "dask", "analysis", "vsi"} <= set(packages)
    assert len(modules) <= 16, f"{len(modules)} top-level modules: {modules}"


def _sources() -> list[Path]:
    found = []
    for top in ("src", "python", "tests", "benches", "docs", "notebooks", "contrib", "tools", "fuzz"):
        for p in (ROOT / top).rglob("*"):
            if p.is_file() and p.suffix in {".rs", ".py", ".pyi", ".md", ".rst", ".ipynb", ".toml", ".html", ".txt"}:
                if "_build" not in p.parts and "target" not in p.parts:
                    found.append(p)
    return found + [ROOT / "README.md", ROOT / "Makefile", ROOT / "CHANGELOG.md"]


def test_what_the_code_cites_is_in_the_repository() -> None:
    outside = re.compile(r"\b(?:DESIGN|REFERENCE|STYLE)\.md\b|\.\./shared/")
    cited = re.compile(r"\bdocs/[\w./-]+\.(?:md|rst)\b")
    problems = []
    for p in _sources():
        if p == Path(__file__):
            continue
        text = p.read_text(errors="replace")
        for m in outside.finditer(text):
            problems.append(f"{p.relative_to(ROOT)} cites {m.group(0)}, which is not in the repository")
        for m in cited.finditer(text):
            if not (ROOT / m.group(0)).exists():
                problems.append(f"{p.relative_to(ROOT)} cites {m.group(0)}, which does not exist")
    assert problems == []


def test_the_command_line_runs_as_a_module() -> None:
    r = subprocess.run([sys.executable, "-m", "vdifrec.cli", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("vdifrec "), r
