"""The kernel contract: what an operation computes, and what an implementation of it declares.

An operation lives in ``kernels/<op>/``: ``contract.toml`` (dims, arguments, suites, tolerances,
bytes moved, the float64 reference) and any number of implementation files ``<name>.cu`` whose
header comment declares the entry point, the launch geometry and optional tunables. Both are
validated by the Pydantic models here; anything malformed raises :class:`ContractError` whose
message is one line naming the file, the field and what was expected.

Kernel parameters, in order: every tensor of ``args`` (a pointer each), then every entry of
``scalars`` (passed by value).
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from collections.abc import Callable, Iterator, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from astra_graph import expr
from astra_graph.dtypes import DTYPES, TYPE_PARAMETER, DType

CONTRACT_FILE = "contract.toml"
SUITE_NAMES = ("tuning", "heldout", "edge")
ELEM_BYTES = "elem_bytes"
"""Name bound in expressions to the byte size of the element type under test."""


class ContractError(ValueError):
    """Malformed contract or implementation; ``str()`` is one line: ``file: field: problem``."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DimSpec(_Strict):
    min: int = Field(1, ge=0)
    max: int | None = None
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


class InitSpec(_Strict):
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


def _known_dims(info: ValidationInfo) -> set[str] | None:
    return None if info.context is None else info.context.get("dims")


def _check_names(text: str | int, known: set[str] | None, what: str) -> None:
    if isinstance(text, int) or known is None:
        if isinstance(text, str):
            expr.parse(text)
        return
    for name in sorted(expr.names(text)):
        if name not in known:
            raise ValueError(f"unknown {what} {name!r}")


class TensorArg(_Strict):
    name: str = Field(pattern=r"^[A-Za-z_]\w*$")
    dtype: str
    shape: list[str | int] = Field(min_length=1)
    role: Literal["input", "output", "inout"]
    align: int = Field(16, ge=1, description="guaranteed byte alignment of the base pointer")
    init: InitSpec = InitSpec()
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
                _check_names(item, _known_dims(info), "dim")
            except expr.ExprError as exc:
                raise ValueError(str(exc)) from None
        return value

    @property
    def written(self) -> bool:
        return self.role != "input"


class ScalarArg(_Strict):
    """A by-value kernel parameter: from the dims (``value``) or a parameter (``default``)."""

    name: str = Field(pattern=r"^[A-Za-z_]\w*$")
    dtype: Literal["int32", "int64", "float32", "float64"]
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
                _check_names(value, _known_dims(info), "dim")
            except expr.ExprError as exc:
                raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _one_source(self) -> ScalarArg:
        if (self.value is None) == (self.default is None):
            raise ValueError(f"scalar {self.name!r} needs exactly one of 'value' or 'default'")
        if self.range is not None:
            low, high = self.range
            if self.default is None or not 0 < low <= self.default <= high:
                raise ValueError(
                    f"scalar {self.name!r}: range needs a default inside it and 0 < low <= high"
                )
        return self


class Tolerance(_Strict):
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)


class Special(_Strict):
    """A named input scenario: a fraction of the elements of some inputs set to given values."""

    name: str
    description: str = ""
    values: dict[str, list[float]] = Field(min_length=1)
    fraction: float = Field(0.05, gt=0, le=1)
    paired: bool = Field(False, description="set the same positions in every named input")


class Suites(_Strict):
    tuning: list[dict[str, int]] = Field(min_length=1)
    heldout: list[dict[str, int]] = Field(min_length=1)
    edge: list[dict[str, int]] = []


class Contract(_Strict):
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

    @field_validator("dtypes")
    @classmethod
    def _dtypes(cls, value: list[str]) -> list[str]:
        for name in value:
            _check_dtype_name(name, allow_type_parameter=False)
        return value

    @field_validator("bytes_moved")
    @classmethod
    def _bytes(cls, value: str | int, info: ValidationInfo) -> str | int:
        dims = _known_dims(info)
        try:
            _check_names(value, None if dims is None else dims | {ELEM_BYTES}, "name")
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
        inputs = {a.name for a in self.args if a.role != "output"}
        for i, special in enumerate(self.specials):
            for arg_name in special.values:
                if arg_name not in inputs:
                    raise ValueError(f"specials[{i}].values: {arg_name!r} is not an input argument")
        for suite in SUITE_NAMES:
            for i, shape in enumerate(getattr(self.suites, suite)):
                problem = self.shape_problem(shape)
                if problem:
                    raise ValueError(f"suites.{suite}[{i}]: {problem}")
        return self

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
                out[s.name] = params.get(s.name, s.default)  # type: ignore[assignment]
        return out

    def suite(self, name: str) -> list[dict[str, int]]:
        return list(getattr(self.suites, name))

    def label(self, dims: Mapping[str, int]) -> str:
        """A compact shape label such as ``16x4096`` in the order of the contract's dims."""
        return "x".join(str(dims[d]) for d in self.dims)


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
        spec.loader.exec_module(module)
        func = getattr(module, func_name, None)
        if not callable(func):
            raise ContractError(f"{where}: {file_name} defines no function {func_name!r}")
        return func

    def implementations(self) -> list[Path]:
        return sorted(self.folder.glob("*.cu"))


# --- implementation headers -------------------------------------------------------------------

MAX_TUNABLE_COMBINATIONS = 4096
"""A header may declare at most this many tunable settings (their product), so that listing
them is always cheap; a sweep times far fewer (``tuning.DEFAULT_MAX_CONFIGS``)."""
HEADER_KEYS = ("entry", "grid", "block", "smem", "tunable", "requires", "description")
_HEADER_LINE = re.compile(r"^\s*//\s*astra:\s*(?P<key>\w+)\s*(?P<rest>.*)$")
_TUNABLE = re.compile(r"^(?P<name>[A-Z_][A-Z0-9_]*)\s*=\s*(?P<values>.+)$")
_ENTRY = re.compile(r"^(?P<name>[A-Za-z_]\w*)\s*(<(?P<targs>[^<>]*)>)?$")


class ImplementationHeader(_Strict):
    """What an implementation file declares in its ``// astra: key = value`` header lines.

    ``entry`` is a kernel name, optionally a template instantiation whose arguments may be ``T``
    (the element type under test), tunable names or literals. ``grid``, ``block`` and ``smem``
    are expressions over the contract's dims, the tunables and ``elem_bytes``. Each tunable is
    also defined as a macro (``-D NAME=value``) when compiling.
    """

    entry: str
    grid: str
    block: str
    smem: str = "0"
    tunables: dict[str, list[int]] = {}
    requires: list[str] = []
    description: str = ""

    @field_validator("entry")
    @classmethod
    def _entry(cls, value: str) -> str:
        if not _ENTRY.match(value.strip()):
            raise ValueError(f"expected a kernel name or name<args>, got {value!r}")
        return value.strip()

    @field_validator("grid", "block", "smem")
    @classmethod
    def _geometry(cls, value: str, info: ValidationInfo) -> str:
        known = _known_dims(info)
        try:
            _check_names(value, None if known is None else known | {ELEM_BYTES}, "name")
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

    @field_validator("requires")
    @classmethod
    def _requires(cls, value: list[str], info: ValidationInfo) -> list[str]:
        known = _known_dims(info)
        for item in value:
            try:
                _check_names(item, None if known is None else known | {ELEM_BYTES}, "name")
            except expr.ExprError as exc:
                raise ValueError(str(exc)) from None
        return value

    @property
    def kernel_name(self) -> str:
        match = _ENTRY.match(self.entry)
        assert match is not None
        return match["name"]

    def entry_for(self, dtype: DType, tunables: Mapping[str, int]) -> str:
        """The name expression to instantiate: ``T`` and tunables replaced by their values."""
        match = _ENTRY.match(self.entry)
        assert match is not None
        if match["targs"] is None:
            return self.entry
        args = []
        for raw in match["targs"].split(","):
            token = raw.strip()
            if token == TYPE_PARAMETER:
                args.append(dtype.ctype)
            elif token in tunables:
                args.append(str(tunables[token]))
            else:
                args.append(token)
        return f"{match['name']}<{', '.join(args)}>"

    def configurations(self) -> Iterator[dict[str, int]]:
        """Every combination of tunable values (one empty one when there are none)."""
        configs: list[dict[str, int]] = [{}]
        for name, values in self.tunables.items():
            configs = [{**c, name: v} for c in configs for v in values]
        yield from configs

    def default_tunables(self) -> dict[str, int]:
        return {name: values[0] for name, values in self.tunables.items()}

    def env(
        self, dims: Mapping[str, int], dtype: DType, tunables: Mapping[str, int]
    ) -> dict[str, int]:
        return {**dims, **self.default_tunables(), **tunables, ELEM_BYTES: dtype.itemsize}

    def unmet_requirement(
        self, dims: Mapping[str, int], dtype: DType, tunables: Mapping[str, int]
    ) -> str | None:
        env = self.env(dims, dtype, tunables)
        for item in self.requires:
            if not expr.evaluate(item, env):
                return item
        return None

    def launch(
        self, dims: Mapping[str, int], dtype: DType, tunables: Mapping[str, int]
    ) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
        """(grid, block, dynamic shared memory bytes) for one shape."""
        env = self.env(dims, dtype, tunables)
        return (
            expr.evaluate_dims3(self.grid, env),
            expr.evaluate_dims3(self.block, env),
            expr.evaluate_int(self.smem, env),
        )


class Implementation(BaseModel):
    """One ``.cu`` file: its source and validated header."""

    model_config = ConfigDict(frozen=True)

    path: Path
    source: str
    header: ImplementationHeader

    @property
    def name(self) -> str:
        return self.path.stem


def parse_header_lines(source: str, where: str) -> dict[str, Any]:
    """Collect the ``// astra: key ...`` lines of the file's leading comment block."""
    fields: dict[str, Any] = {"tunables": {}, "requires": []}
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
        elif not rest.startswith("="):
            raise ContractError(f"{where}:{lineno}: header.{key}: expected '{key} = ...'")
        elif key == "requires":
            fields["requires"].append(rest[1:].strip())
        else:
            if key in fields:
                raise ContractError(f"{where}:{lineno}: header.{key}: given twice")
            fields[key] = rest[1:].strip()
    return fields


def _one_line(where: str, exc: ValidationError, field_prefix: str = "") -> ContractError:
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
    path = folder / CONTRACT_FILE
    if not path.is_file():
        raise ContractError(f"{path}: not found (an operation folder needs {CONTRACT_FILE})")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ContractError(f"{path}: invalid TOML: {exc}") from None
    dims = raw.get("dims")
    context = {"dims": set(dims)} if isinstance(dims, dict) else None
    try:
        contract = Contract.model_validate(raw, context=context)
    except ValidationError as exc:
        raise _one_line(str(path), exc) from None
    return OperationSpec(contract=contract, folder=folder)


def load_implementation(
    path: Path, contract: Contract, source: str | None = None
) -> Implementation:
    """Parse and validate an implementation's header against its contract."""
    where = str(path)
    if source is None:
        if not path.is_file():
            raise ContractError(f"{where}: not found")
        source = path.read_text()
    fields = parse_header_lines(source, where)
    known = set(contract.dims) | set(fields["tunables"])
    try:
        header = ImplementationHeader.model_validate(fields, context={"dims": known})
    except ValidationError as exc:
        raise _one_line(where, exc, field_prefix="header") from None
    match = _ENTRY.match(header.entry)
    assert match is not None
    for token in (match["targs"] or "").split(","):
        token = token.strip()
        literal = re.fullmatch(r"-?\d+|true|false|[A-Za-z_:][\w:]*", token)
        if token and token != TYPE_PARAMETER and token not in header.tunables and not literal:
            raise ContractError(f"{where}: header.entry: bad template argument {token!r}")
    return Implementation(path=path, source=source, header=header)


# --- locating kernels -------------------------------------------------------------------------


def kernels_root() -> Path:
    """``kernels/`` as shipped in the wheel, or the source checkout's top-level folder."""
    packaged = Path(__file__).parent / "kernels"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "kernels"


def operations(root: Path | None = None) -> list[OperationSpec]:
    root = root or kernels_root()
    return [load_contract(p.parent) for p in sorted(root.glob(f"*/{CONTRACT_FILE}"))]


DEFAULT_IMPLEMENTATION = "production"


def resolve(target: str | Path) -> tuple[OperationSpec, Implementation]:
    """A kernel named by path (``kernels/op/x.cu``), by ``op/impl``, or by operation name.

    A bare operation name means its ``production.cu``. A ``.cu`` path outside ``kernels/`` finds
    its contract in its own folder.
    """
    text = str(target)
    path = Path(text)
    if path.suffix == ".cu":
        if not path.is_file():
            raise ContractError(f"{path}: implementation file not found")
        spec = load_contract(path.resolve().parent)
        return spec, load_implementation(path, spec.contract)
    if path.is_dir():
        spec = load_contract(path)
        return spec, load_implementation(path / f"{DEFAULT_IMPLEMENTATION}.cu", spec.contract)
    op, _, impl = text.partition("/")
    folder = kernels_root() / op
    if not (folder / CONTRACT_FILE).is_file():
        known = ", ".join(p.name for p in sorted(kernels_root().iterdir()) if p.is_dir())
        raise ContractError(f"{text}: no such kernel file or operation (operations: {known})")
    spec = load_contract(folder)
    impl_path = folder / f"{impl or DEFAULT_IMPLEMENTATION}.cu"
    return spec, load_implementation(impl_path, spec.contract)
