"""Package layout: no import cycle between bnexp's modules, no import up a layer or across one (the layers of
docs/development.md, :data:`LAYERS`), no two folders of bnexp that import each other.

The import graph is built from the ``import`` statements of the source files (all of
them, including imports inside functions), so a cycle hidden behind a lazy import is
found too.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "bnexp"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _resolve(target: str, modules: dict[str, Path]) -> str | None:
    """The bnexp module a dotted name refers to (``bnexp.nets.bn.NoisyBatchNorm`` -> ``bnexp.nets.bn``)."""
    while target:
        if target in modules:
            return target
        target = target.rpartition(".")[0]
    return None


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """{module: set of bnexp modules it imports}. A package's ``__init__`` counts as the package."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        package = name if is_pkg else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for t in targets:
                dep = _resolve(t, modules)
                if dep is not None and dep != name:
                    deps.add(dep)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search with colours)."""
    colour = {n: 0 for n in graph}  # 0 new, 1 on the stack, 2 done
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        colour[n] = 1
        stack.append(n)
        for d in sorted(graph[n]):
            if colour[d] == 1:
                return stack[stack.index(d):] + [d]
            if colour[d] == 0:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        colour[n] = 2
        return None

    for n in sorted(graph):
        if colour[n] == 0:
            found = visit(n)
            if found:
                return found
    return None


def test_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_import_graph_sees_lazy_and_from_imports():
    graph = import_graph(_modules())
    # a package import counts as the package's __init__ ...
    assert "bnexp.nets.bn" in graph["bnexp.nets.models"]
    # ... and the bn package's __init__ imports its submodules
    assert {"bnexp.nets.bn.functional", "bnexp.nets.bn.noisy", "bnexp.nets.bn.population",
            "bnexp.nets.bn.reference"} <= graph["bnexp.nets.bn"]


def test_no_import_cycle_in_bnexp():
    cycle = find_cycle(import_graph(_modules()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_bn_math_depends_on_nothing_else_in_bnexp():
    graph = import_graph(_modules())
    for name, deps in graph.items():
        if name == "bnexp.nets.bn" or name.startswith("bnexp.nets.bn."):
            outside = {d for d in deps if not (d == "bnexp.nets.bn" or d.startswith("bnexp.nets.bn."))}
            assert not outside, f"{name} imports {sorted(outside)}"


def test_every_third_party_import_is_a_runtime_dependency():
    """What bnexp imports (bnexp report included: scipy) is installed by `pip install .` alone: a dependency
    of pyproject.toml or one of theirs; mlflow only through the [mlflow] extra (imported on logger=mlflow)."""
    import ast
    import importlib.metadata as md
    import re
    import sys
    import tomllib

    root = Path(__file__).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]

    def canon(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    def name_of(req: str) -> str:
        return canon(re.split(r"[<>=!~\[; ]", req.strip(), maxsplit=1)[0])

    installed, todo = set(), [name_of(d) for d in project["dependencies"]]
    while todo:  # the dependencies and theirs (not their extras)
        dist = todo.pop()
        if dist in installed:
            continue
        installed.add(dist)
        try:
            todo += [name_of(r) for r in md.requires(dist) or [] if "extra ==" not in r]
        except md.PackageNotFoundError:
            pass
    extra = {name_of(d) for d in project["optional-dependencies"]["mlflow"]}
    modules = set()
    for path in (root / "bnexp").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    third_party = sorted(m for m in modules if m not in sys.stdlib_module_names and m != "bnexp")
    dists = md.packages_distributions()
    assert "scipy" in third_party
    for module in third_party:
        owners = {canon(d) for d in dists.get(module, [])}
        assert owners & installed or (module == "mlflow" and owners & extra), (module, owners)


@pytest.mark.slow
def test_a_wheel_ships_the_configs_and_trains_from_any_folder(tmp_path, data_root):
    """`pip install .` (a wheel, not an editable install) carries conf/ as bnexp/conf (setup.py), so bnexp runs
    with no checkout: a bad value is refused by name and a 10-step run finishes."""
    import importlib.util
    import os
    import shutil
    import subprocess
    import sys
    import zipfile

    setuptools = pytest.importorskip("setuptools")  # no download: the wheel is built with the installed setuptools
    version = tuple(int(x) for x in setuptools.__version__.split(".")[:2])
    if version < (70, 1) and importlib.util.find_spec("wheel") is None:
        pytest.skip(f"setuptools {setuptools.__version__} without the wheel package cannot build a wheel offline")
    root = Path(__file__).resolve().parents[1]
    src = tmp_path / "src"  # a copy of what the wheel is built from: no build/ left in (or taken from) the checkout
    for name in ("bnexp", "hydra_plugins", "conf"):
        shutil.copytree(root / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(root / name, src / name)
    pip = [sys.executable, "-m", "pip", "-q"]
    subprocess.run(pip + ["wheel", str(src), "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "whl")],
                   check=True, capture_output=True, cwd=tmp_path)
    (wheel,) = (tmp_path / "whl").glob("bnexp-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {n[len("bnexp/"):] for n in names if n.startswith("bnexp/conf/")}
    assert shipped == {str(p.relative_to(root)) for p in (root / "conf").rglob("*.yaml")}
    assert "hydra_plugins/bnexp_stacked_launcher/stacked_launcher.py" in names
    subprocess.run(pip + ["install", "--no-deps", "--target", str(tmp_path / "site"), str(wheel)], check=True,
                   capture_output=True)
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"), BNEXP_DATA_ROOT=str(data_root))
    (tmp_path / "work").mkdir()

    def bnexp(*args):
        return subprocess.run([sys.executable, "-m", "bnexp", "train", *args], cwd=tmp_path / "work", env=env,
                              capture_output=True, text=True, timeout=300)

    bad = bnexp("lr=abc")
    assert bad.returncode == 2 and "lr takes a number" in bad.stderr, bad.stderr
    run = bnexp("trainer.max_steps=10", "trainer.eval_every=5", "trainer.progress=false", "hydra.run.dir=run")
    assert run.returncode == 0, run.stderr
    assert '"status": "finished"' in (tmp_path / "work" / "run" / "summary.json").read_text()


# The layers of bnexp, bottom up (docs/development.md, "Layers"): a folder (subpackage) or top-level module of
# bnexp imports only from layers below its own; folders of one layer import nothing of each other.
LAYERS = (("bnexp", "errors", "interrupts"), ("runfolders",), ("config",), ("nets",), ("train",), ("analysis",),
          ("designs", "report"), ("cli",), ("__main__",))


def _part(module: str) -> str:
    """The layer part of a bnexp module: its folder under bnexp/ (``bnexp.train.ics.gradient`` -> ``train``), a
    top-level module's own name (``bnexp.cli`` -> ``cli``), ``bnexp`` for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


@functools.lru_cache(maxsize=1)
def _bnexp_graph() -> dict[str, set[str]]:
    """:func:`import_graph` of bnexp as it stands, built once for the layer tests."""
    return import_graph(_modules())


def _level(part: str) -> int:
    return next(i for i, names in enumerate(LAYERS) if part in names)


def _crossings(graph: dict[str, set[str]]) -> set[tuple[str, str, str, str]]:
    """{(part, imported part, module, imported module)} of every import between two parts of bnexp."""
    return {(_part(m), _part(d), m, d) for m, deps in graph.items() for d in deps if _part(m) != _part(d)}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import from a layer up to a higher one, or across to another folder of its own layer, as
    "module -> imported module (part -> part)"."""
    return sorted(f"{m} -> {d} ({a} -> {b})" for a, b, m, d in _crossings(graph) if _level(b) >= _level(a))


def mutual_parts(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The pairs of parts of bnexp that import each other."""
    edges = {(a, b) for a, b, _, _ in _crossings(graph)}
    return sorted((a, b) for a, b in edges if (b, a) in edges and a < b)


def test_every_part_of_bnexp_has_a_layer():
    parts = {_part(m) for m in _modules()}
    assert parts == {p for names in LAYERS for p in names}, "place a new folder or module in LAYERS and docs/development.md"


def test_the_layer_checks_find_planted_upward_and_mutual_imports():
    graph = {"bnexp.config.schema": {"bnexp.train.loggers"}, "bnexp.train.loggers": {"bnexp.config.checks"},
             "bnexp.report.seed_advice": {"bnexp.designs.ladder"}, "bnexp.designs.ladder": {"bnexp.analysis.rules"}}
    assert upward_imports(graph) == ["bnexp.config.schema -> bnexp.train.loggers (config -> train)",
                                     "bnexp.report.seed_advice -> bnexp.designs.ladder (report -> designs)"]
    assert mutual_parts(graph) == [("config", "train")]
    assert upward_imports({"bnexp.designs.ladder": {"bnexp.analysis.rules", "bnexp.designs.stages"}}) == []


def test_no_import_runs_up_a_layer_or_across_one():
    """Lazy imports inside functions count (:func:`import_graph`)."""
    found = upward_imports(_bnexp_graph())
    assert not found, "imports against the layers (docs/development.md):\n" + "\n".join(found)


def test_no_two_parts_of_bnexp_import_each_other():
    assert mutual_parts(_bnexp_graph()) == []


def test_development_md_names_the_layers_in_this_order():
    text = (PKG.parent / "docs" / "development.md").read_text()
    line = next((ln for ln in text.splitlines() if ln.startswith("**Layers**")), None)
    assert line is not None, "docs/development.md has no **Layers** line"
    named = [p for p in (w.strip("`,.;:()") for w in line.split()) if any(p in names for names in LAYERS)]
    assert named == [p for names in LAYERS for p in names], line


def test_development_md_names_every_module_of_each_folder_and_no_other():
    """The layout table of docs/development.md: the row of each folder of bnexp names each of its modules
    (``name.py``; a subfolder as ``name/``, whose modules it may name as well) and no module that does not exist."""
    text = (PKG.parent / "docs" / "development.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `bnexp/(\w+)/` \|(.*)$", text, re.M)}
    folders = sorted(d.name for d in PKG.iterdir() if d.is_dir() and (d / "__init__.py").exists())
    assert sorted(rows) == folders
    for folder, row in rows.items():
        here = PKG / folder
        files = {p.name for p in here.glob("*.py") if p.name != "__init__.py"}
        subs = {d.name + "/" for d in here.iterdir() if d.is_dir() and not d.name.startswith("__")}
        deeper = {p.name for p in here.rglob("*.py")}  # a subfolder's modules may be named too
        named = set(re.findall(r"`(\w+\.py)`", row)) | set(re.findall(r"`(\w+/)`", row))
        assert files | subs <= named and named <= deeper | subs, (
            f"bnexp/{folder}/: not in docs/development.md: {sorted(files | subs - named)}; "
            f"named there but absent: {sorted(named - deeper - subs)}")


def test_no_two_modules_of_bnexp_share_a_file_name():
    """A file name says which module it is: ``cli.py`` or ``stacked.py`` twice would need its folder to be
    read (docs/development.md, modules by concept)."""
    seen: dict[str, list[str]] = {}
    for path in PKG.rglob("*.py"):
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(str(path.relative_to(PKG)))
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}
