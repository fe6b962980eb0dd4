"""storage/index.py owns the index's format: no other module of the bookie opens one of its
LMDB databases, passes a database handle, or packs one of its keys or locations (issue 41 item
2).  Callers use ``Index``'s named operations inside transactions they begin with it."""

import ast
import pathlib

import bookie.storage.index as index_module

ROOT = pathlib.Path(index_module.__file__).resolve().parents[1]
OWNER = ROOT / "storage" / "index.py"
# other LMDB environments with formats of their own, specified in these modules
OTHER_ENVIRONMENTS = {ROOT / "storage" / "writers.py"}
INDEX_PRIVATE = {"_entries", "_ledgers", "_deleted", "_logs", "_meta"}
FORMER_PUBLIC = {"entries", "ledgers", "deleted", "logs", "meta"}


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).parts
        if rel[0] in ("tests", ".venv", "build") or path == OWNER:
            continue
        yield path, ast.parse(path.read_text(), str(path))


def _offences(path, tree):
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            base = node.value
            # an ``Index`` is named ``index`` (or ``self.index``, ``storage.index``) everywhere
            named_index = (isinstance(base, ast.Name) and base.id == "index") or (
                isinstance(base, ast.Attribute) and base.attr == "index")
            if named_index and node.attr in INDEX_PRIVATE | FORMER_PUBLIC | {"env"}:
                out.append(f"{path}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "bookie.storage.index":
            out += [f"{path}:{node.lineno}: imports {a.name}" for a in node.names
                    if a.name.startswith("_")]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "open_db" and path not in OTHER_ENVIRONMENTS
              and "metadata" not in path.parts):
            out.append(f"{path}:{node.lineno}: open_db")
    return out


def test_no_module_but_the_index_reaches_its_databases_or_key_codecs():
    offences = [o for path, tree in _modules() for o in _offences(path, tree)]
    assert offences == []


def test_the_checker_sees_a_raw_database_handle():
    tree = ast.parse("with index.env.begin() as txn:\n"
                     "    txn.cursor(db=index.entries)\n"
                     "from bookie.storage.index import _LOC\n")
    assert len(_offences(pathlib.Path("x.py"), tree)) == 3


def test_the_index_exports_no_codec():
    public = {n for n in vars(index_module) if not n.startswith("_")}
    assert not public & {"LOC", "LOG_KEY", "LEDGER_KEY", "KEY_DTYPE", "LOC_DTYPE", "entry_key"}
