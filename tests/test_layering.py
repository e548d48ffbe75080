"""The package layering: dependencies run one way (cli -> stages -> store -> base), with no import
cycles between modules, function-level imports included.

``LAYERS`` is the one place that lists which traceflow package may import which. A new edge is a
design decision: add it here, in docs/architecture.md, and say why in the commit.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

import traceflow

PACKAGE = Path(traceflow.__file__).parent

#: package -> the traceflow packages its modules may import ("base" = the modules directly in
#: traceflow/ and the packaged queries). Imports inside a package are always allowed (cycles aside).
LAYERS: dict[str, set[str]] = {
    "entry": {"cli", "store", "base"},  # traceflow._entry / __main__: the console script
    "cli": {
        "collectors",
        "dashboards",
        "importers",
        "analysis",
        "replay",
        "kv",
        "otlp",
        "engines",
        "store",
        "base",
    },
    "dashboards": {"collectors", "importers", "analysis", "replay", "kv", "store", "base"},
    "collectors": {"otlp", "store", "base"},
    "importers": {"otlp", "store", "base"},
    "replay": {"analysis", "store", "base"},
    "kv": {"replay", "store", "base"},
    "analysis": {"store", "base"},
    "engines": {"store", "base"},  # Spark and other engines over the lake (issue 15)
    "otlp": {"base"},
    "store": {"base"},
    "base": {"base"},
}


def package_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "traceflow":
        raise ValueError(module)
    if len(parts) == 1:
        return "base"
    if parts[1] in ("_entry", "__main__"):
        return "entry"
    sub = PACKAGE / parts[1]
    if sub.is_dir() and parts[1] != "queries":
        return parts[1]
    return "base"


def modules() -> Iterator[tuple[str, Path]]:
    found = (Path(d) / f for d, _, fs in os.walk(PACKAGE, followlinks=True) for f in fs if f.endswith(".py"))
    for path in sorted(found):  # the walk follows the collectors/dashboards links (rglob does not)
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = ["traceflow", *rel.parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def imports(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """Every traceflow module ``module`` imports, at any depth (function bodies included)."""
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "traceflow":
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "traceflow":
                continue
            for alias in node.names:  # `from traceflow.x import y` may name a module y
                yield (
                    (f"{target}.{alias.name}" if is_module(f"{target}.{alias.name}") else target),
                    node.lineno,
                )


def is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def graph() -> dict[str, dict[str, int]]:
    known = dict(modules())
    edges: dict[str, dict[str, int]] = {m: {} for m in known}
    for module, path in known.items():
        for target, line in imports(module, path):
            while target not in known and "." in target:  # `from traceflow.x import name`
                target = target.rsplit(".", 1)[0]
            if target != module and target in known:
                edges[module].setdefault(target, line)
    return edges


def test_every_package_is_listed() -> None:
    packages = {package_of(m) for m, _ in modules()}
    assert packages <= set(LAYERS), f"add {sorted(packages - set(LAYERS))} to LAYERS"


def test_dependencies_run_one_way() -> None:
    bad = []
    for module, targets in graph().items():
        src = package_of(module)
        for target, line in targets.items():
            dst = package_of(target)
            if dst != src and dst not in LAYERS[src]:
                bad.append(f"{module}:{line} imports {target} ({src} -> {dst} is not in LAYERS)")
    assert not bad, "\n".join(bad)


def test_nothing_imports_the_cli() -> None:
    bad = [
        f"{m}:{line} imports {t}"
        for m, targets in graph().items()
        for t, line in targets.items()
        if package_of(t) == "cli" and package_of(m) not in ("cli", "entry")
    ]
    assert not bad, "\n".join(bad)


def test_no_import_cycles() -> None:
    """Tarjan's strongly connected components over the module graph: every one has one module."""
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
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
                cycles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_house_stays_small() -> None:
    """At most 12 modules directly in traceflow/, and none over 700 lines: split by responsibility."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 12, top
    big = {m: n for m, path in modules() if (n := len(path.read_text().splitlines())) > 700}
    assert not big, big
