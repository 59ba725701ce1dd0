"""The layering of ../shared/DESIGN.md, read from the source's imports: no cycles, no arrow from a
lower layer to a higher one, and the car side (sim, deploy.runtime, the data engine's shadow path)
free of torch. Static checks see every import, lazy ones inside functions included; the torch-free
checks also import the modules in a fresh interpreter and look at sys.modules."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("hydranet", "sim", "deploy", "data_engine")
CAR_SIDE = ("sim", "deploy.runtime", "deploy.metadata", "hydranet.stream", "hydranet.decoding", "hydranet.heads",
            "data_engine.fleet", "data_engine.shadow", "data_engine.signals")
SIM_MAY_USE = ("hydranet.geometry", "hydranet.rig", "hydranet.config", "hydranet.data", "hydranet.io")  # the shared vocabulary


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for p in (REPO / pkg).rglob("*.py"):
            parts = p.relative_to(REPO).with_suffix("").parts
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return mods


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rsplit(".", 1)[0] if "." in name else ""
    return name or None


def imports(module: str, top_level_only: bool = False) -> set[str]:
    """Project modules `module` imports (all imports, or only those run at import time) and the
    external top-level packages it imports, prefixed "ext:"."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    pkg = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for n in names:
            target = _resolve(n)
            if target is not None and target != module:
                out.add(target)
            elif target is None and n.split(".")[0] not in PACKAGES:
                out.add("ext:" + n.split(".")[0])
    return out


def _reach(start: str, top_level_only: bool) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        for t in imports(m, top_level_only):
            if t not in seen:
                seen.add(t)
                if not t.startswith("ext:"):
                    todo.append(t)
    return seen


def test_no_import_cycles():
    """Tarjan over module imports (a package and its own submodules are not a cycle)."""
    graph = {m: {t for t in imports(m) if not t.startswith("ext:") and not (m.startswith(t + ".") or t.startswith(m + "."))}
             for m in MODULES}
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
            if len(comp) > 1:
                cycles.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for m in graph:
        if m not in index:
            visit(m)
    assert cycles == []


APP = "hydranet.cli"  # the application (the `hydranet` command, the demo): the top floor, nothing imports it


@pytest.mark.parametrize("module", sorted(MODULES))
def test_layering(module):
    targets = {t for t in imports(module) if not t.startswith("ext:")}
    in_app = module == APP or module.startswith(APP + ".")
    if not in_app:
        assert not {t for t in targets if t == APP or t.startswith(APP + ".")}, "nothing imports the application"
    if not in_app and not module.startswith("data_engine"):
        assert not {t for t in targets if t.startswith("data_engine")}, "nothing imports the data engine (but the app)"
    if module.startswith("hydranet") and not in_app:  # the library: models, tasks, data, metrics, train, evaluate, ...
        bad = {t for t in targets if t.startswith(("deploy", "sim", "data_engine"))}
        assert not bad, f"the hydranet library imports none of sim, deploy, data_engine (only hydranet.cli may): {bad}"
    if module.startswith("deploy"):
        assert "hydranet.train" not in targets and "hydranet.evaluate" not in _reach(module, True), \
            "deploy exports models; it never imports the training loop"
    if module.startswith("sim"):
        bad = {t for t in targets if t.startswith("hydranet") and not t.startswith(SIM_MAY_USE)}
        assert not bad, f"sim may use only the shared vocabulary {SIM_MAY_USE}"


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO / "benchmarks").glob("*.py")))
def test_benchmarks_call_the_library_not_the_application(script):
    """benchmarks/ measure the library; the application (the CLI and the demo) is the top floor nothing imports
    (a benchmark that needs a user's command line runs `python -m hydranet.cli` as a user would)."""
    tree = ast.parse((REPO / "benchmarks" / script).read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    bad = sorted(n for n in names if n == APP or n.startswith(APP + "."))
    assert not bad, f"benchmarks/{script} imports the application ({bad[0]}): call the library it wraps"


@pytest.mark.parametrize("module", [m for m in sorted(MODULES) if m.startswith(CAR_SIDE)])
def test_car_side_is_torch_free_at_import(module):
    reach = _reach(module, top_level_only=True)
    assert not {"ext:torch", "ext:torchvision"} & reach


def test_car_side_modules_load_without_torch():
    present = [m for m in sorted(MODULES) if m.startswith(CAR_SIDE) and m != "sim.__main__"]
    code = ("import importlib, sys\n"
            f"for m in {present!r}: importlib.import_module(m)\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchvision'))\n"
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_tests_do_not_import_each_other():
    """Shared test helpers live in helper modules (fake_samples, devkit, dataset_fixtures, faultlib)
    or conftest, never in another test module."""
    for p in (REPO / "tests").rglob("test_*.py"):
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0].startswith("test_"):
                pytest.fail(f"{p.name} imports {node.module}")
            if isinstance(node, ast.Import) and any(a.name.startswith("test_") for a in node.names):
                pytest.fail(f"{p.name} imports a test module")
