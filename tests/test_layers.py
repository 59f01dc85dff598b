"""The package's layers (README, Architecture): imports run one way, and heavy libraries load
only where they are used."""
import ast
import subprocess
import sys

import pytest

from conftest import REPO

PACKAGE = REPO / "src" / "selfknow"

#: the layers in order; a module may import its own layer and the ones before it
LAYERS = [
    ("config", ["selfknow.schema", "selfknow.config"]),
    ("records", ["selfknow.records", "selfknow.resumable", "selfknow.runlog", "selfknow.readers"]),
    ("stats", ["selfknow.stats"]),
    ("models", ["selfknow.models"]),
    ("stages", ["selfknow.stages"]),
    ("world", ["selfknow.world"]),
    ("report", ["selfknow.report"]),
    ("protocols", ["selfknow.protocols"]),
    ("tools", ["selfknow.plan", "selfknow.placement", "selfknow.fidelity", "selfknow.preflight", "selfknow.rehearsal", "selfknow.response_io", "selfknow.cli"]),
]


def _layer(module: str) -> int | None:
    for i, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    return None


def _modules() -> list[tuple[str, ast.Module]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(("selfknow", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
        out.append((name, ast.parse(path.read_text(encoding="utf-8"))))
    return out


def _imports(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return {n for n in names if n.startswith("selfknow.")}


def test_every_module_has_a_layer_and_imports_run_one_way():
    upward = []
    for name, tree in _modules():
        if name == "selfknow":
            continue
        mine = _layer(name)
        assert mine is not None, f"{name} is in no layer of LAYERS (and of the README's Architecture)"
        for imported in _imports(tree):
            theirs = _layer(imported)
            if theirs is not None and theirs > mine:
                upward.append(f"{name} ({LAYERS[mine][0]}) imports {imported} ({LAYERS[theirs][0]})")
    assert not upward, "\n".join(upward)


def test_no_protocol_imports_another():
    crossing = []
    for name, tree in _modules():
        if name.startswith("selfknow.protocols."):
            paper = name.split(".")[2]
            crossing += [f"{name} imports {i}" for i in _imports(tree)
                         if i.startswith("selfknow.protocols.") and i.split(".")[2] != paper]
    assert not crossing, "\n".join(crossing)


@pytest.mark.parametrize("heavy", ["torch", "transformers", "matplotlib"])
def test_importing_the_package_loads_no_heavy_library(heavy):
    """torch, transformers and matplotlib load inside the functions that use them, so the
    statistics, the config and the table code import in milliseconds."""
    modules = [name for name, _ in _modules() if not name.endswith("__main__")]
    code = "import importlib, sys\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules) + \
        f"print({heavy!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip() == "False", f"importing every selfknow module loads {heavy}"
