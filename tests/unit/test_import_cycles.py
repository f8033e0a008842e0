"""mrclab's modules import one another as a DAG: data flows one way (docs/architecture.md), and a module that
runs on another machine (a cluster's agents) takes only what it imports, never half of a cycle.

Every `import` and `from ... import` counts, at module level or inside a function: a lazy import hides a cycle
from the interpreter, not from the design. Only `if TYPE_CHECKING:` imports, which never run, name types alone."""
import ast
import graphlib

from tests.conftest import REPO

PACKAGE = REPO / "mrclab"


def _modules() -> dict[str, ast.Module]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = ast.parse(path.read_text(), str(path))
    return modules


def _imports(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The mrclab modules `name` imports, and the packages whose `__init__` that runs (those it sits in aside)."""
    package = name if (PACKAGE.parent / name.replace(".", "/") / "__init__.py").exists() else name.rpartition(".")[0]
    targets = set()
    for node in _statements(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            targets.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                           for alias in node.names)
    own = _ancestors(name) | {name}
    found = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target:
            found |= ({target} | _ancestors(target)) - own
    return found & known


def _statements(tree: ast.AST):
    """Every node of `tree` that runs: all but the bodies of `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        type_only = isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for branch in node.orelse if type_only else [node]:
            yield branch
            yield from _statements(branch)


def _ancestors(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, tree, set(modules)) for name, tree in modules.items()}


def test_the_walk_sees_every_kind_of_import():
    graph = _graph()
    assert "mrclab.build" in graph["mrclab"]  # module level, relative
    assert "mrclab.build" in graph["mrclab.check"]  # inside a function
    assert {"mrclab.controller.flows", "mrclab.controller"} <= graph["mrclab.fabric.ovs"]  # and the package it runs
    assert not {"mrclab", "mrclab.fabric"} & graph["mrclab.fabric.ovs"]  # its own packages are running already
    assert "mrclab.transport.config" not in graph["mrclab.transport.congestion.nscc"]  # a type only


def test_mrclab_imports_form_no_cycle():
    try:
        graphlib.TopologicalSorter(_graph()).prepare()
    except graphlib.CycleError as e:
        raise AssertionError(f"an import cycle: {' imports '.join(reversed(e.args[1]))}") from None
