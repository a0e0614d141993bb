"""Thresholds in the candidate's code become test shapes on both sides of them.

A kernel that branches on a size (``if (heads > 64 && heads < 128)``, ``d > 4096 ? ... : ...``,
``requires = tokens <= 32768``) is wrong, if at all, on one side of the constant; random shapes
find a narrow band rarely. So every check reads the candidate's source with a real C++/CUDA
parser and its header's ``requires`` clauses, and the domain suite gets shapes just below and
just above every constant a dim is compared with:

* **code**: tree-sitter with the CUDA grammar (``tree-sitter`` and ``tree-sitter-cuda``: wheels
  for every platform and Python 3.12, nothing to build, no libclang/LLVM install; a grammar is
  enough because only comparisons and declarations are read, never types). Every comparison
  (``< <= > >= == !=``) of an integer constant (a literal, a ``#define`` or a ``constexpr``
  integer) with a *dim expression*: a dim's name or a kernel parameter bound to one, a local
  variable initialised from one, scaled by constants (``*``, ``/``, ``<<``, ``>>``) and casts.
  ``n = d / 8; if (n > 512)`` gives d = 4096.
* **requires**: the same for each clause of the header, read with Python's own parser (the
  header's expression language is Python's).

:func:`threshold_values` turns a threshold into the dim's values on both sides, at its
``multiple_of``, inside the domain. A source that does not parse gives no code thresholds and a
note; without the parser installed the check says so in its notes (never silently).
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from astra_graph.kernel.contract import OperationSpec

COMPARISONS = {"<", "<=", ">", ">=", "==", "!="}
MAX_THRESHOLDS = 24
"""Thresholds kept per check (the first ones in the source): each adds up to two shapes per
dtype; a kernel comparing more constants than this is rare and the rest are noted."""
_INTEGER = re.compile(r"^(0[xX][0-9a-fA-F]+|\d+)[uUlL]*$")


@dataclass(frozen=True)
class Threshold:
    dim: str
    value: float
    """The dim's value at which the comparison flips."""
    source: str
    """Where it was read, e.g. ``code: heads > 64`` or ``requires: tokens <= 32768``."""


class ParserUnavailable(RuntimeError):
    """tree-sitter or its CUDA grammar is not installed."""


def _parser() -> Any:
    try:
        import tree_sitter_cuda
        from tree_sitter import Language, Parser
    except ImportError as exc:
        raise ParserUnavailable(
            f"code thresholds not extracted: {exc.name} is not installed "
            "(pip install tree-sitter tree-sitter-cuda)"
        ) from None
    return Parser(Language(tree_sitter_cuda.language()))


def _integer(text: str) -> int | None:
    match = _INTEGER.match(text.strip())
    return int(match.group(1), 0) if match else None


def aliases_of(spec: OperationSpec) -> dict[str, str]:
    """Names in kernel code that stand for a dim: the dims and every scalar bound to one."""
    contract = spec.contract
    names = {name: name for name in contract.dims}
    for scalar in contract.scalars:
        if isinstance(scalar.value, str) and scalar.value.strip() in contract.dims:
            names[scalar.name] = scalar.value.strip()
    return names


class _Reader:
    """One pass over a syntax tree: constants, dim-valued locals, comparisons."""

    def __init__(self, aliases: Mapping[str, str]) -> None:
        self.linear: dict[str, tuple[str, float]] = {n: (d, 1.0) for n, d in aliases.items()}
        """Name -> (dim, scale): the name's value is the dim times the scale."""
        self.constants: dict[str, int] = {}
        self.found: list[Threshold] = []

    def constant(self, node: Any) -> int | None:
        kind = node.type
        if kind == "number_literal":
            return _integer(node.text.decode())
        if kind == "identifier":
            return self.constants.get(node.text.decode())
        if kind == "parenthesized_expression" and node.named_child_count == 1:
            return self.constant(node.named_children[0])
        return None

    def dim_of(self, node: Any) -> tuple[str, float] | None:
        kind = node.type
        if kind == "identifier":
            return self.linear.get(node.text.decode())
        if kind in ("parenthesized_expression", "cast_expression"):
            return self.dim_of(node.named_children[-1])
        if kind == "binary_expression":
            left, op, right = node.children[0], node.children[1].type, node.children[2]
            inner, factor = self.dim_of(left), self.constant(right)
            if inner is None and op == "*":
                inner, factor = self.dim_of(right), self.constant(left)
            if inner is None or factor is None or factor == 0:
                return None
            dim, scale = inner
            scaled = {
                "*": scale * factor,
                "/": scale / factor,
                ">>": scale / 2**factor,
                "<<": scale * 2**factor,
            }.get(op)
            return None if scaled is None else (dim, scaled)
        return None

    def visit(self, node: Any) -> None:
        kind = node.type
        if kind == "preproc_def":
            name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
            if name is not None and value is not None:
                number = _integer(value.text.decode())
                if number is not None:
                    self.constants[name.text.decode()] = number
        elif kind == "init_declarator":
            name, value = node.child_by_field_name("declarator"), node.child_by_field_name("value")
            if name is not None and value is not None and name.type == "identifier":
                number = self.constant(value)
                if number is not None:
                    self.constants[name.text.decode()] = number
                else:
                    linear = self.dim_of(value)
                    if linear is not None:
                        self.linear[name.text.decode()] = linear
        elif kind == "binary_expression" and node.children[1].type in COMPARISONS:
            left, right = node.children[0], node.children[2]
            for side, other in ((left, right), (right, left)):
                linear, number = self.dim_of(side), self.constant(other)
                if linear is not None and number is not None:
                    dim, scale = linear
                    text = " ".join(node.text.decode().split())
                    self.found.append(Threshold(dim, number / scale, f"code: {text}"))
                    break
        for child in node.children:
            self.visit(child)


def code_thresholds(source: str, spec: OperationSpec) -> list[Threshold]:
    """Every integer constant a dim expression is compared with in ``source`` (see the module
    docstring); raises ParserUnavailable without tree-sitter's CUDA grammar."""
    tree = _parser().parse(source.encode())
    reader = _Reader(aliases_of(spec))
    reader.visit(tree.root_node)
    return reader.found


def _python_constant(node: ast.expr) -> int | None:
    """The value of an integer expression of constants only (``2 ** 31``, ``227 * 1024``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp):
        left, right = _python_constant(node.left), _python_constant(node.right)
        if left is None or right is None:
            return None
        operations = {
            ast.Add: lambda: left + right,
            ast.Sub: lambda: left - right,
            ast.Mult: lambda: left * right,
            ast.FloorDiv: lambda: left // right if right else None,
            ast.Pow: lambda: left**right if 0 <= right <= 64 else None,
        }
        compute = operations.get(type(node.op))
        return compute() if compute else None
    return None


def _python_linear(node: ast.expr, dims: Iterable[str]) -> tuple[str, float] | None:
    if isinstance(node, ast.Name) and node.id in dims:
        return node.id, 1.0
    if isinstance(node, ast.BinOp):
        inner, factor = _python_linear(node.left, dims), _python_constant(node.right)
        if inner is None and isinstance(node.op, ast.Mult):
            inner, factor = _python_linear(node.right, dims), _python_constant(node.left)
        if inner is None or not factor:
            return None
        dim, scale = inner
        if isinstance(node.op, ast.Mult):
            return dim, scale * factor
        if isinstance(node.op, (ast.Div, ast.FloorDiv)):
            return dim, scale / factor
    return None


def requires_thresholds(clauses: Iterable[str], spec: OperationSpec) -> list[Threshold]:
    """The thresholds of the header's ``requires`` clauses (the same rule as the code's)."""
    found = []
    dims = list(spec.contract.dims)
    for clause in clauses:
        try:
            tree = ast.parse(clause, mode="eval")
        except SyntaxError:
            continue  # the header's own validation names a malformed clause
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare) or len(node.comparators) != 1:
                continue
            left, right = node.left, node.comparators[0]
            for side, other in ((left, right), (right, left)):
                linear, number = _python_linear(side, dims), _python_constant(other)
                if linear is not None and number is not None:
                    dim, scale = linear
                    found.append(Threshold(dim, number / scale, f"requires: {clause}"))
                    break
    return found


def threshold_values(
    spec: OperationSpec, threshold: Threshold, bounds: tuple[int, int]
) -> list[int]:
    """The dim's values just below (or at) and just above the threshold, at its ``multiple_of``,
    inside ``bounds`` (the dim's domain, ``harness.domain.dim_bounds``)."""
    dim = spec.contract.dims[threshold.dim]
    low, high = bounds
    step = dim.multiple_of
    below = math.floor(threshold.value) // step * step
    above = below + step
    return [v for v in dict.fromkeys((below, above)) if low <= v <= high]
