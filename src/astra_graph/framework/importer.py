"""Import every launcher of one framework file: flatten, parse, analyse, compile, write.

The steps, each its own module: :func:`~astra_graph.framework.flatten.flatten` (framework
includes inlined), :func:`~astra_graph.framework.parse.parse_source` (kernels, launchers),
:func:`~astra_graph.framework.launchers.analyse` (per launch site), the device source compiled
with NVRTC for every instantiation the launchers dispatch, each instantiation once per import
(:mod:`~astra_graph.framework.device`), then one operation folder per launch site
(:mod:`~astra_graph.framework.draft`). The :class:`ImportReport` says, per launcher, whether it
came in and, if not, why, in one line each.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import BaseModel

from astra_graph.framework.callers import (
    Callers,
    CallSite,
    caller_types,
    checked_dtypes,
    compose,
    shape_checker,
)
from astra_graph.framework.device import compile_device, device_source
from astra_graph.framework.draft import suites, write_operation
from astra_graph.framework.flatten import Flattened, flatten
from astra_graph.framework.instantiations import caller_element_types
from astra_graph.framework.launchers import (
    Analysis,
    RawPointer,
    Reshape,
    Unmapped,
    analyse,
    assumed_shape_notes,
    device_constants,
)
from astra_graph.framework.naming import (
    TorchFacing,
    default_root,
    defining_file,
    write_framework,
)
from astra_graph.framework.parse import Launch, Launcher, Macro, Source, parse_source
from astra_graph.framework.values import best_variant, branch_variants, value_variants
from astra_graph.harness import nvrtc
from astra_graph.kernel import expr
from astra_graph.kernel.contract import ELEM_BYTES
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import checked_std, split_entry

READ_FORMS = "only <<<>>>, cudaLaunchKernel, cudaLaunchKernelEx and LaunchKernel(...)(...)"
"""The launch forms :mod:`~astra_graph.framework.parse` reads, for the reason of one it does not."""
COMPILER_REASON = (
    "device code only, launchers read by the parser: nvcc on the whole file needs torch's "
    "headers, which CI and CPU hosts lack"
)


class LauncherResult(BaseModel):
    launcher: str
    kernel: str
    line: int
    imported: bool
    reason: str = ""
    applicable: bool = True
    """False when the launch is for other GPUs or builds: a condition on the compute capability
    or CUDA version alone (vLLM's ``cc_major >= 10`` 256-bit path) is false on the import's
    target, whatever the shapes. Such a site is correctly not imported, not a failure."""
    op: str | None = None
    folder: str | None = None
    dtypes: list[str] = []
    notes: list[str] = []


class ImportReport(BaseModel):
    source: str
    files_read: list[str]
    kept_includes: list[str]
    compiler: str
    compile_seconds: float
    compiled: bool
    compile_error: str = ""
    launchers: list[LauncherResult]


def op_name(launcher: str, index: int, several: bool) -> str:
    """A contract name (lower case, digits, underscores) for one launch site: the launcher's,
    with the site's number (1, 2, ...) where the launcher has several."""
    base = launcher if not several else f"{launcher}_{index + 1}"
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", base).lower()
    name = re.sub(r"[^a-z0-9_]", "_", name)
    return name if re.match(r"[a-z_]", name) else f"op_{name}"


def _instantiations(analysis: Analysis) -> list[str]:
    """The name expressions of every element type the launcher dispatches (a specialization at
    the first size it builds at: :func:`_admitted_sizes`)."""
    if "<" not in analysis.entry:
        return [analysis.entry]
    return [_instantiation(analysis, DTYPES[d].ctype) for d in analysis.dtypes]


def _instantiation(analysis: Analysis, ctype: str, sizes: Mapping[str, int] | None = None) -> str:
    """The entry for element type ``ctype``, each specialization at ``sizes`` (default: the
    values the import builds at, :attr:`~.launchers.Analysis.built_at`)."""
    values = {**analysis.built_at, **(sizes or {})}
    entry = re.sub(r"\bT\b", ctype, analysis.entry)
    return re.sub(r"\b\w+\b", lambda m: str(values.get(m[0], m[0])), entry)


# fmt: off
SPECIALIZED_SIZES = (
    8, 24, 64, 128, 200, 256, 512, 1000, 1024, 1536, 2048,
    2560, 3584, 4096, 5120, 7168, 8192, 12288, 14336, 16384,
)
# fmt: on
"""The sizes a template value specialized on one dim is built at, to find which the kernel's
own ``static_assert``s admit (SGLang's rmsnorm: 64, 128, 256, then multiples of 256 up to
8192): serving hidden and head sizes, and sizes off every power of two."""


def _specialized_at(analysis: Analysis, dim: str, size: int) -> dict[str, int]:
    """Each specialization's value where ``dim``, the one dim they read, is ``size`` (SGLang's
    rope: ``kRopeDim`` is the rope dim, ``kWorkThreads`` a function of it)."""
    return {
        name: expr.evaluate_int(value, {dim: size})
        for name, value in analysis.specializations.items()
    }


def _admitted_sizes(result: LauncherResult, analysis: Analysis, compiler: _DeviceCompiler) -> bool:
    """For a launch whose entry is specialized on one dim (:attr:`~.launchers.Analysis.
    specializations`, each that dim or a function of it: :func:`_specialized_at`), the sizes
    of :data:`SPECIALIZED_SIZES` its instantiation builds at become a requirement (``hidden ==
    64 or hidden == 128 or ...``), unless it builds at all of them: the framework builds a
    kernel only for the sizes its ``static_assert``s admit, so the others are outside the
    operation's domain, said in a note. False, with the reason, when none builds. A launch
    that follows a size dispatch builds at the dispatch's cases instead
    (:func:`_followed_builds`)."""
    if not analysis.specializations:
        return True
    if analysis.followed:
        return _followed_builds(result, analysis, compiler)
    read = {d for e in analysis.specializations.values() for d in expr.names(e)}
    if len(read) != 1:
        result.reason = (
            "specialized on more than one size: "
            f"{analysis.specializations}; the sizes it builds at are not searched"
        )
        return False
    (dim,) = read
    probe = _probe_dtype(analysis)
    sizes = SPECIALIZED_SIZES
    at: dict[int, dict[str, int]] = {}
    for size in sizes:
        try:
            at[size] = _specialized_at(analysis, dim, size)
        except expr.ExprError:
            continue  # a value with no number there (a division by zero): not built at it
    tried = list(at)
    entries = [_instantiation(analysis, DTYPES[probe].ctype, at[v]) for v in tried]
    builds = _building(compiler, entries)
    name = ", ".join(analysis.specializations)
    if tried == list(sizes) and all(builds):
        # it builds at every size tried: nothing says a size is outside its domain
        analysis.built_at = at[sizes[0]]
        return True
    admitted = [v for v, built in zip(tried, builds, strict=True) if built]
    if not admitted:
        error = _first_build_error(compiler, tried[0], entries[0]) if tried else ""
        result.reason = (
            f"its instantiation builds at none of the sizes {list(sizes)} of {dim}{error}"
        )
        return False
    _keep_dtypes_building(
        result,
        analysis,
        probe,
        lambda d: [_instantiation(analysis, DTYPES[d].ctype, at[v]) for v in admitted],
        compiler,
        f"every size {probe} builds at ({admitted})",
    )
    analysis.built_at = at[admitted[0]]
    analysis.requires.append(" or ".join(f"{dim} == {v}" for v in admitted))
    refused = [v for v in sizes if v not in admitted]
    analysis.notes.append(
        f"{dim}: the kernel is built per size ({name}); of the sizes tried it builds at "
        f"{admitted} and not at {refused} (its static_asserts): the operation's domain is the "
        "sizes tried that build (others, untried, are left out with them)"
    )
    return True


def _leave_out(
    result: LauncherResult, analysis: Analysis, dropped: Iterable[str], why: str
) -> None:
    """The element types ``dropped`` taken out of the operation and its result, ``why`` noted
    (nothing where none is dropped)."""
    gone = set(dropped)
    if not gone:
        return
    analysis.dtypes = tuple(d for d in analysis.dtypes if d not in gone)
    result.dtypes = list(analysis.dtypes)
    analysis.notes.append(why)


def _probe_dtype(analysis: Analysis) -> str:
    """The element type sizes are searched at: a serving one where the launch has it (a
    framework's norm builds for fp16 and bf16 alone); the others are kept or dropped after."""
    return next((d for d in analysis.dtypes if d != "float32"), analysis.dtypes[0])


def _first_build_error(compiler: _DeviceCompiler, at: object, entry: str) -> str:
    """`` (NVRTC at <at>: <its first error>)`` for a refusal where nothing built: an old CCCL or
    a missing header on the host then reads as what it is, not as the kernel's own limit. The
    entry was compiled alone when its program failed (:func:`_building`), so this is the
    compiler's cached answer, not another compile."""
    return f" (NVRTC at {at}: {compiler.first_error([entry])})"


def _building(compiler: _DeviceCompiler, entries: list[str]) -> list[bool]:
    """Which of ``entries`` build: one program for them all, then one each only where that
    program fails (to tell whose the error is)."""
    if compiler.first_error(entries) is None:
        return [True] * len(entries)
    return [compiler.first_error([e]) is None for e in entries]


def _keep_dtypes_building(
    result: LauncherResult,
    analysis: Analysis,
    probe: str,
    entries: Callable[[str], list[str]],
    compiler: _DeviceCompiler,
    where: str,
) -> None:
    """The element types other than ``probe`` kept only where each of their ``entries`` (the
    instantiations ``probe`` built at) builds too; the others left out, said (``where``)."""
    dropped = [d for d in analysis.dtypes if d != probe and compiler.first_error(entries(d))]
    _leave_out(
        result,
        analysis,
        dropped,
        f"element types {', '.join(dropped)} do not build at {where}: left out",
    )


def _followed_builds(result: LauncherResult, analysis: Analysis, compiler: _DeviceCompiler) -> bool:
    """For a launch that follows a size dispatch (:attr:`~.launchers.Analysis.followed`): each
    case the framework builds is compiled (at one serving element type) with every
    specialization at its value there; the launch requires a case that builds (the dispatch's
    cases, already a requirement, are narrowed where one does not), and the first is the value
    the import compiles at. Another element type is kept only where it builds at every case the
    probe's does. False, with the reason, when none builds. (The analysis has checked that the
    specializations read the followed dims alone.)"""
    probe = _probe_dtype(analysis)
    names = list(analysis.followed)

    def entry_at(dtype: str, at: Mapping[str, int]) -> str:
        sizes = {n: expr.evaluate_int(e, at) for n, e in analysis.specializations.items()}
        return _instantiation(analysis, DTYPES[dtype].ctype, sizes)

    cases = [
        dict(zip(names, values, strict=True))
        for values in itertools.product(*analysis.followed.values())
    ]
    entries = [entry_at(probe, at) for at in cases]
    builds = _building(compiler, entries)
    admitted = [at for at, built in zip(cases, builds, strict=True) if built]
    refused = [at for at, built in zip(cases, builds, strict=True) if not built]
    if not admitted:
        error = _first_build_error(compiler, cases[0], entries[0])
        result.reason = (
            f"its instantiation builds at none of the dispatch's cases {analysis.followed}{error}"
        )
        return False
    _keep_dtypes_building(
        result,
        analysis,
        probe,
        lambda d: [entry_at(d, at) for at in admitted],
        compiler,
        f"every case {probe} builds at ({admitted})",
    )
    first = admitted[0]
    analysis.built_at = {
        n: expr.evaluate_int(e, first) for n, e in analysis.specializations.items()
    }
    if refused:
        # one dim: `head_dim == 128 or ...`, the list of sizes the suites snap to (draft._allowed)
        terms = [" and ".join(f"{n} == {v}" for n, v in at.items()) for at in admitted]
        analysis.requires.append(
            " or ".join(terms if len(names) == 1 else [f"({t})" for t in terms])
        )
        analysis.notes.append(
            f"the dispatch's cases {refused} do not build with NVRTC here: left out of the domain"
        )
    return True


def for_another_gpu(analysis: Analysis, arch: str) -> str:
    """Why the launch is for another GPU or build, or '': a condition around it that reads only
    the compute capability or the CUDA version is false on ``arch``
    (:attr:`~astra_graph.framework.launchers.Analysis.other_gpu`), whatever the shapes."""
    if not analysis.other_gpu:
        return ""
    return f"not applicable on {arch}: requires {analysis.other_gpu} (the GPU or the build)"


def dead_code(analysis: Analysis) -> str:
    """Why the launch is never made on any GPU for any shape, or '': a condition around it is
    false from literals alone (:attr:`~astra_graph.framework.launchers.Analysis.dead`). Like a
    launch for another GPU it is correctly not imported, not a failure."""
    if not analysis.dead:
        return ""
    return f"dead code: never launched, its condition {' '.join(analysis.dead.split())!r} is false"


def _never_taken(analysis: Analysis) -> str:
    """Why the launcher never takes this launch on the import's GPU for the drafted shapes (its
    ``if`` conditions false on each of them, moved dims included), or ''. A requirement that
    is false with no dim in it at all reads only tensor ranks, which are drafted from the axes
    the launcher asks for: that is said, since a caller with other ranks does take it. Shapes
    the import assumed (a tensor drafted from another's shape) are named after the reason: the
    launcher's own checks of such a tensor (vLLM's ``out.numel() == num_tokens * d`` beside
    an ``out`` drafted as the input's shape) then fail at every shape, and the cause is the
    draft, not the serving shapes."""
    tuning, heldout, _ = suites(analysis)
    if tuning and heldout:
        return ""
    assumed = assumed_shape_notes(analysis.notes)
    drafts = f"; shapes the import assumed: {'; '.join(assumed)}" if assumed else ""
    for requirement in analysis.requires:
        if expr.constant_false(requirement):
            return (
                f"never launched for the drafted shapes: requires {requirement}, false for "
                f"the tensor ranks drafted from the axes the launcher reads{drafts}"
            )
    return (
        f"never launched on this GPU for serving shapes (requires {analysis.requires[-1]}){drafts}"
    )


@dataclass
class _DeviceCompiler:
    """NVRTC over one import's device source, each instantiation compiled once per import.

    An instantiation that compiled, alone or in a program with others, is left out of every
    later program: its errors would be its own, so it compiles in any program of the same
    source. A program of the same instantiations as one that failed gives that failure again
    without compiling. Only a program that failed for several sites is followed by smaller
    ones, to tell whose the error is (:func:`import_file`)."""

    source: str
    arch: str
    std: str | None = None
    """The framework build's C++ standard (NVRTC's default when None)."""
    compiled: set[str] = field(default_factory=set)
    """The instantiations that compiled."""
    failed: dict[frozenset[str], str] = field(default_factory=dict)
    """NVRTC's first error of each program that failed, by the instantiations it compiled."""
    seconds: float = 0.0
    """NVRTC's time over every program compiled."""

    def first_error(self, entries: list[str]) -> str | None:
        """None when every one of ``entries`` (name expressions) compiles, else NVRTC's first
        error; those not compiled before are compiled together, in one program."""
        fresh = [e for e in entries if e not in self.compiled]
        if not fresh:
            return None
        program = frozenset(fresh)
        if program not in self.failed:
            out = compile_device(self.source, fresh, self.arch, self.std)
            self.seconds += out.seconds
            if out.ok:
                self.compiled.update(fresh)
                return None
            self.failed[program] = _first_error(out.log)
        return self.failed[program]


def _width_admitted_dtypes(result: LauncherResult, analysis: Analysis) -> bool:
    """Keep the element types that every requirement of the element's width alone admits (a
    launcher's ``static_assert(sizeof(DType) == 2)``, read as ``elem_bytes == 2``); the others
    left out, said. The kernel alone may compile for them (SGLang's half-width RMSNorm does at
    float32), but the framework never builds the launcher there. False, with the reason, when
    none is left."""
    terms = [
        ast.unparse(term)
        for requirement in analysis.requires
        for term in expr.conjuncts(expr.parse(requirement).body)
    ]
    widths = [t for t in terms if expr.names(t) == {ELEM_BYTES}]
    refused = {
        dtype: term
        for dtype in analysis.dtypes
        for term in widths
        if not expr.evaluate(term, {ELEM_BYTES: DTYPES[dtype].itemsize})
    }
    if refused and set(refused) == set(analysis.dtypes):
        result.reason = f"no element type meets the launcher's {next(iter(refused.values()))}"
        return False
    for dtype, term in refused.items():
        _leave_out(
            result,
            analysis,
            [dtype],
            f"element type {dtype} left out: the launcher requires {term}",
        )
    return True


def _compiling_dtypes(
    result: LauncherResult, analysis: Analysis, compiler: _DeviceCompiler
) -> bool:
    """Keep the drafted element types (:attr:`~.launchers.Analysis.drafted_dtypes`) whose
    instantiation compiles, each compiled alone (a ``static_assert`` on the element's size
    refuses some); False, with the reason, when none does. Read dispatch types stay as read."""
    if not analysis.drafted_dtypes:
        return True
    kept, error = [], ""
    for dtype in analysis.dtypes:
        entry = _instantiation(analysis, DTYPES[dtype].ctype)
        failure = compiler.first_error([entry])
        if failure is None:
            kept.append(dtype)
        else:
            error = error or failure
    dropped = [d for d in analysis.dtypes if d not in kept]
    if not kept:
        result.reason = f"device code does not compile with NVRTC: {error}"
        return False
    _leave_out(
        result, analysis, dropped, f"element types {', '.join(dropped)} do not compile: {error}"
    )
    return True


def _first_error(log: str) -> str:
    errors = nvrtc.first_errors(log, limit=1)
    return errors[0] if errors else " ".join(log.split())[:300]  # one line: it goes in a reason


def _variant_analysis(
    launcher: Launcher,
    launch: Launch,
    parsed: Source,
    macros: dict[str, Macro],
    device_facts: dict[str, int],
    reshape: Reshape | None = None,
    raw_root: bool = False,
) -> Analysis:
    """The launch analysed once per value-dispatch variant (:mod:`~astra_graph.framework.
    values`), the one the serving shapes take kept; raises the first variant's reason when
    none analyses. A dispatch on a size is followed (one build per case) where that analyses;
    else one case is fixed, and why the size was not followed is noted. ``raw_root`` as for
    :func:`~astra_graph.framework.launchers.analyse`."""
    unfollowed = ""
    try:
        followed = _analysed_variants(
            launcher,
            _variants(launch, macros, True),
            parsed,
            macros,
            device_facts,
            reshape,
            raw_root,
        )
    except ValueError as exc:
        unfollowed = f"a size dispatch not followed (one case fixed instead): {exc}"
    else:
        if followed is not None:
            return followed
    analysis = _analysed_variants(
        launcher, _variants(launch, macros), parsed, macros, device_facts, reshape, raw_root
    )
    assert analysis is not None  # value_variants gives at least the launch itself
    if unfollowed:
        analysis.notes.append(unfollowed)
    return analysis


def _variants(
    launch: Launch, macros: dict[str, Macro], follow_sizes: bool = False
) -> list[tuple[Launch, str]]:
    """The launch's value-dispatch variants (:func:`~astra_graph.framework.values.
    value_variants`) of each path of the chains that set its locals (:func:`~astra_graph.
    framework.values.branch_variants`), with both notes."""
    return [
        (variant, "; ".join(filter(None, (path, note))))
        for branch, path in branch_variants(launch)
        for variant, note in value_variants(branch, macros, follow_sizes)
    ]


def _analysed_variants(
    launcher: Launcher,
    variants: list[tuple[Launch, str]],
    parsed: Source,
    macros: dict[str, Macro],
    device_facts: dict[str, int],
    reshape: Reshape | None,
    raw_root: bool = False,
) -> Analysis | None:
    """The variant the serving shapes take most, of those that analyse; None for no variant;
    raises the first variant's reason when none analyses. ``raw_root`` as for
    :func:`~astra_graph.framework.launchers.analyse`."""
    if not variants:
        return None
    analysed: list[tuple[Analysis, str]] = []
    failures: list[ValueError] = []
    for variant, note in variants:
        try:
            analysis = analyse(
                launcher,
                variant,
                parsed.kernels,
                macros,
                device_facts,
                parsed.constants,
                parsed.structs,
                reshape,
                parsed.returns,
                parsed.procedures,
                raw_root,
            )
        except ValueError as exc:
            failures.append(exc)
            continue
        if note:
            analysis.notes.append(note)
        analysed.append((analysis, note))
    if not analysed:
        raise failures[0]
    chosen = best_variant(analysed) if len(analysed) > 1 else None
    return chosen[0] if chosen is not None else analysed[0][0]


def _restrict_dtypes(analysis: Analysis, site: CallSite) -> None:
    """The analysis' element types cut to those the caller's dtype checks accept; raises
    Unmapped when none of the dispatched ones is."""
    elements = {name for name, use in analysis.tensors.items() if use.element == "T"}
    allowed = checked_dtypes(site, elements)
    if allowed is None:
        return
    kept = tuple(d for d in analysis.dtypes if d in allowed)
    if not kept:
        raise Unmapped(
            f"{site.function} accepts only {sorted(allowed)}, which the dispatch does not "
            f"instantiate ({', '.join(analysis.dtypes)})"
        )
    if kept != analysis.dtypes:
        analysis.notes.append(f"element types {list(kept)}: {site.function}'s dtype checks")
    analysis.dtypes = kept


def _site_analysis(
    launcher: Launcher,
    launch: Launch,
    parsed: Source,
    device_facts: dict[str, int],
    callers: Callers | None,
    flat: Flattened,
) -> tuple[Analysis, TorchFacing]:
    """One launch site analysed, through its launcher's callers when the launcher passes raw
    pointers (:mod:`~astra_graph.framework.callers`), and the host function torch calls for
    it; raises ValueError with the reason. Where no caller passes tensors, the launcher is
    imported directly (:func:`_imported_directly`)."""
    file = defining_file(launcher.name, flat.files) or flat.files[0]
    try:
        analysis = _variant_analysis(launcher, launch, parsed, parsed.macros, device_facts)
        return analysis, TorchFacing(launcher.name, launcher.params, file)
    except RawPointer as raw:
        try:
            return _followed(launcher, launch, parsed, parsed.macros, device_facts, callers, raw)
        except RawPointer as unfollowed:
            analysis = _imported_directly(launcher, launch, parsed, device_facts, unfollowed)
            return analysis, TorchFacing(launcher.name, launcher.params, file)


def _imported_directly(
    launcher: Launcher,
    launch: Launch,
    parsed: Source,
    device_facts: dict[str, int],
    unfollowed: RawPointer,
) -> Analysis:
    """``launch`` of a raw-pointer launcher that no caller passes tensors to (``unfollowed``
    says so), analysed with its raw pointers as the tensors and its integer parameters as the
    dims (:func:`~astra_graph.framework.launchers.analyse`'s ``raw_root``): what any caller's
    tensors must hold is how far the kernel reaches them, which its own row-major indices say.
    Raises Unmapped with the direct import's reason (what stops it now, not that the pointers
    are raw), and ``unfollowed``'s where a caller was tried."""
    try:
        return _variant_analysis(
            launcher, launch, parsed, parsed.macros, device_facts, raw_root=True
        )
    except ValueError as exc:
        tried = f"; {unfollowed}" if str(unfollowed).startswith(THROUGH) else ""
        raise Unmapped(f"{DIRECT_REASON}: {exc}{tried}") from None


THROUGH = "through"
"""How the reason of a launch analysed through a caller begins (:func:`_followed`)."""
DIRECT_REASON = "no caller passes tensors, and imported directly"
"""How the reason of a raw-pointer launcher refused by :func:`_imported_directly` begins."""
MAX_CALLER_DEPTH = 3
"""How many callers deep a raw-pointer launch is followed to one that passes tensors: SGLang's
rotary ``launch_kernel`` is called by ``dispatch_by_dtype``, raw pointers still, which
``RotaryEmbeddingKernel::run`` calls with its tensors (two). A bound, so that a caller that
calls itself ends."""


def _followed(
    launcher: Launcher,
    launch: Launch,
    parsed: Source,
    macros: dict[str, Macro],
    device_facts: dict[str, int],
    callers: Callers | None,
    raw: RawPointer,
    depth: int = 1,
) -> tuple[Analysis, TorchFacing]:
    """``launch`` of the raw-pointer ``launcher`` analysed through a caller, and the host
    function torch calls for it: a caller that passes raw pointers in turn is followed to its
    own callers (up to :data:`MAX_CALLER_DEPTH`); raises ValueError with the reason."""
    sites = callers.calls(launcher) if callers is not None else []
    if callers is None or not sites:
        where = "the file, its includes or the include folders"
        raise RawPointer(f"{raw}; no caller in {where} passes tensors") from None
    failures: list[str] = []
    passed_on: list[str] = []
    # a caller through which the launch is dead code (it passes nullptr where the launch
    # sits under `ptr != nullptr`) is the answer only when every caller is one
    dead: tuple[Analysis, TorchFacing] | None = None
    merged: set[int] = set()  # calls taken in as another's element types
    # the rank forms of one call (callers.rank_forms) that analyse, each an operation, and the
    # reasons of those that do not
    formed: list[tuple[Analysis, TorchFacing]] = []
    unformed: list[tuple[tuple[Path, int], str]] = []
    formed_at: tuple[Path, int] | None = None
    for site in sites:
        if formed_at is not None and (site.file, site.line) != formed_at:
            break  # every form of the call that gave operations is read
        if id(site) in merged:
            continue
        site_macros = {**macros, **callers.macros(site.file)}
        # the calls that instantiate the launcher once per element type are one operation
        element = caller_types(launcher, site, sites)
        siblings = element.calls if element is not None else (site,)
        try:
            host, composed = compose(launcher, launch, site, site_macros, element)
            try:
                analysis = _variant_analysis(
                    host, composed, parsed, site_macros, device_facts, shape_checker(site)
                )
                _restrict_dtypes(analysis, site)
                facing = TorchFacing(site.function, site.params, site.file)
            except RawPointer as deeper:
                if depth >= MAX_CALLER_DEPTH:
                    raise
                # the caller's launch, its raw pointers now the caller's parameters, is
                # followed to the caller's own callers as the launcher's was
                named = replace(host, name=site.function)
                try:
                    analysis, facing = _followed(
                        named,
                        composed,
                        parsed,
                        site_macros,
                        device_facts,
                        callers,
                        deeper,
                        depth + 1,
                    )
                except ValueError as relayed:
                    # whatever stopped it there, a relay's reason ranks after a binding's own
                    raise RawPointer(str(relayed)) from None
                for read in (analysis, *analysis.forms):
                    read.launcher = launcher.name  # the operation is still this launcher's
        except ValueError as exc:
            merged.update(id(s) for s in siblings)
            form = f" at {site.form}" if site.form else ""
            reason = f"{THROUGH} {site.function} ({site.file.name}:{site.line}){form}: {exc}"
            if site.form:
                unformed.append(((site.file, site.line), f"{site.form} not imported: {exc}"))
            # a caller that passes raw pointers in turn (a header's convenience launcher
            # over this one) says less than a binding's own reason: its reason goes last
            (passed_on if isinstance(exc, RawPointer) else failures).append(reason)
            continue
        merged.update(id(s) for s in siblings)
        if len(sites) > len(siblings):
            # each other call by where it is and what it instantiates: one caller may call it
            # several times (SGLang's rotary `run`: `dispatch_by_dtype<true>` and `<false>`)
            others = ", ".join(
                f"{s.function} ({s.file.name}:{s.line}"
                + (f", <{', '.join(s.template_args)}>)" if s.template_args else ")")
                for s in sites
                if s not in siblings and (s.file, s.line) != (site.file, site.line)
            )
            if others:
                analysis.notes.append(f"other calls not imported: {others}")
        if site.form:
            analysis.form = "_".join(filter(None, (site.form, analysis.form)))
            analysis.notes.append(site.form_note)
            if not analysis.dead:
                formed.append((analysis, facing))
                formed_at = (site.file, site.line)
                continue
        if not analysis.dead:
            return analysis, facing
        dead = dead or (analysis, facing)
    if formed:
        first, facing = formed[0]
        first.forms = [other for other, _ in formed[1:]]
        for read, _ in formed:
            read.notes += [note for at, note in unformed if at == formed_at]
        return first, facing
    if dead is not None and not failures and not passed_on:
        return dead
    reason = [*failures, *passed_on][0]
    raise (Unmapped(reason) if failures else RawPointer(reason)) from None


def _analysed_sites(
    parsed: Source,
    device_facts: dict[str, int],
    only: Set[str] | None,
    flat: Flattened,
    callers: Callers | None = None,
) -> tuple[list[LauncherResult], list[tuple[LauncherResult, Analysis, TorchFacing]]]:
    """One result per launch site of the parsed file (or of the launchers named in ``only``),
    and the sites whose analysis succeeded with the host function torch calls for each; a site
    that cannot be analysed, or whose launch form is not read, carries its one-line reason."""
    results: list[LauncherResult] = []
    analyses: list[tuple[LauncherResult, Analysis, TorchFacing]] = []
    chosen = [x for x in parsed.launchers if only is None or x.name in only]
    templated = {x.name for x in chosen if x.own_template}
    by_callers = caller_element_types(flat.text, templated, parsed.macros) if templated else {}
    named: dict[str, int] = {}  # op name -> the line of the launcher it was given for
    for launcher in chosen:
        if launcher.name in by_callers:
            launcher = replace(launcher, instantiated=tuple(by_callers[launcher.name].items()))
        several = len(launcher.launches) > 1
        for index, launch in enumerate(launcher.launches):
            result = LauncherResult(
                launcher=launcher.name, kernel=launch.kernel, line=launch.line, imported=False
            )
            results.append(result)
            try:
                analysis, facing = _site_analysis(
                    launcher, launch, parsed, device_facts, callers, flat
                )
            except ValueError as exc:  # Unmapped, or a launcher this analysis cannot read
                result.reason = str(exc) or type(exc).__name__
                continue
            for read in (analysis, *analysis.forms):
                if read is not analysis:  # another rank form of the call: its own operation
                    result = result.model_copy(update={"notes": []})  # a list of its own
                    results.append(result)
                # a rank form's name follows the launcher's (callers.rank_forms: `_k_2d`)
                name = "_".join(filter(None, (launcher.name, read.form)))
                result.op = op_name(name, index, several)
                if named.setdefault(result.op, launcher.line) != launcher.line:
                    # another launcher of the same name (SGLang's classes each have a `run`):
                    # the line keeps the two operations' folders apart
                    result.op = op_name(f"{name}_{launcher.line}", index, several)
                result.dtypes = list(read.dtypes)
                analyses.append((result, read, facing))
    for function, line, call in parsed.other_launches:
        if only is None or function in only:
            results.append(
                LauncherResult(
                    launcher=function,
                    kernel="?",
                    line=line,
                    imported=False,
                    reason=f"launches through {call}(), which is not read yet ({READ_FORMS})",
                )
            )
    return results, analyses


_UNQUALIFIED = re.compile(r"(?<![\w:.])([A-Za-z_]\w*)")
"""A name in an entry's template arguments that no scope qualifies."""


def _entry_names(analyses: Iterable[Analysis], declared: dict[str, set[str]]) -> str:
    """``using ns::Name;`` lines at the file's end for each unqualified name of an entry's
    template arguments that the global scope does not declare and the kernel's namespace (or
    the nearest enclosing one) does. An entry is looked up at global scope, while the launch
    wrote its arguments inside a namespace (SGLang's ``act_and_mul_kernel<T,
    ActivationKind::kSiLU>``, the enum declared in ``sglang``). One name at a time: a whole
    ``using namespace`` made a global name of the same spelling ambiguous. ``declared`` is the
    device source's names by namespace (:attr:`~astra_graph.framework.device.DeviceSource.
    declared`)."""
    lines: list[str] = []
    for analysis in analyses:
        qualified = analysis.kernel.qualified.lstrip(":")
        arguments = split_entry(analysis.entry)[1] or []
        if "::" not in qualified or not arguments:
            continue
        spaces = qualified.split("::")[:-1]
        for name in dict.fromkeys(_UNQUALIFIED.findall(" ".join(arguments))):
            if name in declared.get("", set()):
                continue
            space = next(
                (
                    "::".join(spaces[:depth])
                    for depth in range(len(spaces), 0, -1)
                    if name in declared.get("::".join(spaces[:depth]), set())
                ),
                None,
            )
            if space is not None and f"using {space}::{name};" not in lines:
                lines.append(f"using {space}::{name};")
    if not lines:
        return ""
    return "\n// astra-import: names the launches' template arguments take from a namespace\n" + (
        "\n".join(lines) + "\n"
    )


def define_values(defines: tuple[str, ...]) -> dict[str, int]:
    """The build's ``-D`` flags (``NAME`` or ``NAME=VALUE``) whose value is a whole number,
    ``NAME`` alone being 1 as for the compiler; a define of any other value is left out."""
    values: dict[str, int] = {}
    for define in defines:
        name, equals, value = define.partition("=")
        try:
            values[name.strip()] = int(value.strip(), 0) if equals else 1
        except ValueError:
            continue
    return values


def defined_names(defines: tuple[str, ...]) -> set[str]:
    """The build's ``-D`` flags whose value is no whole number (``FOO=``, ``FOO=bar``): the
    compiler defines them, so ``#ifdef FOO`` and ``defined(FOO)`` hold though
    :func:`define_values` has no number for them."""
    values = define_values(defines)
    names = {define.partition("=")[0].strip() for define in defines}
    return {name for name in names if name and name not in values}


def import_file(
    path: Path,
    folders: list[Path],
    out: Path,
    *,
    arch: str = "sm_90",
    only: Set[str] | None = None,
    defines: tuple[str, ...] = (),
    root: Path | None = None,
    std: str | None = None,
) -> ImportReport:
    """Import ``path``'s launchers (or only those named in ``only``) into ``out/<op>/``, the
    device code compiled with the framework build's ``defines`` (``NAME[=VALUE]``). ``root``
    is the framework checkout that ``framework.toml``'s ``[source]`` paths are relative to
    (default: :func:`~astra_graph.framework.naming.default_root`). ``std`` is the framework
    build's C++ standard (SGLang's JIT kernels: ``c++20``), written into each operation's
    header; NVRTC's default where None."""
    checked_std(std)
    flat = flatten(path, folders)
    # the build's defines with a number are facts of the build, as CUDA_VERSION is: a host
    # size or an #if that picks a macro's definition reads them
    facts = {**device_constants(arch, nvrtc.version()), **define_values(defines)}
    parsed = parse_source(flat.text, facts, defined_names(defines))
    device = device_source(flat.text, defines)
    results, analyses = _analysed_sites(parsed, facts, only, flat, Callers(folders, flat.files))
    device_text = device.text + _entry_names((a for _, a, _ in analyses), device.declared)
    compiler = _DeviceCompiler(device_text, arch, std)
    analyses = [
        (r, a, f)
        for r, a, f in analyses
        if _width_admitted_dtypes(r, a)
        and _admitted_sizes(r, a, compiler)
        and _compiling_dtypes(r, a, compiler)
    ]
    entries = sorted({e for _, a, _ in analyses for e in _instantiations(a)})
    major, minor = nvrtc.version()
    error = compiler.first_error(entries)
    checkout = root if root is not None else default_root(path)
    for result, analysis, facing in analyses:
        if error is not None:
            # one program for every site failed: this site's instantiations alone say whose
            # the error is
            alone = compiler.first_error(_instantiations(analysis))
            if alone is not None:
                result.reason = f"device code does not compile with NVRTC: {alone}"
                continue
        elsewhere = for_another_gpu(analysis, arch) or dead_code(analysis)
        if elsewhere:
            result.reason = elsewhere
            result.applicable = False
            continue
        never = _never_taken(analysis)
        if never:
            result.reason = never
            continue
        try:
            written = write_operation(
                out / (result.op or ""), result.op or "", analysis, device_text, path.name, std
            )
        except ValueError as exc:
            result.reason = str(exc)
            continue
        result.imported = True
        result.folder = str(written.folder)
        result.notes = written.notes
        unnamed = write_framework(written.folder, analysis, facing, checkout, folders)
        if unnamed:
            result.notes.append(unnamed)
    return ImportReport(
        source=str(path),
        files_read=[str(f) for f in flat.files],
        kept_includes=flat.kept,
        compiler=f"NVRTC {major}.{minor} ({COMPILER_REASON})",
        compile_seconds=round(compiler.seconds, 3),
        compiled=bool(entries) and error is None,
        compile_error=error or "",
        launchers=results,
    )
