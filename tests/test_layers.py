"""The package's layers: a module imports only from its own layer or the layers below it.

Read from the source with ``ast`` (every import, the lazy ones inside functions included), so
an import that points upwards fails here before it can tie the layers into a knot. Every
module must be placed in a layer: a new one is a decision, not an accident. The folders are
the layers (each package's docstring says what it may import); inside ``loop`` the state sits
below the nodes and the nodes below the graphs.

    kernel, store  < harness  < framework  < llm  < loop (state < agents < graphs)  < report
    < export  < run
    < commands  < cli
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from astra_graph.cli import COMMANDS, MODULES

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "astra_graph"

LAYERS: list[tuple[str, set[str]]] = [
    ("kernel and run store", {"kernel", "store"}),
    ("harness", {"harness"}),
    ("framework sources", {"framework"}),
    ("LLM client", {"llm"}),
    ("loop: state and records", {
        "loop", "loop.plans", "loop.records", "loop.best", "loop.state", "loop.context",
        "loop.result",
    }),
    ("loop: agents", {"loop.agents"}),
    ("graphs", {"loop.graph", "loop.single_graph", "loop.progress"}),
    ("report", {"report"}),
    ("export", {"export"}),
    ("run", {"run"}),
    ("commands", {"commands"}),
    ("cli", {"cli", "__main__", "__init__"}),
]  # fmt: skip
"""Lowest first; a module belongs to the layer naming the longest prefix of its path under
``astra_graph`` (``__init__`` is the package itself, the Python API)."""

INDEPENDENT = [("kernel", "store")]
"""Packages of one layer that must not import each other."""

HEAVY = ("langgraph", "langchain", "langchain_core", "langchain_openai")
"""Imported only from the LLM client up: the harness never imports LangGraph, and the quick
commands (kernels, compile, check) start without them."""
LLM_LAYER = 2


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def layer_of(name: str) -> int:
    parts = name.split(".")[1:] or ["__init__"]
    for length in range(len(parts), 0, -1):
        key = ".".join(parts[:length])
        found = [i for i, (_, names) in enumerate(LAYERS) if key in names]
        if found:
            assert len(found) == 1, f"{name}: in {len(found)} layers; place it in exactly one"
            return found[0]
    raise AssertionError(f"{name}: in no layer; place it in exactly one")


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in the file; ``from pkg import mod`` names ``pkg.mod``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import"
            base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((node.lineno, sub if is_module(sub) else base))
    return list(dict.fromkeys(found))  # ``from m import a, b`` is one import of m


def modules() -> list[tuple[str, Path]]:
    return sorted((module_name(p), p) for p in PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    for name, _ in modules():
        layer_of(name)


def test_no_module_imports_a_higher_layer() -> None:
    upward = []
    for name, path in modules():
        mine = layer_of(name)
        for line, target in imports(path):
            if target.split(".")[0] != "astra_graph":
                continue
            theirs = layer_of(target)
            if theirs > mine:
                upward.append(
                    f"{path.relative_to(PACKAGE)}:{line}: {name} ({LAYERS[mine][0]}) imports "
                    f"{target} ({LAYERS[theirs][0]})"
                )
    assert not upward, "\n".join(upward)


def test_above_the_graphs_the_nodes_are_reached_only_through_them() -> None:
    graphs = next(i for i, (label, _) in enumerate(LAYERS) if label == "graphs")
    found = [
        f"{name} imports {target}"
        for name, path in modules()
        if layer_of(name) > graphs
        for _, target in imports(path)
        if target.startswith("astra_graph.loop.agents")
    ]
    assert not found, found


def test_commands_do_not_import_each_other_or_the_cli() -> None:
    commands = {f"astra_graph.commands.{MODULES.get(name, name)}" for name in COMMANDS}
    found = [
        f"{name} imports {target}"
        for name, path in modules()
        if name.startswith("astra_graph.commands")
        for _, target in imports(path)
        if (target in commands and target != name) or target == "astra_graph.cli"
    ]
    assert not found, found


def test_langgraph_and_langchain_only_from_the_llm_client_up() -> None:
    found = [
        f"{name} imports {target}"
        for name, path in modules()
        if layer_of(name) < LLM_LAYER
        for _, target in imports(path)
        if target.split(".")[0] in HEAVY
    ]
    assert not found, found


AGENT_COMMANDS = ("optimize", "reply")
"""The commands that run the graph; every other command starts without LangGraph."""


def test_the_other_commands_start_without_langgraph_langchain_or_matplotlib() -> None:
    """What the import check cannot see: a lower module that pulls a heavy library in through
    a third-party package. Imports the modules in a fresh interpreter and looks."""
    quick = [MODULES.get(name, name) for name in COMMANDS if name not in AGENT_COMMANDS]
    code = (
        "import importlib, sys\n"
        f"for name in {quick!r}: importlib.import_module('astra_graph.commands.' + name)\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    assert "astra_graph" in loaded
    assert not loaded & {*HEAVY, "matplotlib"}


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The reader finds what the layering test relies on: lazy and ``from pkg import mod``."""
    source = tmp_path / "sample.py"
    source.write_text(
        "from astra_graph.llm import client\n"
        "def later():\n"
        "    from astra_graph.loop.agents.common import emit\n"
        "    import astra_graph.loop.graph\n"
    )
    found = [target for _, target in imports(source)]
    assert found == [
        "astra_graph.llm.client",
        "astra_graph.loop.agents.common",
        "astra_graph.loop.graph",
    ]
    assert layer_of("astra_graph.llm.client") < layer_of("astra_graph.loop.agents.common")
    assert layer_of("astra_graph.loop.agents.common") < layer_of("astra_graph.loop.graph")


def test_packages_of_one_layer_stay_apart() -> None:
    found = [
        f"{name} imports {target}"
        for first, second in INDEPENDENT
        for mine, other in ((first, second), (second, first))
        for name, path in modules()
        if name.startswith(f"astra_graph.{mine}")
        for _, target in imports(path)
        if target.startswith(f"astra_graph.{other}")
    ]
    assert not found, found
