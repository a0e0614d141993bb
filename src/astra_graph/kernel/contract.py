"""The kernel contract: what an operation computes (``contract.toml``), validated.

An operation lives in a folder: ``contract.toml`` (dims, arguments, suites, tolerances, bytes
moved, the float64 reference) and any number of implementation files ``<name>.cu``, whose
headers :mod:`astra_graph.kernel.header` reads; :mod:`astra_graph.kernel.catalog` finds the
folders. Anything
malformed raises :class:`ContractError` whose message is one line naming the file, the field and
what was expected.

Kernel parameters: by default every tensor of ``args`` (a pointer each), then every entry of
``scalars`` (by value). ``params`` (here, or in an implementation's header, which wins) lists
them in the kernel's own order instead, and may add by-value integers computed from the dims
(strides, counts): ``input_stride = hidden`` or ``num_tokens: int64 = tokens``
(:func:`parse_bindings`). ``include_dirs`` names folders that ``#include`` searches besides the
contract's own.
"""

from __future__ import annotations

import importlib.util
import math
import re
import tomllib
from collections.abc import Callable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from astra_graph.kernel import expr
from astra_graph.kernel.dtypes import DTYPES, TYPE_PARAMETER, DType
from astra_graph.kernel.param_struct import POINTER, layout

CONTRACT_FILE = "contract.toml"
FRAMEWORK_FILE = "framework.toml"
"""How the framework the operation comes from names and calls it, beside the contract (written
by ``astra import``, read by ``astra export``: ``astra_graph.export.framework``)."""
SUITE_NAMES = ("tuning", "heldout", "edge")
HIDDEN_SUITES = ("heldout",)
"""Suites whose shapes no agent may see: a check's message on them names no shape (the
evaluator leaves them to the worker, whose rejections there name none)."""
ELEM_BYTES = "elem_bytes"
NonFinite = Literal["nan", "inf", "-inf"]
NON_FINITE: tuple[NonFinite, ...] = ("nan", "inf", "-inf")
"""Every non-finite value, by the names ``non_finite`` uses (``float(name)`` reads each)."""
"""Name bound in expressions to the byte size of the element type under test."""


class ContractError(ValueError):
    """Malformed contract or implementation; ``str()`` is one line: ``file: field: problem``."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DimSpec(Strict):
    min: int = Field(1, ge=0)
    max: int | None = Field(
        None,
        description="the largest value a caller (a serving engine) sends: the top of the "
        "domain every check covers (harness.domain); without it checks draw up to a multiple "
        "of the suites' largest value",
    )
    multiple_of: int = Field(1, ge=1)
    description: str = ""

    def check(self, name: str, value: int) -> str | None:
        """Why ``value`` is not allowed for this dim, or None."""
        if value < self.min:
            return f"{name}={value} is below its minimum {self.min}"
        if self.max is not None and value > self.max:
            return f"{name}={value} is above its maximum {self.max}"
        if value % self.multiple_of:
            return f"{name}={value} is not a multiple of {self.multiple_of}"
        return None


class InitSpec(Strict):
    """How random test inputs are drawn: ``normal`` (mean, scale) or ``uniform`` [low, high)."""

    dist: Literal["normal", "uniform"] = "normal"
    mean: float = 0.0
    scale: float = Field(1.0, gt=0)
    low: float = -1.0
    high: float = 1.0
    row_scale: tuple[float, float] | None = Field(
        None,
        description="checks multiply each row (first index) by a factor drawn log-uniformly "
        "in [low, high], the same factor for every argument of that row count",
    )
    below: str | None = Field(
        None,
        description="an expression over the dims: uniform draws stay below its value at each "
        "case's dims (row ids into a tensor of that many rows: a gather's index, positions into "
        "a cache), so they span every valid row at every shape",
    )
    distinct: bool = Field(
        False,
        description="uniform draws are whole numbers, no two of an argument's elements alike "
        "(the slots a kernel writes rows to, as a KV cache's slot mapping: two tokens with one "
        "slot race, so the framework never passes such a mapping); an int32 or int64 input; "
        "the domain must give the draw room (elements <= high - low + 1 at every shape, say so "
        "in requires)",
    )
    offsets_into: str | None = Field(
        None,
        description="an expression over the dims: the input (1-D, integer, [segments + 1]) "
        "holds CSR offsets into that many rows (an indptr): each draw is a non-decreasing "
        "sequence from 0 to exactly its value at the case's dims, some segments empty "
        "(harness.cases.offsets_values); no other init field applies",
    )

    @property
    def arranged(self) -> bool:
        """Whether the values' arrangement is what the kernel relies on (distinct slots, ordered
        offsets): no scenario copies, zeroes or shifts them as it does other inputs."""
        return self.distinct or self.offsets_into is not None

    def high_at(self, dims: Mapping[str, int]) -> float:
        """The uniform draw's upper end at ``dims``: ``high``, lowered to ``below - 1``."""
        if self.below is None:
            return self.high
        return float(min(self.high, expr.evaluate_int(self.below, dict(dims)) - 1))

    @field_validator("row_scale")
    @classmethod
    def _row_scale(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is not None and not 0 < value[0] <= value[1]:
            raise ValueError(f"row_scale must be [low, high] with 0 < low <= high, got {value}")
        return value


def _check_dtype_name(value: str, allow_type_parameter: bool) -> str:
    if value in DTYPES or (allow_type_parameter and value == TYPE_PARAMETER):
        return value
    allowed = sorted(DTYPES) + ([TYPE_PARAMETER] if allow_type_parameter else [])
    raise ValueError(f"unknown dtype {value!r}, expected one of {allowed}")


def known_names(info: ValidationInfo) -> set[str] | None:
    """The names an expression may use, from the validation context (None: unchecked)."""
    return None if info.context is None else info.context.get("dims")


def check_names(text: str | int, known: set[str] | None, what: str) -> None:
    """Parse an expression and refuse names outside ``known`` (when known is given)."""
    if isinstance(text, int) or known is None:
        if isinstance(text, str):
            expr.parse(text)
        return
    for name in sorted(expr.names(text)):
        if name not in known:
            raise ValueError(f"unknown {what} {name!r}")


class TensorArg(Strict):
    name: str = Field(pattern=r"^[A-Za-z_]\w*$")
    dtype: str
    shape: list[str | int] = Field(min_length=1)
    role: Literal["input", "output", "inout"]
    align: int = Field(16, ge=1, description="guaranteed byte alignment of the base pointer")
    init: InitSpec = InitSpec()
    non_finite: list[NonFinite] = Field(
        default_factory=lambda: list(NON_FINITE),
        description="the non-finite values in the op's domain for this input (the checks draw "
        "only these besides finite values): [] for an op whose outputs cannot otherwise tell a "
        "NaN input from an unwritten, NaN-poisoned output (a quantization to float8_e4m3fn), "
        '["-inf"] for a log-sum-exp whose empty side is -inf but that is never NaN or +inf',
    )
    description: str = ""

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, value: str) -> str:
        return _check_dtype_name(value, allow_type_parameter=True)

    @field_validator("shape")
    @classmethod
    def _shape(cls, value: list[str | int], info: ValidationInfo) -> list[str | int]:
        for item in value:
            try:
                check_names(item, known_names(info), "dim")
            except expr.ExprError as exc:
                raise ValueError(str(exc)) from None
        return value

    @property
    def written(self) -> bool:
        return self.role != "input"


class ScalarArg(Strict):
    """A by-value kernel parameter: from the dims (``value``) or a parameter (``default``).

    A ``bool`` parameter (a framework's flag) takes a ``default`` of 0 or 1.
    """

    name: str = Field(pattern=r"^[A-Za-z_]\w*$")
    dtype: Literal["int32", "int64", "float32", "float64", "bool"]
    value: str | int | None = None
    default: float | None = None
    range: tuple[float, float] | None = Field(
        None,
        description="for a parameter (``default``): checks draw it log-uniformly in "
        "[low, high] unless the caller sets it",
    )
    description: str = ""

    @field_validator("value")
    @classmethod
    def _value(cls, value: str | int | None, info: ValidationInfo) -> str | int | None:
        if value is not None:
            try:
                check_names(value, known_names(info), "dim")
            except expr.ExprError as exc:
                raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _one_source(self) -> ScalarArg:
        if (self.value is None) == (self.default is None):
            raise ValueError(f"scalar {self.name!r} needs exactly one of 'value' or 'default'")
        if self.dtype == "bool" and (self.value is not None or self.default not in (0, 1)):
            raise ValueError(f"scalar {self.name!r}: a bool needs 'default' = 0 or 1")
        if self.range is not None:
            low, high = self.range
            if self.default is None or not 0 < low <= self.default <= high:
                raise ValueError(
                    f"scalar {self.name!r}: range needs a default inside it and 0 < low <= high"
                )
        return self


class Tolerance(Strict):
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)


class Special(Strict):
    """A named input scenario: a fraction of the elements of some inputs set to given values."""

    name: str
    description: str = ""
    values: dict[str, list[float]] = {}
    same_as: dict[str, str] = Field(
        {},
        description="input -> another input of its shape and type whose values it takes at the "
        "scenario's positions (ties: s_b = s_a)",
    )
    fraction: float = Field(0.05, gt=0, le=1)
    paired: bool = Field(False, description="set the same positions in every named input")

    @model_validator(mode="after")
    def _sets_something(self) -> Special:
        if not self.values and not self.same_as:
            raise ValueError("values or same_as: a scenario must set some input")
        return self


class Suites(Strict):
    tuning: list[dict[str, int]] = Field(min_length=1)
    heldout: list[dict[str, int]] = Field(min_length=1)
    edge: list[dict[str, int]] = []


class Contract(Strict):
    name: str = Field(pattern=r"^[a-z_][a-z0-9_]*$")
    summary: str
    dtypes: list[str] = Field(min_length=1)
    reference: str = Field(pattern=r"^[\w./-]+\.py:[A-Za-z_]\w*$")
    bytes_moved: str | int
    deterministic: bool = True
    error_ratio: float = Field(
        4.0, gt=0, description="candidate error may be at most this multiple of the baseline's"
    )
    dims: dict[str, DimSpec] = Field(min_length=1)
    args: list[TensorArg] = Field(min_length=1)
    scalars: list[ScalarArg] = []
    tolerance: dict[str, Tolerance]
    suites: Suites
    specials: list[Special] = []
    notes: str = ""
    params: list[str] | None = None
    """The kernel's parameters in its own order (:func:`parse_bindings`); default args, scalars."""
    include_dirs: list[str] = []
    """Folders searched by ``#include``, relative to the contract's folder (or absolute)."""
    rows_independent: bool = Field(
        False,
        description="the reference computes each row (first index) of the row-indexed "
        "arguments from that row alone (and arguments without the row dim), so a check may "
        "evaluate it in row chunks: domain shapes too large for the whole protocol are then "
        "checked with minimum-size memory",
    )
    partial_kernels: bool = Field(
        False,
        description="accept candidates whose requires is narrower than the dims' domain; "
        "their requires is then recorded as the kernel's domain (the baseline serves the rest)",
    )
    oracle: str | None = Field(None, pattern=r"^[\w.-]+\.cu$")
    """An implementation file beside the contract whose outputs are the reference (an imported
    framework kernel: :mod:`astra_graph.harness.oracle`); it runs on the GPU only."""

    @field_validator("dtypes")
    @classmethod
    def _dtypes(cls, value: list[str]) -> list[str]:
        for name in value:
            _check_dtype_name(name, allow_type_parameter=False)
        return value

    @field_validator("bytes_moved")
    @classmethod
    def _bytes(cls, value: str | int, info: ValidationInfo) -> str | int:
        dims = known_names(info)
        try:
            check_names(value, None if dims is None else dims | {ELEM_BYTES}, "name")
        except expr.ExprError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Contract:
        names = [a.name for a in self.args] + [s.name for s in self.scalars]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"args/scalars: duplicate name {dupes[0]!r}")
        if not any(a.written for a in self.args):
            raise ValueError("args: no argument has role 'output' or 'inout'")
        for arg in self.args:
            dtypes = self.dtypes if arg.dtype == TYPE_PARAMETER else [arg.dtype]
            if arg.written:
                for dtype in dtypes:
                    if dtype not in self.tolerance:
                        raise ValueError(
                            f"tolerance: no entry for {dtype!r}, which output {arg.name!r} uses"
                        )
        for arg in self.args:
            if arg.init.distinct:
                self._check_distinct(arg)
            if arg.init.below is not None:
                try:
                    check_names(arg.init.below, set(self.dims), "dim")
                except (expr.ExprError, ValueError) as exc:
                    raise ValueError(f"args.{arg.name}.init.below: {exc}") from None
            if arg.init.offsets_into is not None:
                self._check_offsets(arg, arg.init.offsets_into)
        inputs = {a.name: a for a in self.args if a.role != "output"}
        for i, special in enumerate(self.specials):
            named = [("values", n) for n in special.values]
            named += [("same_as", n) for pair in special.same_as.items() for n in pair]
            for field, arg_name in named:
                if arg_name not in inputs:
                    raise ValueError(
                        f"specials[{i}].{field}: {arg_name!r} is not an input argument"
                    )
            for field, arg_name in named:
                if inputs[arg_name].init.arranged:
                    raise ValueError(
                        f"specials[{i}].{field}: {arg_name!r} holds offsets or distinct slots "
                        "(init.offsets_into, init.distinct), which a scenario's values would "
                        "disorder or repeat"
                    )
            for arg_name, values in special.values.items():
                allowed = inputs[arg_name].non_finite
                outside = [v for v in values if not math.isfinite(v) and str(v) not in allowed]
                if outside:
                    raise ValueError(
                        f"specials[{i}].values.{arg_name}: {outside[0]} is outside "
                        f"{arg_name!r}'s domain; expected finite values or one of {allowed}"
                    )
            for target, source in special.same_as.items():
                a, b = inputs[target], inputs[source]
                if (a.shape, a.dtype) != (b.shape, b.dtype):
                    raise ValueError(
                        f"specials[{i}].same_as: {target!r} and {source!r} differ in shape or "
                        "dtype; expected two inputs of one shape and element type"
                    )
        if self.params is not None:
            parse_bindings(self.params, self, "params")
        for suite in SUITE_NAMES:
            for i, shape in enumerate(getattr(self.suites, suite)):
                problem = self.shape_problem(shape)
                if problem:
                    raise ValueError(f"suites.{suite}[{i}]: {problem}")
        return self

    @staticmethod
    def _check_distinct(arg: TensorArg) -> None:
        """Refuse an ``init.distinct`` the draw cannot keep: no uniform draw, an element type
        that is no integer wide enough to hold distinct row ids (a float, bool or one-byte
        type), an argument the kernel writes, or row scaling that would change the values."""
        where = f"args.{arg.name}.init.distinct"
        if arg.init.dist != "uniform":
            raise ValueError(
                f'{where}: expected dist = "uniform" (distinct whole numbers in [low, high]), '
                f"got {arg.init.dist!r}"
            )
        if arg.dtype not in ("int32", "int64"):
            raise ValueError(f"{where}: needs dtype int32 or int64, got {arg.dtype!r}")
        if arg.role != "input":
            raise ValueError(f"{where}: needs role 'input', got {arg.role!r}")
        if arg.init.row_scale is not None:
            raise ValueError(f"{where}: row_scale would change the drawn values; drop it")

    def _check_offsets(self, arg: TensorArg, into: str) -> None:
        """Refuse an ``init.offsets_into`` the draw cannot honour: on an output, a float or
        type-parameter element, more than one axis, beside another init field, or in a
        contract whose reference may run in row chunks (offsets into rows span chunks)."""
        where = f"args.{arg.name}.init.offsets_into"
        try:
            check_names(into, set(self.dims), "dim")
        except (expr.ExprError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
        if arg.role != "input":
            raise ValueError(f"{where}: needs role 'input', got {arg.role!r}")
        if arg.dtype not in DTYPES or DTYPES[arg.dtype].floating or arg.dtype == "bool":
            raise ValueError(f"{where}: needs an integer dtype, got {arg.dtype!r}")
        if len(arg.shape) != 1:
            raise ValueError(f"{where}: needs a 1-D input ([segments + 1]), got {arg.shape}")
        # by value, not by fields set: a contract sent to a worker comes back with every field
        # set to its value (H100, 8b18284: "drop init.below" for a below of None)
        default = InitSpec()
        others = sorted(
            name
            for name in InitSpec.model_fields
            if name != "offsets_into" and getattr(arg.init, name) != getattr(default, name)
        )
        if others:
            raise ValueError(f"{where}: draws its own values; drop init.{others[0]}")
        if self.rows_independent:
            raise ValueError(
                f"{where}: offsets reach rows across a row chunk; rows_independent must be false"
            )

    # --- queries -------------------------------------------------------------------------------

    def shape_problem(self, dims: Mapping[str, int]) -> str | None:
        """Why a dims assignment is not allowed by this contract, or None."""
        missing = [d for d in self.dims if d not in dims]
        if missing:
            return f"missing dim {missing[0]!r}"
        extra = [d for d in dims if d not in self.dims]
        if extra:
            return f"unknown dim {extra[0]!r}"
        for name, spec in self.dims.items():
            value = dims[name]
            if not isinstance(value, int) or isinstance(value, bool):
                return f"{name} must be a whole number, got {value!r}"
            problem = spec.check(name, value)
            if problem:
                return problem
        for arg in self.args:
            if arg.init.offsets_into is not None:
                problem = _offsets_problem(arg, arg.init.offsets_into, dims)
                if problem:
                    return problem
        return None

    def dtype_of(self, arg: TensorArg, dtype: str) -> DType:
        return DTYPES[dtype if arg.dtype == TYPE_PARAMETER else arg.dtype]

    def shape_of(self, arg: TensorArg, dims: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(expr.evaluate_int(s, dims) for s in arg.shape)

    def bytes_for(self, dims: Mapping[str, int], dtype: str) -> int:
        """Bytes one call must move through device memory (the roofline's numerator)."""
        return expr.evaluate_int(self.bytes_moved, {**dims, ELEM_BYTES: DTYPES[dtype].itemsize})

    def scalar_values(
        self, dims: Mapping[str, int], params: Mapping[str, float] | None = None
    ) -> dict[str, float | int]:
        params = params or {}
        unknown = set(params) - {s.name for s in self.scalars if s.default is not None}
        if unknown:
            raise ContractError(f"{self.name}: unknown parameter {sorted(unknown)[0]!r}")
        out: dict[str, float | int] = {}
        for s in self.scalars:
            if s.value is not None:
                out[s.name] = expr.evaluate_int(s.value, dims)
            else:
                default = s.default
                assert default is not None  # validated: a scalar has a value or a default
                out[s.name] = params.get(s.name, default)
        return out

    def suite(self, name: str) -> list[dict[str, int]]:
        return list(getattr(self.suites, name))

    def label(self, dims: Mapping[str, int]) -> str:
        """A compact shape label such as ``16x4096`` in the order of the contract's dims."""
        return "x".join(str(dims[d]) for d in self.dims)


def _offsets_problem(arg: TensorArg, into: str, dims: Mapping[str, int]) -> str | None:
    """Why no offsets array can be drawn for ``arg`` at ``dims`` (``init.offsets_into``), or
    None: its end must be a count its integer type holds, and one element (no segment) can
    only hold 0, where it both starts and ends."""
    end = expr.evaluate_int(into, dict(dims))
    if end < 0:
        return f"{arg.name}: offsets_into {into} = {end} is negative"
    if end > np.iinfo(DTYPES[arg.dtype].storage).max:
        return f"{arg.name}: offsets_into {into} = {end} does not fit {arg.dtype}"
    (length,) = (expr.evaluate_int(axis, dict(dims)) for axis in arg.shape)
    if length < 1 or (length == 1 and end != 0):
        return f"{arg.name}: {length} offsets cannot run from 0 to {into} = {end}"
    return None


class OperationSpec(BaseModel):
    """A loaded contract plus where it came from; the reference is imported lazily."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    contract: Contract
    folder: Path

    @property
    def name(self) -> str:
        return self.contract.name

    @cached_property
    def reference(self) -> Callable[..., dict[str, Any]]:
        """``reference(xp, inputs, params) -> outputs``, all float64, for numpy or cupy."""
        file_name, func_name = self.contract.reference.split(":")
        path = self.folder / file_name
        where = f"{self.folder / CONTRACT_FILE}: reference"
        if not path.is_file():
            raise ContractError(f"{where}: file {file_name!r} not found beside the contract")
        spec = importlib.util.spec_from_file_location(f"astra_reference_{self.name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # any error in user code: one line, never a traceback
            raise ContractError(
                f"{where}: {file_name} cannot be imported: {type(exc).__name__}: {exc}"
            ) from None
        func = getattr(module, func_name, None)
        if not callable(func):
            raise ContractError(f"{where}: {file_name} defines no function {func_name!r}")
        return func

    def implementations(self) -> list[Path]:
        return sorted(self.folder.glob("*.cu"))

    @property
    def include_paths(self) -> list[Path]:
        """Where ``#include "x.cuh"`` is searched: the contract's folder, then ``include_dirs``."""
        return [self.folder, *((self.folder / d).resolve() for d in self.contract.include_dirs)]


# --- the kernel's parameter list --------------------------------------------------------------

BINDING_INT_TYPES = ("int32", "int64")
NULL_POINTER = "nullptr"
"""A ``params`` value that passes a null pointer."""
_BINDING = re.compile(
    r"^(?P<name>[A-Za-z_]\w*)\s*(?::\s*(?P<dtype>\w+)\s*)?(?:=\s*(?P<value>.+))?$"
)
_OFFSET_BINDING = re.compile(
    r"^(?P<name>[A-Za-z_]\w*)\s*(?P<sign>[+-])\s*bytes\s*\((?P<value>.+)\)$", re.S
)
"""``k - bytes(heads * head_stride * elem_bytes)``: a tensor's address moved by whole bytes."""
_STRUCT_BINDING = re.compile(r"^(?P<type>[A-Za-z_][\w:]*)\s*\{(?P<fields>.*)\}$", re.S)


class Binding(Strict):
    """What one kernel parameter receives, in the kernel's order.

    ``tensor``: the device pointer of the contract argument ``name``, moved by ``value`` bytes
    where given (a signed whole-number expression over the dims: SGLang's rotary kernel takes
    ``pointer::offset(k.data_ptr(), -k_offset)`` and adds the offset back per head, so the
    kernel reaches only the tensor; the address itself lies before it); ``scalar``: the contract
    scalar ``name`` by value; ``expr``: a whole number computed from the dims (``value``), of
    width ``dtype`` (a stride, a row count); ``null``: a null pointer (``name = nullptr``, a
    framework's optional tensor left out); ``struct``: one by-value aggregate whose C++ type is
    ``name`` and whose ``fields`` are bindings of the other kinds, in declaration order, packed
    as :mod:`astra_graph.kernel.param_struct` lays them out.
    """

    name: str
    kind: Literal["tensor", "scalar", "expr", "null", "struct"]
    dtype: str | None = None
    value: str | None = None
    fields: list[Binding] | None = None

    def byte_offset(self, dims: Mapping[str, int], elem_bytes: int) -> int:
        """How many bytes a tensor binding's address is moved at these dims (0 for none)."""
        if self.kind != "tensor" or self.value is None:
            return 0
        return expr.evaluate_int(self.value, {**dims, ELEM_BYTES: elem_bytes})

    def field_kind(self) -> str:
        """The :data:`~astra_graph.kernel.param_struct.FIELD_BYTES` kind of a struct field."""
        if self.kind in ("tensor", "null"):
            return POINTER
        if self.kind == "struct" or self.dtype is None:
            raise ValueError(f"{self.name!r} cannot be a struct field (a nested struct)")
        return self.dtype


def default_bindings(contract: Contract) -> list[Binding]:
    """The parameter order without ``params``: every tensor, then every scalar."""
    return [Binding(name=a.name, kind="tensor") for a in contract.args] + [
        Binding(name=s.name, kind="scalar", dtype=s.dtype) for s in contract.scalars
    ]


def flat_bindings(bindings: list[Binding]) -> list[Binding]:
    """Every binding with each struct's fields in its place (what names the tensors)."""
    return [f for b in bindings for f in (b.fields or [] if b.kind == "struct" else [b])]


def parse_bindings(items: list[str], contract: Contract, where: str) -> list[Binding]:
    """Bindings for a ``params`` list; raises ValueError naming the item (``where[i]: ...``).

    Each item is a contract tensor or scalar by name, a tensor's address moved by whole
    bytes (``k - bytes(expression)``, ``k + bytes(expression)``),
    ``name[: int32|int64] = expression`` over the dims (int32 unless said), ``name = nullptr``
    (a null pointer), or
    ``Type{item, item, ...}``: one by-value struct of C++ type ``Type`` whose fields, in
    declaration order, are items of the other forms. Every tensor must appear exactly once;
    contract scalars the kernel does not take may be left out.
    """
    out: list[Binding] = []
    for i, raw in enumerate(items):
        text = raw.strip()
        struct = _STRUCT_BINDING.match(text)
        if struct is None:
            out.append(_binding(text, contract, f"{where}[{i}]"))
            continue
        fields = [
            _binding(f, contract, f"{where}[{i}].{struct['type']}[{j}]")
            for j, f in enumerate(expr.split_top_level(struct["fields"], angles=False))
        ]
        try:
            layout([f.field_kind() for f in fields])
        except ValueError as exc:
            raise ValueError(f"{where}[{i}]: {exc}") from None
        out.append(Binding(name=struct["type"], kind="struct", fields=fields))
    seen: set[str] = set()
    for binding in flat_bindings(out):
        if binding.name in seen:
            raise ValueError(f"{where}: {binding.name!r} is listed twice")
        seen.add(binding.name)
    missing = sorted({a.name for a in contract.args} - seen)
    if missing:
        raise ValueError(f"{where}: tensor {missing[0]!r} is not passed to the kernel")
    return out


def _binding(text: str, contract: Contract, where: str) -> Binding:
    """One item of a ``params`` list that is not a struct (:func:`parse_bindings`)."""
    tensors = {a.name for a in contract.args}
    scalars = {s.name: s for s in contract.scalars}
    moved = _OFFSET_BINDING.match(text)
    if moved is not None:
        if moved["name"] not in tensors:
            raise ValueError(f"{where}: {moved['name']!r} is no tensor of the contract")
        try:
            check_names(moved["value"].strip(), set(contract.dims) | {ELEM_BYTES}, "dim")
        except (expr.ExprError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
        offset = f"{'-' if moved['sign'] == '-' else ''}({moved['value'].strip()})"
        return Binding(name=moved["name"], kind="tensor", value=offset)
    match = _BINDING.match(text)
    if not match:
        raise ValueError(
            f"{where}: expected 'name', 'name[: int32|int64] = expr' or 'Type{{...}}', got {text!r}"
        )
    name, dtype, value = match["name"], match["dtype"], match["value"]
    if value is None:
        if dtype is not None:
            raise ValueError(f"{where}: {name!r} has a type but no '= expression'")
        if name in tensors:
            return Binding(name=name, kind="tensor")
        if name in scalars:
            return Binding(name=name, kind="scalar", dtype=scalars[name].dtype)
        raise ValueError(
            f"{where}: {name!r} is no tensor or scalar of the contract; "
            f"write '{name} = <expression over {sorted(contract.dims)}>'"
        )
    if name in tensors or name in scalars:
        raise ValueError(f"{where}: {name!r} is a contract argument; give it without '='")
    if value.strip() == NULL_POINTER:
        if dtype is not None:
            raise ValueError(f"{where}: {name!r} = {NULL_POINTER} takes no type")
        return Binding(name=name, kind="null")
    if dtype is not None and dtype not in BINDING_INT_TYPES:
        raise ValueError(f"{where}: type {dtype!r}, expected one of {list(BINDING_INT_TYPES)}")
    try:
        # the element's bytes as the launch geometry reads them: SGLang passes
        # `hidden_size / (kMaxVecBytes / sizeof(DType))`
        check_names(value.strip(), set(contract.dims) | {ELEM_BYTES}, "dim")
    except (expr.ExprError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    return Binding(name=name, kind="expr", dtype=dtype or "int32", value=value.strip())


def read_text(path: Path, what: str = "file") -> str:
    """A text file's contents; a missing, binary or non-UTF-8 file is one ContractError line."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ContractError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if b"\0" in data:
        raise ContractError(f"{path}: {what} is binary, expected UTF-8 text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContractError(f"{path}: {what} is not UTF-8 text (byte {exc.start})") from None


def one_line(where: str, exc: ValidationError, field_prefix: str = "") -> ContractError:
    """``where: field: problem`` for the first error; ``field_prefix`` names the section."""
    errors = exc.errors()
    first = errors[0]
    loc = field_prefix
    for part in first["loc"]:
        loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "missing":
        message = "required field is missing"
    elif first["type"] == "extra_forbidden":
        message = "unknown field"
    suffix = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return ContractError(f"{where}: {loc + ': ' if loc else ''}{message}{suffix}")


def load_contract(folder: Path) -> OperationSpec:
    """Read and validate ``folder/contract.toml``; raises ContractError (one line)."""
    path = folder / CONTRACT_FILE
    if not path.is_file():
        raise ContractError(f"{path}: not found (an operation folder needs {CONTRACT_FILE})")
    try:
        raw = tomllib.loads(read_text(path, CONTRACT_FILE))
    except tomllib.TOMLDecodeError as exc:
        raise ContractError(f"{path}: invalid TOML: {exc}") from None
    dims = raw.get("dims")
    context = {"dims": set(dims)} if isinstance(dims, dict) else None
    try:
        contract = Contract.model_validate(raw, context=context)
    except ValidationError as exc:
        raise one_line(str(path), exc) from None
    return OperationSpec(contract=contract, folder=folder)
