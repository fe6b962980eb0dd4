"""The layers of DESIGN.md ("Layers and folders"), checked on the source itself.

Every source file of the package is parsed (ast) and each of its imports -- absolute, relative,
inside functions, and module paths named in strings (``importlib.import_module``, ``python -m``)
-- is resolved to the layer it reaches.  A module may import its own layer and the layers
below it; the client never imports the bookie side (workers/, storage/, core/); nothing but the
commands imports ``bookie.appliance``.  The bookie side is split by kind: core/ is pure (no
sockets, processes, threads, LMDB or ZooKeeper), storage/ never imports workers/, and no worker
process loop (``workers/*_worker.py``) imports another.  No source file is over 800 lines; 600 is
a warning only (split by concept, not by size).  No import circle, counting the imports inside
functions (issue 35).
"""

from __future__ import annotations

import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = "bookie"  # the repository root is this import package

GROUND, CORE, STORAGE, WORKERS, CLIENT, TOOLS, COMMANDS = range(7)
LAYER_NAMES = {GROUND: "ground (metadata/, wire.py, wire_sockets.py)", CORE: "bookie core (core/)",
               STORAGE: "bookie storage (storage/)", WORKERS: "bookie processes (workers/)",
               CLIENT: "client (client/)", TOOLS: "tools (bench/, testing/, spark/)",
               COMMANDS: "commands (appliance/)"}
BOOKIE_SIDE = ("workers", "storage", "core")
# What core/ may not import: it is the pure rules (DESIGN.md: no I/O).
IMPURE = ("zmq", "lmdb", "kazoo", "socket", "subprocess", "threading", "multiprocessing", "mmap")

# What each top-level name of the package is.  A new folder or root module must be given a layer
# here (the test fails until it is).
LAYER_OF = {
    "wire": GROUND,
    "wire_sockets": GROUND,
    "properties": GROUND,
    "compiled": GROUND,
    "metadata": GROUND,
    "core": CORE,
    "storage": STORAGE,
    "workers": WORKERS,
    "client": CLIENT,
    "bench": TOOLS,
    "testing": TOOLS,
    "spark": TOOLS,
    "autorecovery": TOOLS,
    "appliance": COMMANDS,
    "__main__": COMMANDS,
    "__init__": COMMANDS,
    "setup": COMMANDS,  # the build script (setup.py), not installed
}

MAX_LINES = 800
# Files still over the limit while other branches split them; remove each entry when its split
# is merged (the test below fails on an entry that is no longer needed).
KNOWN_LONG_FILES: set[str] = set()

_MODULE_PATH = re.compile(rf"^{PACKAGE}(\.[A-Za-z_][A-Za-z0-9_]*)+$")


def _source_files(root: str = ROOT) -> list[str]:
    """Paths (relative to ``root``) of the package's source: the root's modules and every
    top-level folder that is a package."""
    out = [n for n in os.listdir(root) if n.endswith(".py")]
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        if not os.path.isfile(os.path.join(folder, "__init__.py")):
            continue
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            out += [os.path.relpath(os.path.join(dirpath, f), root)
                    for f in filenames if f.endswith(".py")]
    return sorted(out)


def _top_name(rel_path: str) -> str:
    first = rel_path.split(os.sep)[0]
    return first[:-3] if first.endswith(".py") else first


def _module_of(rel_path: str) -> str:
    parts = rel_path[:-3].split(os.sep)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([PACKAGE, *parts])


def _package_of(rel_path: str) -> str:
    """The package a relative import in this file starts from."""
    module = _module_of(rel_path)
    return module if rel_path.endswith("__init__.py") else module.rpartition(".")[0]


def _imports(rel_path: str, tree: ast.AST):
    """(line, absolute module path) for every import of the file that names the package."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(rel_path).split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                # ``from bookie import wire`` reaches bookie.wire; ``from bookie import
                # __version__`` reaches only the root package (a name outside every layer).
                yield node.lineno, module if alias.name == "*" else f"{module}.{alias.name}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _MODULE_PATH.match(node.value):
                yield node.lineno, node.value


def _target_name(module: str) -> str | None:
    """The package's top-level name an import reaches: '' for the root package itself, None
    for anything outside the package (or a string that only looks like a module path)."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    if len(parts) == 1:
        return ""
    return parts[1] if parts[1] in LAYER_OF else None


def _violations(root: str = ROOT) -> list[str]:
    """One line per import that runs up a layer (or per file in no layer), naming file and line."""
    found = []
    for rel in _source_files(root):
        top = _top_name(rel)
        if top not in LAYER_OF:
            found.append(f"{rel}: {top} is in no layer (give it one in LAYER_OF)")
            continue
        layer = LAYER_OF[top]
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            tree = ast.parse(f.read(), rel)
        is_loop = top == "workers" and rel.endswith("_worker.py")
        for line, module in _imports(rel, tree):
            if top == "core" and module.split(".")[0] in IMPURE:
                found.append(f"{rel}:{line} imports {module}: core/ is pure (no I/O)")
                continue
            if is_loop and module.startswith("bookie.workers."):
                other = module.split(".")[2]
                if other.endswith("_worker") and other != os.path.basename(rel)[:-3]:
                    found.append(f"{rel}:{line} imports {module}: a worker's process loop never "
                                 "imports another's")
                    continue
            target = _target_name(module)
            if target is None or target == top:
                continue
            where = f"{rel}:{line} imports {module}"
            if target == "":
                # Every import of the package runs its root __init__.py, so it must stay inert:
                # it may hold names (__version__), never import a layer.
                continue
            if target == "appliance" and layer != COMMANDS:
                found.append(f"{where}: nothing but the commands imports bookie.appliance")
            elif top == "client" and target in BOOKIE_SIDE:
                found.append(f"{where}: the client never imports the bookie side")
            elif LAYER_OF[target] > layer:
                found.append(f"{where}: {LAYER_NAMES[layer]} may not import "
                             f"{LAYER_NAMES[LAYER_OF[target]]}, a layer above it")
    return found


def test_no_import_runs_up_a_layer():
    assert _violations() == []


def test_the_root_package_imports_no_layer():
    # bookie/__init__.py runs before any module of any layer: an import there would make every
    # layer import it.  One exception, and only when BOOKIE_PURE=1: bookie.compiled (ground,
    # stdlib only), whose finder must be in place before any compiled module loads.
    with open(os.path.join(ROOT, "__init__.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    reached = [m for _, m in _imports("__init__.py", tree)
               if _target_name(m) not in (None, "", "compiled")]
    assert reached == []


@pytest.mark.parametrize("source, expected", [
    ("from bookie.appliance import cli", "imports bookie.appliance"),
    ("from ..appliance.cli import main", "imports bookie.appliance.cli"),
    ("import bookie.client.client", "may not import client (client/), a layer above it"),
    ("def f():\n    from bookie.testing import LocalBookies", "may not import tools"),
    ("MODULES = {'gc': 'bookie.bench.cli'}", "imports bookie.bench.cli"),
])
def test_the_checker_sees_imports_up_a_layer_in_every_form(tmp_path, source, expected):
    # A fake tree: the real layer table, one offending module in workers/.
    for name in ("workers", "client", "appliance", "bench", "testing"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / "workers" / "bad.py").write_text(source + "\n")
    found = _violations(str(tmp_path))
    assert len(found) == 1 and found[0].startswith("workers/bad.py:") and expected in found[0]


def test_the_client_never_imports_the_workers(tmp_path):
    for name in ("workers", "client"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / "client" / "bad.py").write_text("from bookie.workers import ring\n")
    assert [v.split(": ", 1)[1] for v in _violations(str(tmp_path))] == [
        "the client never imports the bookie side"]


@pytest.mark.parametrize("path, source, expected", [
    ("core/bad.py", "import zmq", "core/ is pure"),
    ("core/bad.py", "def f():\n    import lmdb", "core/ is pure"),
    ("core/bad.py", "from bookie.storage import records", "a layer above it"),
    ("storage/bad.py", "from bookie.workers import config", "a layer above it"),
    ("workers/read_worker.py", "from bookie.workers.add_worker import x", "never imports another"),
    ("client/bad.py", "from bookie.core import ledgers", "never imports the bookie side"),
])
def test_the_bookie_side_is_split_by_kind(tmp_path, path, source, expected):
    for name in ("core", "storage", "workers", "client"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / path).write_text(source + "\n")
    found = _violations(str(tmp_path))
    assert len(found) == 1 and found[0].startswith(path + ":") and expected in found[0]


def _line_count(rel: str) -> int:
    with open(os.path.join(ROOT, rel), "rb") as f:
        return sum(1 for _ in f)


def test_no_source_file_is_over_800_lines():
    long = {rel: n for rel in _source_files() if (n := _line_count(rel)) > MAX_LINES}
    assert {rel: n for rel, n in long.items() if rel not in KNOWN_LONG_FILES} == {}


def test_every_known_long_file_is_still_long():
    # An exception outliving its reason would let the file grow back unnoticed.
    still = {rel for rel in KNOWN_LONG_FILES
             if os.path.exists(os.path.join(ROOT, rel)) and _line_count(rel) > MAX_LINES}
    assert still == KNOWN_LONG_FILES


# -- import circles ------------------------------------------------------------------------------
# No module of the package may reach itself again through its imports (issue 35): counting the
# imports inside functions too (they run when called, and a circle then fails at call time, or
# worse, on whichever import happens first), ``from bookie.x import name`` as an import of the
# module bookie.x.name when that is a module, else of bookie.x (a name its __init__ holds: a
# module that imports through a package whose __init__ imports it is in a circle).  Merely passing
# through a package on the way to one of its modules is not counted: its __init__ runs first but
# is not imported from.

def _import_graph(root: str = ROOT) -> dict[str, set[str]]:
    """Each module of the package -> the modules of the package its imports run."""
    files = _source_files(root)
    modules = {_module_of(rel) for rel in files}

    def reached(name: str) -> set[str]:
        # the module itself, or the nearest package holding the name (the root package's
        # __init__ is inert: test_the_root_package_imports_no_layer)
        parts = name.split(".")
        for i in range(len(parts), 1, -1):
            if ".".join(parts[:i]) in modules:
                return {".".join(parts[:i])}
        return set()

    graph: dict[str, set[str]] = {}
    for rel in files:
        me = _module_of(rel)
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            tree = ast.parse(f.read(), rel)
        edges: set[str] = set()
        # an import under ``if TYPE_CHECKING:`` never runs
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
                       for stmt in node.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = _package_of(rel).split(".")
                    base = base[:len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules
                           else module for alias in node.names]
            else:
                continue
            for target in targets:
                if target.split(".")[0] == PACKAGE:
                    edges |= reached(target)
        edges.discard(me)
        graph[me] = edges
    return graph


def _circles(root: str = ROOT) -> list[str]:
    """One line per strongly connected group of modules (Tarjan), naming them and one circle."""
    graph = _import_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)

    def one_circle(group: list[str]) -> list[str]:
        # the shortest way from the group's first module back to itself, inside the group
        start, members = group[0], set(group)
        paths = {start: [start]}
        frontier = [start]
        while frontier:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & members):
                    if w == start:
                        return paths[v] + [start]
                    if w not in paths:
                        paths[w] = paths[v] + [w]
                        nxt.append(w)
            frontier = nxt
        return group

    return [f"import circle among {', '.join(g)}: {' -> '.join(one_circle(g))}"
            for g in sorted(groups)]


# Circles still there while they are broken up (issue 35), each as the modules it runs through:
# a circle found must lie inside one of these (breaking one up only shrinks it); remove an entry
# when its circle is gone (the test below fails on an entry that is no longer needed).
# (module names without the leading "bookie.")
KNOWN_CIRCLES: list[set[str]] = [
]


def _circle_groups(root: str = ROOT) -> list[set[str]]:
    return [{m[len(PACKAGE) + 1:] for m in line.split(": ", 1)[0][len("import circle among "):]
             .split(", ")} for line in _circles(root)]


def test_no_import_circle():
    assert [line for line, group in zip(_circles(), _circle_groups())
            if not any(group <= known for known in KNOWN_CIRCLES)] == []


def test_every_known_circle_is_still_there():
    groups = _circle_groups()
    assert [known for known in KNOWN_CIRCLES if not any(g & known for g in groups)] == []


@pytest.mark.parametrize("files, expected", [
    ({"core/a.py": "from bookie.core import b", "core/b.py": "import bookie.core.a"},
     "bookie.core.a -> bookie.core.b -> bookie.core.a"),
    ({"core/a.py": "def f():\n    from bookie.core.b import x", "core/b.py": "from .a import y"},
     "bookie.core.a -> bookie.core.b -> bookie.core.a"),
    ({"core/__init__.py": "from bookie.core.a import x", "core/a.py": "from bookie.core import y"},
     "bookie.core -> bookie.core.a -> bookie.core"),
])
def test_the_checker_sees_a_circle_in_every_form(tmp_path, files, expected):
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "__init__.py").write_text("")
    (tmp_path / "core" / "b.py").write_text("")
    for path, source in files.items():
        (tmp_path / path).write_text(source + "\n")
    found = _circles(str(tmp_path))
    assert len(found) == 1 and found[0].endswith(expected)


def test_a_tree_without_circles_passes(tmp_path):
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "__init__.py").write_text("")
    (tmp_path / "core" / "a.py").write_text("from bookie.core import b\nfrom bookie.core.b import x\n")
    (tmp_path / "core" / "b.py").write_text("import os\n")
    assert _circles(str(tmp_path)) == []


# -- function-local imports --------------------------------------------------------------------
# An import inside a function is there to defer a library that is not loaded yet (kazoo until a
# ZooKeeper store is opened, prometheus_client until metrics are served, ...), and says so:
# ``# lazy: LIB`` on its line, LIB not imported at the top of the same file.  Any other belongs
# at the top of the file (issue 44 item 4d).  Checked in the whole package.
_LAZY = re.compile(r"#\s*lazy:\s*([A-Za-z_][\w.]*)")


def _unmarked_local_imports(root: str = ROOT) -> list[str]:
    found = []
    for rel in _source_files(root):
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            text = f.read()
        lines = text.splitlines()
        tree = ast.parse(text, rel)
        at_top = set()
        for node in tree.body:
            if isinstance(node, ast.Import):
                at_top |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                at_top |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        local = {n.lineno: n for fn in ast.walk(tree)
                 if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
        for line in sorted(local):
            m = _LAZY.search(lines[line - 1])
            if m is None:
                found.append(f"{rel}:{line}: a local import without '# lazy: LIB' (move it to "
                             f"the top of the file, or say which library it defers)")
            elif m.group(1) in at_top:
                found.append(f"{rel}:{line}: defers {m.group(1)}, which the file imports at its top")
    return found


def test_every_local_import_defers_a_library_and_says_which():
    assert _unmarked_local_imports() == []


def test_the_local_import_check_sees_an_unmarked_one_and_a_false_mark(tmp_path):
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "__init__.py").write_text("")
    (tmp_path / "core" / "a.py").write_text(
        "import json\n\ndef f():\n    import os\n\ndef g():\n    import json  # lazy: json\n\n"
        "def h():\n    import zlib  # lazy: zlib\n")
    assert [v.split(": ", 1)[0] for v in _unmarked_local_imports(str(tmp_path))] == [
        "core/a.py:4", "core/a.py:7"]
