"""Implementation headers: what a ``.cu`` file declares in its ``// astra:`` comment lines.

The leading comment block of an implementation names the entry kernel (``ns::kernel<T, 256>``,
nested and functor template arguments allowed), the launch geometry (expressions over the
contract's dims, the tunables and ``elem_bytes``), tunables, shape requirements, compile-time
values that follow a dim (``specialize``) and, optionally, the kernel's own parameter order
(``params``). Everything below the header is the kernel as
written; nothing in it is parsed here (:mod:`astra_graph.kernel.signature` reads the signature).
Malformed headers raise :class:`ContractError` with one line naming the file, line and field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from astra_graph.kernel import expr
from astra_graph.kernel.contract import (
    ELEM_BYTES,
    Binding,
    Contract,
    ContractError,
    check_names,
    default_bindings,
    known_names,
    one_line,
    parse_bindings,
    read_text,
)
from astra_graph.kernel.dtypes import TYPE_PARAMETER, DType
from astra_graph.kernel.expr import split_top_level

SM_COUNT = "sm_count"
"""Name bound in launch geometry to the GPU's multiprocessor count (a framework's persistent
kernels launch ``sm_count * k`` blocks); the harness binds the device's own."""
DEFAULT_SM_COUNT = 132
"""``sm_count`` where no GPU is asked (checks without a GPU): an H100 SXM's 132 SMs, the GPU
the project's measurements are made on."""

DEFAULT_STD = "c++17"
"""The C++ standard a kernel is compiled at unless its header names another: the one vLLM's and
FlashInfer's builds use (SGLang's JIT kernels need ``c++20``: concepts)."""
STANDARDS = ("c++17", "c++20")
"""The standards a header's ``std`` may name."""


def checked_std(value: str | None) -> str | None:
    """``value`` when it is one of :data:`STANDARDS` (or None); raises ValueError naming it."""
    if value is not None and value not in STANDARDS:
        raise ValueError(f"std: expected one of {list(STANDARDS)}, got {value!r}")
    return value


MAX_TUNABLE_COMBINATIONS = 4096
"""A header may declare at most this many tunable settings (their product), so that listing
them is always cheap; a sweep times far fewer (``tuning.DEFAULT_MAX_CONFIGS``)."""
HEADER_KEYS = (
    "operation",
    "entry",
    "grid",
    "block",
    "smem",
    "tunable",
    "specialize",
    "requires",
    "params",
    "std",
    "description",
)
_HEADER_LINE = re.compile(r"^\s*//\s*astra:\s*(?P<key>\w+)\s*(?P<rest>.*)$")
_TUNABLE = re.compile(r"^(?P<name>[A-Z_][A-Z0-9_]*)\s*=\s*(?P<values>.+)$")
_SPECIALIZE = re.compile(r"^(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<value>.+)$")
_QUALIFIED_NAME = re.compile(r"^(::)?[A-Za-z_]\w*(::[A-Za-z_]\w*)*$")
_TEMPLATE_ARGUMENT = re.compile(r"^-?[\w:<>,&*()\s]+$")
"""Characters a template argument may use: types, functors, function addresses, literals."""
_TOKEN = re.compile(r"(?:::)?[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*")


def split_entry(entry: str) -> tuple[str, list[str] | None]:
    """(qualified name, template arguments or None) of ``ns::kernel<T, act<T>, true>``.

    Raises ValueError for anything else: unbalanced brackets, an empty argument, characters
    outside :data:`_TEMPLATE_ARGUMENT`.
    """
    text = entry.strip()
    name, bracket, rest = text.partition("<")
    name = name.strip()
    if not _QUALIFIED_NAME.match(name):
        raise ValueError(f"expected a kernel name or name<args>, got {entry!r}")
    if not bracket:
        return name, None
    if not rest.endswith(">"):
        raise ValueError(f"template arguments must end with '>', got {entry!r}")
    inner = rest[:-1]
    depth = 0
    for char in inner:
        depth += (char == "<") - (char == ">")
        if depth < 0:
            break
    if depth != 0:
        raise ValueError(f"unbalanced '<' '>' in {entry!r}")
    args = split_top_level(inner)
    for arg in args:
        if not arg or not _TEMPLATE_ARGUMENT.match(arg):
            raise ValueError(f"bad template argument {arg!r} in {entry!r}")
    if not args or inner.rstrip().endswith(","):
        raise ValueError(f"empty template argument in {entry!r}")
    return name, args


class ImplementationHeader(BaseModel):
    """What an implementation file declares in its ``// astra: key = value`` header lines.

    ``entry`` is a kernel name, optionally a template instantiation whose arguments may be ``T``
    (the element type under test), tunable names or literals. ``grid``, ``block`` and ``smem``
    are expressions over the contract's dims, the tunables and ``elem_bytes``. Each tunable is
    also defined as a macro (``-D NAME=value``) when compiling.

    ``specializations`` (``// astra: specialize KDIM = hidden``) are compile-time values that
    follow the shape: at each shape NAME is its expression over the dims, in the entry (``k<T,
    KDIM>``), as a macro and in the geometry and requirements, and the kernel is compiled once
    per distinct value (SGLang's ``rmsnorm_cta<kDim, ...>``, built for the model's hidden size;
    FlashInfer's head-dim dispatch). The tuner never sweeps them: they are the shape's.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    entry: str
    grid: str
    block: str
    smem: str = "0"
    tunables: dict[str, list[int]] = {}
    specializations: dict[str, str] = {}
    """NAME -> its value at a shape, an expression over the contract's dims."""
    requires: list[str] = []
    params: list[str] | None = None
    """The kernel's parameter order (:func:`astra_graph.kernel.contract.parse_bindings`), if
    given."""
    operation: str | None = None
    """The operation this file implements, for a file with no ``contract.toml`` beside it."""
    std: str | None = None
    """The C++ standard the file is written for (``c++20``), where not NVRTC's default
    ``c++17``: an imported framework file keeps its build's (SGLang's JIT kernels)."""
    description: str = ""

    @field_validator("std")
    @classmethod
    def _std(cls, value: str | None) -> str | None:
        return checked_std(value)

    @field_validator("entry")
    @classmethod
    def _entry(cls, value: str) -> str:
        split_entry(value)
        return value.strip()

    @field_validator("grid", "block", "smem")
    @classmethod
    def _geometry(cls, value: str, info: ValidationInfo) -> str:
        known = known_names(info)
        try:
            check_names(value, None if known is None else known | {ELEM_BYTES, SM_COUNT}, "name")
        except expr.ExprError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("tunables")
    @classmethod
    def _tunables(cls, value: dict[str, list[int]]) -> dict[str, list[int]]:
        combinations = 1
        for values in value.values():
            combinations *= len(values)
        if combinations > MAX_TUNABLE_COMBINATIONS:
            raise ValueError(
                f"{combinations} combinations of tunable values, at most {MAX_TUNABLE_COMBINATIONS}"
            )
        return value

    @field_validator("specializations")
    @classmethod
    def _specializations(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        tunables = set(info.data.get("tunables", {}))
        # over the contract's dims alone: a tunable or another specialization would make a
        # compile-time value depend on a compile-time choice (None: unchecked)
        dims: set[str] | None = (info.context or {}).get("contract_dims")
        for name, expression in value.items():
            if name in tunables:
                raise ValueError(f"specialize {name}: also a tunable")
            if dims is not None and name in dims:
                raise ValueError(f"specialize {name}: a dim's name; give it a name of its own")
            try:
                check_names(expression, dims, "dim")
            except ValueError as exc:  # ExprError among them
                raise ValueError(f"specialize {name}: {exc}") from None
        return value

    @field_validator("requires")
    @classmethod
    def _requires(cls, value: list[str], info: ValidationInfo) -> list[str]:
        known = known_names(info)
        for item in value:
            try:
                check_names(item, None if known is None else known | {ELEM_BYTES, SM_COUNT}, "name")
            except expr.ExprError as exc:
                raise ValueError(str(exc)) from None
        return value

    @property
    def kernel_name(self) -> str:
        """The entry's unqualified function name (``rmsnorm`` for ``ns::rmsnorm<T, 256>``)."""
        return split_entry(self.entry)[0].rsplit("::", 1)[-1]

    def entry_for(self, dtype: DType, tunables: Mapping[str, int]) -> str:
        """The name expression to instantiate: ``T`` and tunables replaced by their values.

        Replacement is by whole C++ token, so nested arguments (``act<T>``) are instantiated too.
        """
        name, targs = split_entry(self.entry)
        if targs is None:
            return self.entry
        values = {TYPE_PARAMETER: dtype.ctype, **{k: str(v) for k, v in tunables.items()}}

        def substitute(match: re.Match[str]) -> str:
            token = match[0]
            return token if "::" in token else values.get(token, token)

        args = [_TOKEN.sub(substitute, arg) for arg in targs]
        return f"{name}<{', '.join(args)}>"

    def configurations(self) -> Iterator[dict[str, int]]:
        """Every combination of tunable values (one empty one when there are none)."""
        configs: list[dict[str, int]] = [{}]
        for name, values in self.tunables.items():
            configs = [{**c, name: v} for c in configs for v in values]
        yield from configs

    def default_tunables(self) -> dict[str, int]:
        return {name: values[0] for name, values in self.tunables.items()}

    def specialized(self, dims: Mapping[str, int]) -> dict[str, int]:
        """Each specialization's value at the shape ``dims`` (empty when there is none)."""
        return {name: expr.evaluate_int(v, dims) for name, v in self.specializations.items()}

    def specialized_over(self, shapes: Iterable[Mapping[str, int]]) -> list[dict[str, int]]:
        """The distinct specialization values ``shapes`` take, in their order: the
        instantiations a build for those shapes compiles ([{}] when there is none)."""
        found: dict[tuple[tuple[str, int], ...], dict[str, int]] = {}
        for dims in shapes:
            values = self.specialized(dims)
            found.setdefault(tuple(sorted(values.items())), values)
        return list(found.values()) or [{}]

    def env(
        self,
        dims: Mapping[str, int],
        dtype: DType,
        tunables: Mapping[str, int],
        sm_count: int = DEFAULT_SM_COUNT,
    ) -> dict[str, int]:
        return {
            **dims,
            **self.default_tunables(),
            **tunables,
            **self.specialized(dims),
            ELEM_BYTES: dtype.itemsize,
            SM_COUNT: sm_count,
        }

    def unmet_requirement(
        self, dims: Mapping[str, int], dtype: DType, tunables: Mapping[str, int]
    ) -> str | None:
        for name, expression in self.specializations.items():
            try:  # a shape where a specialization has no value is one it cannot be built for
                expr.evaluate_int(expression, dims)
            except (expr.ExprError, ArithmeticError) as exc:
                return f"specialize {name} = {expression} ({exc})"
        env = self.env(dims, dtype, tunables)
        for item in self.requires:
            if not expr.evaluate(item, env):
                return item
        return None

    def launch(
        self,
        dims: Mapping[str, int],
        dtype: DType,
        tunables: Mapping[str, int],
        sm_count: int = DEFAULT_SM_COUNT,
    ) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
        """(grid, block, dynamic shared memory bytes) for one shape on a GPU of ``sm_count``."""
        env = self.env(dims, dtype, tunables, sm_count)
        return (
            expr.evaluate_dims3(self.grid, env),
            expr.evaluate_dims3(self.block, env),
            expr.evaluate_int(self.smem, env),
        )


class Implementation(BaseModel):
    """One ``.cu`` file: its source, validated header and parameter bindings."""

    model_config = ConfigDict(frozen=True)

    path: Path
    source: str
    header: ImplementationHeader
    bindings: list[Binding]
    """What each kernel parameter receives, in the kernel's order."""

    @property
    def name(self) -> str:
        return self.path.stem


def parse_header_lines(source: str, where: str) -> dict[str, Any]:
    """Collect the ``// astra: key ...`` lines of the file's leading comment block."""
    fields: dict[str, Any] = {"tunables": {}, "specializations": {}, "requires": []}
    for lineno, line in enumerate(source.splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith(("//", "/*", "*", "#pragma once")):
            break
        match = _HEADER_LINE.match(line)
        if not match:
            continue
        key, rest = match["key"], match["rest"].strip()
        if key not in HEADER_KEYS:
            raise ContractError(
                f"{where}:{lineno}: header: unknown key {key!r}, "
                f"expected one of {list(HEADER_KEYS)}"
            )
        if key == "tunable":
            tunable = _TUNABLE.match(rest)
            values = []
            if tunable:
                try:
                    values = [int(v) for v in tunable["values"].split(",") if v.strip()]
                except ValueError:
                    values = []
            if not tunable or not values:
                raise ContractError(
                    f"{where}:{lineno}: header.tunable: expected 'NAME = v1, v2, ...' "
                    f"with whole-number values, got {rest!r}"
                )
            fields["tunables"][tunable["name"]] = values
        elif key == "specialize":
            special = _SPECIALIZE.match(rest)
            if not special:
                raise ContractError(
                    f"{where}:{lineno}: header.specialize: expected 'NAME = expression over the "
                    f"dims', got {rest!r}"
                )
            if special["name"] in fields["specializations"]:
                raise ContractError(
                    f"{where}:{lineno}: header.specialize {special['name']}: given twice"
                )
            fields["specializations"][special["name"]] = special["value"].strip()
        elif not rest.startswith("="):
            raise ContractError(f"{where}:{lineno}: header.{key}: expected '{key} = ...'")
        elif key == "requires":
            fields["requires"].append(rest[1:].strip())
        elif key == "params":
            if "params" in fields:
                raise ContractError(f"{where}:{lineno}: header.params: given twice")
            fields["params"] = split_top_level(rest[1:])
        else:
            if key in fields:
                raise ContractError(f"{where}:{lineno}: header.{key}: given twice")
            fields[key] = rest[1:].strip()
    return fields


def load_implementation(
    path: Path, contract: Contract, source: str | None = None
) -> Implementation:
    """Parse and validate an implementation's header against its contract."""
    where = str(path)
    if source is None:
        if not path.is_file():
            raise ContractError(f"{where}: not found")
        source = read_text(path, "implementation")
    fields = parse_header_lines(source, where)
    known = set(contract.dims) | set(fields["tunables"]) | set(fields["specializations"])
    try:
        header = ImplementationHeader.model_validate(
            fields, context={"dims": known, "contract_dims": set(contract.dims)}
        )
    except ValidationError as exc:
        raise one_line(where, exc, field_prefix="header") from None
    params, field = (
        (header.params, "header.params") if header.params else (contract.params, "params")
    )
    try:
        bindings = (
            default_bindings(contract)
            if params is None
            else parse_bindings(params, contract, field)
        )
    except ValueError as exc:
        raise ContractError(f"{where}: {exc}") from None
    return Implementation(path=path, source=source, header=header, bindings=bindings)
