"""The package code a workflow job executes, as a fingerprint for its params (docs/running.md).

Snakemake reruns a job when its params change, but sees only a rule's own script, and every
rule runs the same one (scripts/run_job.py, `selfknow.runner`). `job_fingerprint(job)` hashes
the source of every function, class and module-level statement of `selfknow` that the rule's
job (its "module:function") and the runner can reach, found by reading the source (`ast`),
never by importing it: the Snakefile computes one per rule at each parse, which must stay
light (no numpy, torch or scipy). Reached means named: a call or reference by name or through
an imported module's attribute, a function-local import, and a string naming a module
("selfknow.models.hf", as registries import lazily) or a symbol ("selfknow.x:f"). A name a
function imports is resolved as one its module imports: `R.f` after `from selfknow import x as R`
reaches `x.f`, not all of `x`. A module reached is reached with the statements that run on its
import (its own and its packages'); a module whose import runs no statement but definitions and
imports adds nothing of its own, so a new module that a job imports but whose definitions it
never reaches changes no fingerprint. A definition that locates files beside its module
(`__file__`) brings the data files there (the prompts, the provider table). A module used other
than through an attribute (`getattr(mod, n)`) counts whole. An import-time check (a module-level `if` that only raises) is not reached: it can
stop a job, never change what it writes. So an edit to one function reruns the jobs that reach
that function and nothing else.

What is hashed is the code's syntax tree (`ast.dump`, no line numbers) with its docstrings and
other bare string statements dropped: a docstring, a comment or a reformatting changes no
fingerprint (a new Python version may change the dump, and so rerun every job once). Plumbing,
code that cannot change what a job writes to its outputs, is left out of every closure
(`PLUMBING_MODULES`, `PLUMBING_SYMBOLS`): the job log (`selfknow.runlog`), this module (it only
hashes, and checks below) and the distribution's version label (`selfknow.__version__`, which no
job reads). The runner's mapping of a rule's keys to the job's arguments stays in: it decides
what the job computes from. A catalog may assemble a reference from strings (`_T +
"table_job"`) so that a job reading the catalog for a title does not reach every other table's
job; such a reference is not reached, and a job that calls a builder through its catalog entry
(`Table.build`) checks, under `running(job)`, that its closure holds the builder: one it does
not is an error naming the job, never code silently left out of its fingerprint. Third-party
packages (numpy, scipy, torch) are not hashed: every table's provenance sidecar records their
versions (`selfknow.report.provenance.PACKAGES`), and an upgrade reruns nothing
(docs/running.md)."""
from __future__ import annotations

import ast
import copy
import hashlib
import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterator, NamedTuple

PACKAGE = "selfknow"
#: the package's source tree (an editable install's checkout, or site-packages)
PACKAGE_DIR = Path(__file__).resolve().parent
#: a string constant that names a module of the package, or one of its symbols ("module:name")
_NAMED = re.compile(rf"^({PACKAGE}(?:\.\w+)*)(?::(\w+))?$")

#: the function every rule's job runs under (scripts/run_job.py)
RUNNER = f"{PACKAGE}.runner:run_job"
#: what cannot change a job's outputs, left out of every closure: whole modules, and definitions
PLUMBING_MODULES = (f"{PACKAGE}.runlog", f"{PACKAGE}.code_inputs")
PLUMBING_SYMBOLS = frozenset({(PACKAGE, "__version__")})

#: a definition: (module, top-level name), or (module, None) for the statements run on import
Symbol = tuple[str, "str | None"]


class Uses(NamedTuple):
    """What a piece of code names, resolved against its module's scope when reached."""
    names: frozenset[str]
    #: (name, attribute chain): `C.TABLES` -> ("C", ("TABLES",))
    attrs: frozenset[tuple[str, tuple[str, ...]]]
    #: named strings, as `_import_targets` gives them
    targets: frozenset[tuple]
    #: function-local imports: (local name, what it names), resolved like a module's `bound`
    local: frozenset[tuple[str, tuple]]


@dataclass
class _Module:
    name: str
    path: Path
    #: top-level name -> (normal form, `_normal`, and what it uses)
    defs: dict[str, tuple[str, Uses]] = field(default_factory=dict)
    #: top-level name bound by an import -> what it names
    bound: dict[str, tuple] = field(default_factory=dict)
    #: the statements run on import (other than definitions): normal form and references
    body: tuple[str, Uses | None] = ("", None)
    #: top-level names whose definitions read `__file__`
    locates: set[str] = field(default_factory=set)


@lru_cache(maxsize=None)
def _modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> source file."""
    out = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        parts = path.relative_to(PACKAGE_DIR).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join((PACKAGE, *parts))] = path
    return out


def _is_module(name: str) -> bool:
    return name in _modules()


def _import_targets(node: ast.Import | ast.ImportFrom, package: str) -> dict[str, tuple]:
    """Local name -> ("module", m) or ("symbol", m, name) for one import statement."""
    out = {}
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.asname:
                out[a.asname] = ("module", a.name)
            else:                                   # `import a.b` binds `a`, and runs a.b
                out[a.name.split(".")[0]] = ("module", a.name.split(".")[0])
                out[f"<import {a.name}>"] = ("module", a.name)
        return out
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[:len(parts) - node.level + 1])
        module = f"{base}.{node.module}" if node.module else base
    else:
        module = node.module or ""
    for a in node.names:
        out[a.asname or a.name] = ("symbol", module, a.name)
    return out


def _uses(nodes, package: str) -> tuple[Uses, bool]:
    """What `nodes` use, and whether they read `__file__`. An attribute chain on a name
    (`C.TABLES`, `selfknow.x.f`) counts as the chain, its name alone as nothing."""
    walked = [n for node in nodes for n in ast.walk(node)]
    inner = {id(n.value) for n in walked if isinstance(n, ast.Attribute)}
    names, attrs, targets, local = set(), set(), set(), set()
    for n in walked:
        if isinstance(n, ast.Name):
            if id(n) not in inner:
                names.add(n.id)
        elif isinstance(n, ast.Attribute):
            if id(n) in inner:
                continue
            chain, cur = [], n
            while isinstance(cur, ast.Attribute):
                chain.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name):
                attrs.add((cur.id, tuple(reversed(chain))))
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            local.update(_import_targets(n, package).items())
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and (m := _NAMED.match(n.value)):
            module, name = m.groups()
            targets.add(("symbol", module, name) if name else ("module", module))
    return Uses(frozenset(names), frozenset(attrs), frozenset(targets), frozenset(local)), "__file__" in names


def _bare_string(stmt: ast.stmt) -> bool:
    """A docstring, or any other string written as a statement of its own (it does nothing)."""
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _normal(node: ast.stmt) -> str:
    """`node`'s syntax tree without line numbers, docstrings or other bare string statements:
    what a comment, a docstring or a reformatting leaves unchanged."""
    node = copy.deepcopy(node)
    for n in ast.walk(node):
        for attr in ("body", "orelse", "finalbody"):
            stmts = getattr(n, attr, None)
            if isinstance(stmts, list):
                setattr(n, attr, [s for s in stmts if not _bare_string(s)])
    return ast.dump(node)


@lru_cache(maxsize=None)
def _parse(name: str) -> _Module:
    path = _modules()[name]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return _scan(name, path, tree, package)


def _scan(name: str, path: Path, tree: ast.Module, package: str) -> _Module:
    mod = _Module(name, path)
    body_nodes, body_text = [], []
    for node in tree.body:
        if isinstance(node, ast.If) and ("TYPE_CHECKING" in ast.unparse(node.test)
                                         or all(isinstance(n, ast.Raise) for n in node.body) and not node.orelse):
            continue                                 # imports for annotations; a check that can only stop the job
        names = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
            if all(isinstance(t, ast.Name) for t in flat):
                names = [t.id for t in flat]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            mod.bound.update(_import_targets(node, package))
        if names:
            uses, locates = _uses([node], package)
            for n in names:
                mod.defs[n] = (_normal(node), uses)
                if locates:
                    mod.locates.add(n)
        elif not isinstance(node, (ast.Import, ast.ImportFrom)) and not (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):   # docstrings aside
            body_nodes.append(node)
            body_text.append(_normal(node))
    uses, locates = _uses(body_nodes, package)
    mod.body = ("".join(body_text), uses)
    if locates:
        mod.locates.add(None)
    return mod


def _imported(target: tuple) -> str:
    """The module an import statement runs for one name it binds: the module, or the module
    the symbol is taken from (a submodule taken from its package is that submodule)."""
    if target[0] == "module":
        return target[1]
    module, name = target[1], target[2]
    return f"{module}.{name}" if _is_module(f"{module}.{name}") else module


def _packages(module: str) -> list[str]:
    """The packages Python imports before `module`, and the module itself."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


class _Reach:
    """The definitions one piece of code names directly (`out`), re-exports followed."""

    def __init__(self):
        self.out: set[Symbol] = set()
        self.whole: set[str] = set()

    def module(self, name: str, whole: bool = False) -> None:
        """`name` imported; with `whole`, everything it defines or imports may be used."""
        self.out.update((m, None) for m in _packages(name) if _is_module(m))
        if whole and _is_module(name) and name not in self.whole:
            self.whole.add(name)
            mod = _parse(name)
            self.out.update((name, n) for n in mod.defs)
            for t in mod.bound.values():
                self.target(t)

    def symbol(self, module: str, name: str) -> None:
        mod = _parse(module)
        self.module(module)
        if name in mod.defs:
            self.out.add((module, name))
        elif name in mod.bound:                      # re-exported: follow the import
            self.target(mod.bound[name])
        else:                                        # a submodule, or a name the reader cannot place
            self.module(f"{module}.{name}" if _is_module(f"{module}.{name}") else module, whole=True)

    def target(self, target: tuple) -> None:
        if target[0] == "module":
            self.module(target[1], whole=True)
            return
        module, name = target[1], target[2]
        if name is None or _is_module(f"{module}.{name}"):
            self.module(module if name is None else f"{module}.{name}", whole=True)
        elif _is_module(module):
            self.symbol(module, name)

    def resolve(self, mod: _Module, uses: Uses) -> None:
        """What `uses` names in `mod`: a name bound by a function-local import is resolved like
        one the module imports (an attribute of an imported module reaches that attribute, not
        the module whole), and the import itself runs its module's import-time statements."""
        local = dict(uses.local)
        for t in uses.targets:
            self.target(t)
        for t in local.values():
            self.module(_imported(t))
        for name in uses.names:
            self._name(mod, name, local)
        for name, chain in uses.attrs:
            bound = local.get(name) or (None if name in mod.defs else mod.bound.get(name))
            if bound is None:
                self._name(mod, name, local)
                continue
            module = bound[1] if bound[0] == "module" else f"{bound[1]}.{bound[2]}"
            if not _is_module(module):
                self.target(bound)                   # an attribute of an imported object
                continue
            for attr in chain:                       # walk submodules, stop at a symbol
                if not _is_module(f"{module}.{attr}"):
                    self.symbol(module, attr)
                    break
                module = f"{module}.{attr}"
            else:
                self.module(module, whole=True)

    def _name(self, mod: _Module, name: str, local: dict[str, tuple]) -> None:
        if name in local:                            # and the module's own, which a nested scope may mean
            self.target(local[name])
        if name in mod.defs:
            self.out.add((mod.name, name))
        elif name in mod.bound:
            self.target(mod.bound[name])


@lru_cache(maxsize=None)
def _edges(symbol: Symbol) -> frozenset[Symbol]:
    """What running `symbol` reaches directly: for a module's import-time statements, also the
    import-time statements of the modules it imports."""
    module, name = symbol
    mod = _parse(module)
    reach = _Reach()
    reach.module(module)
    if name is None:
        reach.resolve(mod, mod.body[1])
        for t in mod.bound.values():
            reach.module(_imported(t))
    else:
        reach.resolve(mod, mod.defs[name][1])
    return frozenset(reach.out)


def _plumbing(symbol: Symbol) -> bool:
    return symbol[0] in PLUMBING_MODULES or symbol in PLUMBING_SYMBOLS


def _closed(reach: _Reach) -> set[Symbol]:
    """Everything reachable from what `reach` names directly, plumbing (`PLUMBING_*`) aside."""
    found, todo = set(), list(reach.out)
    while todo:
        sym = todo.pop()
        if sym not in found and not _plumbing(sym):
            found.add(sym)
            todo.extend(_edges(sym) - found)
    return found


def closure(job: str) -> set[Symbol]:
    """What a rule's job reaches: the runner every job runs under (`RUNNER`) and the
    "module:function" its `job` param names."""
    reach = _Reach()
    for ref in (RUNNER, job):
        m = _NAMED.match(ref)
        if not m or not m.group(2) or not _is_module(m.group(1)):
            raise ValueError(f"job {job!r}: {ref!r} is not a 'module:function' reference to a module of {PACKAGE}")
        reach.symbol(m.group(1), m.group(2))
    return _closed(reach)


def _data_files(module: str) -> list[Path]:
    """The files beside a module that locates files (`__file__`): the non-Python files of its
    directory and of its subdirectories that are not packages."""
    out, todo = [], [_parse(module).path.parent]
    while todo:
        for p in sorted(todo.pop().iterdir()):
            if p.is_dir() and p.name != "__pycache__" and not (p / "__init__.py").exists():
                todo.append(p)
            elif p.is_file() and p.suffix not in (".py", ".pyc"):
                out.append(p)
    return out


def _runs_nothing(symbol: Symbol) -> bool:
    """A module's import that runs nothing of its own: no statement but definitions and imports
    (what it imports is in the closure apart, `_edges`)."""
    module, name = symbol
    return name is None and not _parse(module).body[0]


def fingerprint(symbols: set[Symbol]) -> str:
    """A short hash of the normal form (`_normal`) of `symbols` and of the data files they locate;
    an import that runs nothing (`_runs_nothing`) is not hashed, so a new module that a job only
    imports, reaching none of its definitions, changes nothing."""
    h = hashlib.sha256()
    data = set()
    for module, name in sorted((s for s in symbols if not _runs_nothing(s)), key=lambda s: (s[0], s[1] or "")):
        mod = _parse(module)
        h.update(f"\0{module}:{name or ''}\0".encode())
        h.update((mod.body[0] if name is None else mod.defs[name][0]).encode())
        if name in mod.locates:
            data.update(_data_files(module))
    for path in sorted(data):
        h.update(f"\0{path.relative_to(PACKAGE_DIR)}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


_JOB: ContextVar[str | None] = ContextVar("selfknow_job", default=None)


@contextmanager
def running(job: str) -> Iterator[None]:
    """Inside the block, `job` (its "module:function") is the workflow job running."""
    token = _JOB.set(job)
    try:
        yield
    finally:
        _JOB.reset(token)


def check_reached(ref: str) -> None:
    """Inside a workflow job (`running`), that the job's closure holds the "module:function"
    `ref` it is about to call; outside one (a command line), nothing to check."""
    job = _JOB.get()
    if job is None:
        return
    module, _, name = ref.partition(":")
    if (module, name) not in closure(job):
        raise LookupError(f"job {job!r} calls {ref!r}, which its code fingerprint does not reach (the "
                          f"reference is not written whole where the job can see it): write {ref!r} as one "
                          f"string in the catalog entry the job calls it through ({PACKAGE}.code_inputs)")


@lru_cache(maxsize=None)
def job_fingerprint(job: str) -> str:
    """The fingerprint of the package code a rule's job executes (`job`: its "module:function")."""
    return fingerprint(closure(job))
