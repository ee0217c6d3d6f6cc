"""The package's shape: no import loops, the env side apart from the gateway, one name per job."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rollout", "envs")
SAME_NAME_ALLOWED = {"__init__", "__main__", "cli", "base"}
"""File names several packages may each have, for the same job in each: the package itself, `python -m`,
its command line, and the interface its implementations follow (`agents/base.py`, `retrieval/base.py`)."""


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module an imported dotted name lives in (None when it is not ours)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    """Every project module `module` imports: at the top, inside functions and under TYPE_CHECKING alike."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(filter(None, (_resolve(a.name) for a in node.names)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                target = _resolve(f"{base}.{alias.name}") if f"{base}.{alias.name}" in MODULES else _resolve(base)
                if target:
                    found.add(target)
    found.discard(module)
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

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
                cycles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_the_cycle_finder_finds_a_loop():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back():
    graph = {m: imports_of(m) for m in MODULES}
    assert len(graph) > 50 and graph["rollout.run.driver"], "the walk found no imports: it is broken"
    cycles = import_cycles(graph)
    assert not cycles, "import loops: " + "; ".join(" <-> ".join(c) for c in cycles)


LAYERS = (
    ("(root)",), ("llm", "mcp_client"), ("report",), ("data",), ("retrieval",), ("gateway",), ("envs",), ("agents",),
    ("view",), ("run",), ("export", "trainers"),
)
"""The packages from the bottom up, as docs/architecture.md lists them: a module imports from its own layer and the
ones below. "(root)" is the package root's modules (the records, events, errors... every stage shares)."""
ENTRY_POINTS = {"rollout", "rollout.__main__", "rollout.cli"}
"""Above every layer, with each package's `__main__` and `cli`: they compose the packages into commands."""


def layer_of(module: str) -> int:
    """Where `module` sits in `LAYERS` (`len(LAYERS)` for an entry point)."""
    if module in ENTRY_POINTS or module.endswith((".__main__", ".cli")):
        return len(LAYERS)
    parts = module.split(".")
    package = "envs" if parts[0] == "envs" else parts[1] if len(parts) > 2 or MODULES[module].name == "__init__.py" \
        else "(root)"
    (index,) = [i for i, names in enumerate(LAYERS) if package in names]
    return index


def test_every_import_goes_down_the_layers():
    upward = sorted(f"{m} -> {t}" for m in MODULES for t in imports_of(m) if layer_of(t) > layer_of(m))
    assert not upward, "imports against the package order (tests/test_layout.py LAYERS): " + "; ".join(upward)


def test_the_layers_are_the_order_the_architecture_page_lists():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    listed = re.findall(r"^ *(\d+) ([a-z_(). ,]+?) {2,}", text[text.index("## Package order"):], flags=re.M)
    assert [tuple(name.strip() for name in names.split(",")) for _, names in listed] == list(LAYERS)


def test_the_env_side_reads_only_the_shared_vocabulary_of_the_gateway():
    for module in (m for m in MODULES if m.startswith("envs")):
        gateway = sorted(i for i in imports_of(module) if i == "rollout.gateway" or i.startswith("rollout.gateway."))
        assert not gateway, f"{module} imports {gateway}; the env side may use rollout.wire, not the server"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_says_what_it_is_for(module):
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    if module.endswith("__main__") or not tree.body:
        return
    assert ast.get_docstring(tree), f"{MODULES[module]} has no docstring saying what it is for"


def test_no_two_modules_share_a_file_name():
    names = Counter(p.stem for p in MODULES.values() if p.stem not in SAME_NAME_ALLOWED)
    shared = {name: [str(p.relative_to(ROOT)) for p in MODULES.values() if p.stem == name]
              for name, n in names.items() if n > 1}
    assert not shared, f"modules with the same file name: {shared}"


def test_the_public_api_is_what_it_lists():
    import rollout

    missing = [name for name in rollout.__all__ if getattr(rollout, name, None) is None]
    assert not missing, f"rollout.__all__ names what it cannot load: {missing}"


def _layout_section() -> str:
    """docs/architecture.md's "## Layout of the code", up to the next "## " heading."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = text.index("## Layout of the code")
    end = text.find("\n## ", start)
    return text[start:] if end == -1 else text[start:end]


def test_the_layout_in_the_docs_names_every_module():
    layout = _layout_section()
    modules = sorted(MODULES.values())
    assert len(modules) > 50, "the walk found no modules: it is broken"
    unnamed = [str(path.relative_to(ROOT)) for path in modules if path.stem not in ("__init__", "__main__")
               and not re.search(rf"(?<![A-Za-z0-9_]){re.escape(path.stem)}(?![A-Za-z0-9_])", layout)]
    assert not unnamed, f"docs/architecture.md's 'Layout of the code' does not name: {unnamed}"


WHOLE_CONFIG_TAKERS = {"rollout.run.driver.run", "rollout.run.stream.run_with_events", "rollout.run.prepare.prepare",
                       "rollout.run.serving.serving", "rollout.run.roll_out.roll_out",
                       "rollout.run.identity.identity_settings", "rollout.run.identity.RunIdentity.of",
                       "rollout.export.questions.prompt_rows"}
"""The functions that take the whole `RunConfig`: the run's entry points and its stages that read most of it. The
rest take the slice of the config they use (`RunConfig.ray`, `.worker_pool`, `.gateway_launch`, ...)."""


def whole_config_takers() -> set[str]:
    """Every function and method of the package with a parameter annotated `RunConfig`."""
    found = set()
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        scopes = [(module, tree.body), *((f"{module}.{c.name}", c.body) for c in tree.body
                                          if isinstance(c, ast.ClassDef))]
        for owner, body in scopes:
            for node in body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                        a.annotation is not None and ast.unparse(a.annotation).strip("'\"") == "RunConfig"
                        for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)):
                    found.add(f"{owner}.{node.name}")
    return found


def test_only_the_entry_points_and_the_stages_take_the_whole_run_config():
    found = whole_config_takers()
    assert found == WHOLE_CONFIG_TAKERS, (
        f"new: {sorted(found - WHOLE_CONFIG_TAKERS)}, gone: {sorted(WHOLE_CONFIG_TAKERS - found)}. A function "
        "past the stages takes the slice of the config it reads (a property of RunConfig, as `ray` is)")
