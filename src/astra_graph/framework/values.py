"""Compile-time values a launcher switches to at run time: one instantiation per site.

FlashInfer's launchers turn run-time sizes into template arguments with value-dispatch macros:
``DISPATCH_ALIGNED_VEC_SIZE(vec_size, VEC_SIZE, {...})`` is a ``switch (vec_size)`` whose every
``case 8:`` declares ``constexpr size_t VEC_SIZE = 8;`` before the launch, and
``DISPATCH_INTERLEAVE(interleave, INTERLEAVE, ...)`` an ``if`` with ``constexpr bool
INTERLEAVE = true`` / ``false``. A macro is read as such a dispatch when its body declares one
of its parameters ``constexpr`` with a literal and ``switch``es or branches on another, or when
it ``switch``es on a parameter and every case declares one name of its own ``constexpr`` with a
literal (vLLM's ``VLLM_STABLE_DISPATCH_VEC_SIZE(n, ...)``: ``case 8: { constexpr int vec_size =
8; ...``; ``VLLM_STABLE_DISPATCH_RANK234(num_dims, ...)``: ``constexpr int tensor_rank = 2``);
no macro is known by name.

An entry names one instantiation (:mod:`astra_graph.kernel.header`: template arguments are
types, tunables and literals), so a value the launcher computes from the sizes cannot be a
template argument of one operation. Each combination of the dispatched literals is a variant
of the launch (:func:`value_variants`): the name is a local holding the literal, and the
launch gets the condition ``runtime == literal``, which becomes a ``requires`` over the dims
(``gcd(16 // elem_bytes, hidden_size) == 8``). The import keeps the variant that the serving
shapes take for the most (shape, element type) pairs (:func:`best_variant`), with the element
types that take it, and says which values were left out: those are instantiations the
framework runs for other sizes (a hidden size off the vector width), each an operation of
its own were it imported. A condition on a flag the caller passes through (``interleave``)
is not a size and cannot be a ``requires``; its variant is then the macro's first case, noted.

A dispatch on a size itself (FlashInfer's ``DISPATCH_HEAD_DIM(head_dim, HEAD_DIM, {...})``
over 64, 128, 256 and 512) is first tried as the framework runs it, one build per case
(``follow_sizes``): the name stands for the run-time size, each template value computed from
it becomes a specialization on the shape (``// astra: specialize``), and the launch requires
one of the cases (``head_dim == 64 or ... == 512``). The importer keeps that reading where the
run-time expression is one dim, an axis of a tensor the kernel gets, and every specialization
reads that dim alone (:attr:`~astra_graph.framework.parse.Launch.followed`); else, or where the
analysis fails, it falls back to one case, as above, and says why: a case fixed at 64 checks the
kernel at head size 64 alone, where the framework runs four kernels. A launch with two size
dispatches follows both or neither.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from astra_graph.framework.draft import suites, takes
from astra_graph.framework.parse import GIVEN_VALUE, REASSIGNED, REASSIGNED_IF_GIVEN

if TYPE_CHECKING:
    from astra_graph.framework.launchers import Analysis
    from astra_graph.framework.parse import Launch, Macro

MAX_VARIANTS = 64
"""Most value combinations one launch is expanded into; a launch with more is refused."""
_LITERAL = r"(-?\d+[uUlL]*|true|false)"


@dataclass(frozen=True)
class ValueDispatch:
    """One value-dispatch macro call around a launch."""

    name: str
    """The compile-time name the launch uses (``VEC_SIZE``)."""
    runtime: str
    """The run-time expression switched on (``vec_size``)."""
    literals: tuple[str, ...]
    """The cases' values, in the macro's order."""


def _cases(macro: Macro, args: tuple[str, ...]) -> ValueDispatch | None:
    """The value dispatch a call of ``macro`` with ``args`` is, or None for any other macro."""
    for index, param in enumerate(macro.params):
        literals = re.findall(
            rf"\bconstexpr\s+[\w:\s]+?\b{re.escape(param)}\s*=\s*{_LITERAL}\s*;", macro.body
        )
        if not literals or index >= len(args):
            continue
        for other, switched in enumerate(macro.params):
            on = re.escape(switched)
            switches = re.search(rf"\b(?:switch|if)\s*\(\s*{on}\s*\)", macro.body)
            if other != index and other < len(args) and switches:
                values = tuple(lit.rstrip("uUlL") for lit in literals)
                return ValueDispatch(args[index].strip(), args[other].strip(), values)
    return _own_name_cases(macro, args)


def _own_name_cases(macro: Macro, args: tuple[str, ...]) -> ValueDispatch | None:
    """The value dispatch of a macro that names the constant itself (vLLM's
    ``VLLM_STABLE_DISPATCH_VEC_SIZE(n, ...)``: ``switch (n) { case 8: { constexpr int vec_size =
    8; ...``), or None: one name, not a parameter, declared ``constexpr`` with a literal in every
    case that declares anything, the body switching on a parameter. A case that declares nothing
    (an error branch) has no value and no variant."""
    declared = re.findall(rf"\bconstexpr\s+[\w:\s]+?\b(\w+)\s*=\s*{_LITERAL}\s*;", macro.body)
    names = {name for name, _ in declared}
    if len(names) != 1 or names & set(macro.params):
        return None
    if len(re.findall(r"\bconstexpr\b", macro.body)) != len(declared):
        return None  # another constexpr (not a literal, not the one name): not read
    for other, switched in enumerate(macro.params):
        on = re.escape(switched)
        if other < len(args) and re.search(rf"\bswitch\s*\(\s*{on}\s*\)", macro.body):
            values = tuple(dict.fromkeys(lit.rstrip("uUlL") for _, lit in declared))
            return ValueDispatch(names.pop(), args[other].strip(), values)
    return None


def _is_size_dispatch(dispatch: ValueDispatch) -> bool:
    """Whether a dispatch's cases are sizes (whole numbers, two or more), not a flag's."""
    return len(dispatch.literals) > 1 and all(re.fullmatch(r"-?\d+", v) for v in dispatch.literals)


def value_variants(
    launch: Launch, macros: dict[str, Macro], follow_sizes: bool = False
) -> list[tuple[Launch, str]]:
    """``launch`` once per combination of its value dispatches' literals, each with its note
    (the launch alone, with '', when it has none); raises ValueError past
    :data:`MAX_VARIANTS`. With ``follow_sizes``, each dispatch on a size is not expanded but
    followed (its name bound to the run-time expression, the launch required to take one of its
    cases, :attr:`~astra_graph.framework.parse.Launch.followed` set), and [] is returned where
    the launch has no such dispatch."""
    dispatches: list[ValueDispatch] = []
    followed: list[ValueDispatch] = []
    rest = []
    unfollowed = []  # with follow_sizes: every macro call but the followed dispatches
    for name, args in launch.dispatch:
        macro = macros.get(name)
        found = _cases(macro, args) if macro is not None else None
        if found is not None and follow_sizes and _is_size_dispatch(found):
            followed.append(found)
            continue
        unfollowed.append((name, args))
        if found is None:
            rest.append((name, args))
        else:
            dispatches.append(found)
    if follow_sizes:
        if not followed:
            return []
        launch = replace(
            launch,
            dispatch=tuple(unfollowed),
            locals={**launch.locals, **{d.name: f"({d.runtime})" for d in followed}},
            conditions=(
                *launch.conditions,
                *(
                    (" || ".join(f"({d.runtime}) == ({v})" for v in d.literals), True)
                    for d in followed
                ),
            ),
            followed=tuple((d.runtime, tuple(int(v) for v in d.literals)) for d in followed),
        )
        note = "; ".join(
            f"{d.name} follows {d.runtime}: one build per case ({', '.join(d.literals)}), as "
            "the framework runs one kernel per case"
            for d in followed
        )
        if not dispatches:
            return [(launch, note)]
        return [
            (v, f"{note}; {other}" if other else note)
            for v, other in value_variants(launch, macros)
        ]
    if not dispatches:
        return [(launch, "")]
    combinations = list(itertools.product(*(d.literals for d in dispatches)))
    if len(combinations) > MAX_VARIANTS:
        raise ValueError(
            f"{len(combinations)} combinations of dispatched values "
            f"({', '.join(d.name for d in dispatches)}), more than {MAX_VARIANTS}"
        )
    out = []
    for values in combinations:
        chosen = dict(zip((d.name for d in dispatches), values, strict=True))
        conditions = [
            (f"({d.runtime}) == ({v})", True) for d, v in zip(dispatches, values, strict=True)
        ]
        others = "; ".join(
            f"{d.name} = {v} where {d.runtime} is {v} (other values "
            f"{', '.join(x for x in d.literals if x != v)} are other instantiations, not imported)"
            for d, v in zip(dispatches, values, strict=True)
        )
        out.append(
            (
                replace(
                    launch,
                    dispatch=tuple(rest),
                    locals={**launch.locals, **chosen},
                    conditions=(*launch.conditions, *conditions),
                ),
                others,
            )
        )
    return out


def branch_variants(launch: Launch) -> list[tuple[Launch, str]]:
    """``launch`` once per combination of the paths of the ``if``/``else`` chains before it
    that set its locals (:attr:`~astra_graph.framework.parse.Launch.branches`), each with its
    note (the launch alone, with '', where it has none): the path's locals hold its values and
    lose the :data:`~astra_graph.framework.parse.REASSIGNED` (and ``REASSIGNED_IF_GIVEN``) marks
    of its chain's lines, its
    conditions and host checks join the launch's, so each variant is the launch where that path
    ran (vLLM's static fp8 quantisation sets its group shape per scale rank). A combination in
    which a local the paths set is read by another local of the launch is left out (that one
    was read at the local's earlier value); past :data:`MAX_VARIANTS` none is made."""
    if not launch.branches:
        return [(launch, "")]
    combinations = list(itertools.product(*(chain.paths for chain in launch.branches)))
    if len(combinations) > MAX_VARIANTS:
        return [(launch, "")]
    out = []
    for paths in combinations:
        set_here = {name for path in paths for name, _ in path.values}
        if any(
            other not in set_here and set_here & set(re.findall(r"\b\w+\b", value))
            for other, value in launch.locals.items()
        ):
            continue
        locals_ = dict(launch.locals)
        for chain, path in zip(launch.branches, paths, strict=True):
            for name, value in path.values:
                # the chain's marks of the local (set there, or there only if an optional is
                # given) stand for the paths not taken: this one says its value
                line = locals_.get(f"{REASSIGNED}{name}", "")
                if line.isdigit() and chain.first_line <= int(line) <= chain.last_line:
                    del locals_[f"{REASSIGNED}{name}"]
                given = locals_.get(f"{REASSIGNED_IF_GIVEN}{name}", "").split(" ", 1)[0]
                if given.isdigit() and chain.first_line <= int(given) <= chain.last_line:
                    del locals_[f"{REASSIGNED_IF_GIVEN}{name}"]
                    locals_.pop(f"{GIVEN_VALUE}{name}", None)
                locals_[name] = value
        checks = tuple(c for path in paths for c in path.checks)
        said = "; ".join(
            f"the path of the chain at line {chain.first_line} where "
            + " and ".join(f"{c} is {str(t).lower()}" for c, t in path.conditions)
            for chain, path in zip(launch.branches, paths, strict=True)
        )
        variant = replace(
            launch,
            locals=locals_,
            conditions=(
                *launch.conditions,
                *(c for path in paths for c in path.conditions),
                *((c, True) for c in checks),
            ),
            checks=(*launch.checks, *checks),
            branches=(),
        )
        out.append((variant, said))
    return out or [(launch, "")]


def taken_pairs(analysis: Analysis) -> dict[str, int]:
    """For each element type the analysis dispatches, how many of its suite shapes take the
    launch with that type alone (0 for a type that never does)."""
    # the serving shapes as drafted without the launch's conditions: a variant's own
    # `head_dim == 128` pins its suites to itself, so each would take all of its own
    tuning, heldout, _ = suites(replace(analysis, requires=[]))
    return {
        dtype: sum(
            bool(takes(replace(analysis, dtypes=(dtype,)), dims)) for dims in [*tuning, *heldout]
        )
        for dtype in analysis.dtypes
    }


def best_variant(candidates: list[tuple[Analysis, str]]) -> tuple[Analysis, str] | None:
    """The analysed variant the serving shapes take most often, its element types cut to those
    that take it; None when no shape takes any. Ties go to the earlier (the macro's order)."""
    best: tuple[int, Analysis, str] | None = None
    for analysis, note in candidates:
        pairs = taken_pairs(analysis)
        score = sum(pairs.values())
        if score and (best is None or score > best[0]):
            kept = tuple(d for d in analysis.dtypes if pairs[d])
            best = (score, replace(analysis, dtypes=kept), note)
    return None if best is None else (best[1], best[2])
