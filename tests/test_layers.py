"""The package's layers (docs/architecture.md): imports run one way (relative ones included)
and in no cycle, and heavy libraries load only where they are used."""
import ast
import json
import re
import subprocess
import sys

import pytest

from conftest import REPO

PACKAGE = REPO / "src" / "selfknow"

#: the layers in order; a module may import its own layer and the ones before it
LAYERS = [
    ("config", ["selfknow.schema", "selfknow.config", "selfknow.paths"]),
    ("records", ["selfknow.records", "selfknow.resumable", "selfknow.runlog", "selfknow.code_inputs", "selfknow.readers"]),
    ("stats", ["selfknow.stats"]),
    ("models", ["selfknow.models"]),
    ("stages", ["selfknow.stages"]),
    ("world", ["selfknow.world"]),
    ("report", ["selfknow.report"]),
    ("protocols", ["selfknow.protocols"]),
    ("tools", ["selfknow.catalogs", "selfknow.runner", "selfknow.dag", "selfknow.plan", "selfknow.plan_items", "selfknow.plan_runtimes", "selfknow.plan_report", "selfknow.placement", "selfknow.fidelity", "selfknow.preflight", "selfknow.rehearsal", "selfknow.response_io", "selfknow.cli"]),
]


def _layer(module: str) -> int | None:
    for i, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    return None


def _modules() -> list[tuple[str, ast.Module]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(("selfknow", *path.relative_to(PACKAGE).with_suffix("").parts))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        tree.package = name.removesuffix(".__init__") if path.name == "__init__.py" else name.rpartition(".")[0]
        out.append((name.removesuffix(".__init__"), tree))
    return out


def _runtime_nodes(tree: ast.AST):
    """Every node of `tree` but those under `if TYPE_CHECKING:`, imports for type annotations
    that never run."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in (child, *_runtime_nodes(child)))
            continue
        yield node
        yield from _runtime_nodes(node)


def _imports(tree: ast.Module, runtime_only: bool = False) -> set[str]:
    """The selfknow modules `tree` imports, relative imports resolved against its package
    (`tree.package`): for `from X import a`, X and X.a (a submodule or a name in X)."""
    names = set()
    for node in (_runtime_nodes(tree) if runtime_only else ast.walk(tree)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = tree.package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module
            names.add(module)
            names.update(f"{module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return {n for n in names if n.startswith("selfknow.")}


def test_relative_imports_are_resolved_against_their_package():
    """`from .x import` and `from ..x import` count as imports of the modules they name, from a
    module and from a package's __init__ alike (so an upward one is caught)."""
    code = ast.parse("from ..smooth_ece import smooth_ece\nfrom . import contrast\n"
                     "from ...protocols.persistent import jobs\n")
    code.package = "selfknow.stats.persistent"
    got = _imports(code)
    assert {"selfknow.stats.smooth_ece", "selfknow.stats.persistent.contrast",
            "selfknow.protocols.persistent.jobs"} <= got
    assert max(_layer(m) for m in got) == _layer("selfknow.protocols")
    found = dict(_modules())
    assert "selfknow.stats.smooth_ece" in _imports(found["selfknow.stats.persistent.bootstrap"])
    assert "selfknow.rehearsal.server" in _imports(found["selfknow.rehearsal.harness"])


def test_every_module_has_a_layer_and_imports_run_one_way():
    upward = []
    for name, tree in _modules():
        if name == "selfknow":
            continue
        mine = _layer(name)
        assert mine is not None, f"{name} is in no layer of LAYERS (and of docs/architecture.md)"
        for imported in _imports(tree):
            theirs = _layer(imported)
            if theirs is not None and theirs > mine:
                upward.append(f"{name} ({LAYERS[mine][0]}) imports {imported} ({LAYERS[theirs][0]})")
    assert not upward, "\n".join(upward)


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    """Import cycles of `graph` (module -> modules it imports), one path per back edge."""
    found, state = [], {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for other in sorted(graph[module]):
            if state.get(other) == "open":
                found.append(" -> ".join(path[path.index(other):] + [other]))
            elif other not in state:
                visit(other, path + [other])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return found


def test_no_import_cycle():
    """No module imports itself through others at run time, function-local imports included
    (a cycle makes the import order matter). A submodule's import of its own package is the
    one Python makes anyway before running it, so it does not count."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a -> b -> c -> a"]
    modules = dict(_modules())
    graph = {name: {m for m in _imports(tree, runtime_only=True)
                    if m in modules and m != name and not name.startswith(m + ".")}
             for name, tree in modules.items()}
    assert not _cycles(graph), "\n".join(_cycles(graph))


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
    assert _loaded_by(modules, [heavy]) == [], f"importing every selfknow module loads {heavy}"


def _loaded_by(modules, libraries: list[str]) -> list[str]:
    """Those of `libraries` that a fresh interpreter has loaded after importing `modules`."""
    code = "import importlib, json, sys\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules) + \
        f"print(json.dumps([m for m in {libraries!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout)


def _workflow_imports() -> set[str]:
    """The selfknow modules the Snakefile and its rule files import when Snakemake parses them."""
    found = set()
    for path in [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]:
        found.update(re.findall(r"^\s*(?:from|import)\s+(selfknow[\w.]*)", path.read_text(encoding="utf-8"), re.M))
    return found


def test_parsing_the_workflow_loads_no_heavy_library():
    """Snakemake parses the Snakefile for every invocation: each dry run, and twice in every
    cluster job (the submitted job and its srun step). What it imports then stays light: scipy
    alone added 1.4 s to each parse when a rule file read a constant from a scoring module."""
    modules = _workflow_imports()
    assert "selfknow.protocols.ladder.catalog" in modules
    loaded = _loaded_by(sorted(modules), ["scipy", "sklearn", "torch", "transformers", "matplotlib"])
    assert loaded == [], f"parsing the workflow loads {loaded}"
