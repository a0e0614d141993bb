"""How a framework names an operation: ``framework.toml`` beside the contract, validated.

An exported op must be a drop-in for the framework's own (field notes, section 8): same op
name, argument order, in-place mutation and dtypes. The contract says what the kernel computes
and in which order the *kernel* takes its parameters; it does not say how vLLM or sgl-kernel
spell the op. That is this file's job, kept beside ``contract.toml`` so the contract's schema
stays the harness's alone (``astra import`` writes the same file for an imported kernel)::

    [op]
    schema = "_C::silu_and_mul(Tensor! out, Tensor input) -> ()"   # csrc/torch_bindings.cpp
    args = { input = "x" }               # framework argument -> contract argument, if they differ

    [[patch]]                            # a Python function patch() replaces at run time
    module = "vllm._custom_ops"
    function = "silu_and_mul"
    params = ["out", "input"]            # its positional parameters, as op arguments
    optional = []                        # op outputs it allocates itself when given None
    returns = []                         # op arguments it returns (one: that tensor; more: a tuple)

    [source]                             # the framework file the kernel came from (--format patch)
    file = "csrc/activation_kernels.cu"  # relative to the framework's root
    launcher = "silu_and_mul"            # the host function that launches the kernel
    kernel = "act_and_mul_kernel"        # the __global__ function it launches

    [gate]                               # the serving block --gate times around the op
    block = "mlp"                        # mlp, norm or attention_out (GateBlock)
    dims = { tokens = "tokens", d = "intermediate" }
    writes = "x"
    reads = "out"

:class:`FrameworkSource` is the record ``astra import`` (``astra_graph.framework.naming``)
writes into ``[source]`` with ``[op]``; ``--format patch`` and the original's build need it.
``[gate]`` is the user's (the import cannot know the model block an op sits in). Anything
malformed is one :class:`ContractError` line naming the file and field.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from astra_graph.kernel import expr
from astra_graph.kernel.contract import (
    FRAMEWORK_FILE,
    Contract,
    ContractError,
    one_line,
    read_text,
)

__all__ = [
    "FRAMEWORK_FILE",
    "GATE_NAMES",
    "MODEL",
    "FrameworkOp",
    "gate_of",
    "load_framework",
    "parse_op",
]
_SCHEMA = re.compile(
    r"^\s*(?P<namespace>[A-Za-z_]\w*)::(?P<name>[A-Za-z_]\w*)\s*\((?P<args>[^()]*)\)"
    r"\s*(?:->\s*\(\s*\))?\s*$"
)
_SCHEMA_ARG = re.compile(r"^(?P<type>Tensor!?|float|int)\s+(?P<name>[A-Za-z_]\w*)$")
ArgKind = Literal["Tensor", "Tensor!", "float", "int"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SchemaArg(_Strict):
    """One argument of the framework op, in its order: type, name, the contract's name for it."""

    name: str
    kind: ArgKind
    contract_name: str

    @property
    def tensor(self) -> bool:
        return self.kind.startswith("Tensor")

    @property
    def mutated(self) -> bool:
        return self.kind == "Tensor!"

    @property
    def torch_type(self) -> str:
        """The schema type as ``torch.library`` writes it (``Tensor(a!)`` for a mutation)."""
        return {"Tensor": "Tensor", "float": "float", "int": "int"}.get(self.kind, "Tensor(a!)")


class OpName(_Strict):
    """``[op]``: the framework's schema and the mapping of its argument names to the contract's."""

    schema_: str = Field(alias="schema")
    args: dict[str, str] = {}


class PatchTarget(_Strict):
    """``[[patch]]``: one framework Python function that ``patch()`` replaces."""

    module: str = Field(pattern=r"^[A-Za-z_][\w.]*$")
    function: str = Field(pattern=r"^[A-Za-z_]\w*$")
    params: list[str]
    optional: list[str] = []
    returns: list[str] = []

    @model_validator(mode="after")
    def _subsets(self) -> PatchTarget:
        for field in ("optional", "returns"):
            for name in getattr(self, field):
                if name not in self.params:
                    raise ValueError(f"{field}: {name!r} is not one of params {self.params}")
        return self


class FrameworkSource(_Strict):
    """``[source]``: where the kernel lives in the framework (the ``astra import`` record)."""

    file: str = Field(description="the framework file, relative to the framework's root")
    launcher: str = Field(pattern=r"^[A-Za-z_]\w*$")
    kernel: str = Field(pattern=r"^[A-Za-z_]\w*$")
    include_dirs: list[str] = Field(
        ["csrc"], description="folders under the framework root that nvcc searches (--check)"
    )


MODEL = {"hidden": 4096, "intermediate": 14336, "qkv": 6144, "heads": 32, "head_dim": 128}
"""The serving model ``--gate`` builds its block at (``export.gate``): Llama-3-8B, hidden 4096,
MLP 14336, q + k + v = 4096 + 2 * 1024 (8 KV heads of 128), 32 query heads of 128."""
GATE_NAMES = ("tokens", *MODEL)
"""What ``[gate] dims`` expressions may read: the block's token count and the model's sizes."""
GateBlockKind = Literal["mlp", "norm", "attention_out"]


class GateBlock(_Strict):
    """``[gate]``: which serving block surrounds the op, and how its tensors sit in it (for
    ``--gate``). The block is a projection writing ``writes`` (``mlp`` only: ``x @ W_gate_up``,
    ``[tokens, 2 * intermediate]``), the op, then a projection reading ``reads`` as
    ``[tokens, K]`` (its first ``tokens * K`` elements; K is intermediate for ``mlp``, hidden
    for ``norm``, heads * head_dim for ``attention_out``)::

        [gate]
        block = "mlp"
        dims = { tokens = "tokens", d = "intermediate" }   # every contract dim, over GATE_NAMES
        writes = "x"
        reads = "out"
    """

    block: GateBlockKind
    dims: dict[str, str]
    reads: str
    writes: str | None = None


class FrameworkFile(_Strict):
    op: OpName
    patch: list[PatchTarget] = []
    source: FrameworkSource | None = None
    gate: GateBlock | None = None


class FrameworkOp(BaseModel):
    """The validated naming: namespace, op name and arguments in the framework's order."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    args: list[SchemaArg]
    patch: list[PatchTarget]
    source: FrameworkSource | None
    gate: GateBlock | None = None

    @property
    def qualname(self) -> str:
        return f"{self.namespace}::{self.name}"

    @property
    def mutated(self) -> list[str]:
        return [a.name for a in self.args if a.mutated]

    def torch_schema(self) -> str:
        """The argument list for ``torch.library`` (``(Tensor(a!) out, Tensor input) -> ()``)."""
        items = []
        for i, arg in enumerate(self.args):
            kind = arg.torch_type.replace("a!", f"{chr(ord('a') + i)}!")
            items.append(f"{kind} {arg.name}")
        return f"({', '.join(items)}) -> ()"

    def by_contract(self) -> dict[str, SchemaArg]:
        return {a.contract_name: a for a in self.args}


def parse_op(file: FrameworkFile, contract: Contract) -> FrameworkOp:
    """Check ``file`` against the contract; raises ValueError naming the field."""
    match = _SCHEMA.match(file.op.schema_)
    if not match:
        raise ValueError(
            f"op.schema: expected 'namespace::name(Tensor! a, Tensor b, float c) -> ()', "
            f"got {file.op.schema_!r}"
        )
    tensors = {a.name: a for a in contract.args}
    parameters = {s.name: s for s in contract.scalars if s.default is not None}
    args: list[SchemaArg] = []
    for i, raw in enumerate(filter(None, (p.strip() for p in match["args"].split(",")))):
        item = _SCHEMA_ARG.match(raw)
        if not item:
            raise ValueError(
                f"op.schema: argument {i} {raw!r}: expected 'Tensor name', 'Tensor! name', "
                "'float name' or 'int name'"
            )
        name = item["name"]
        target = file.op.args.get(name, name)
        kind = item["type"]
        if kind.startswith("Tensor"):
            if target not in tensors:
                raise ValueError(f"op.args: {name!r} -> {target!r} is no tensor of the contract")
            if (kind == "Tensor!") != tensors[target].written:
                raise ValueError(
                    f"op.schema: {name!r} is {kind} but the contract's {target!r} has role "
                    f"{tensors[target].role!r} (written arguments are 'Tensor!', inputs 'Tensor')"
                )
        elif target not in parameters:
            raise ValueError(
                f"op.args: {name!r} -> {target!r} is no scalar parameter (with a default) of "
                "the contract"
            )
        args.append(SchemaArg(name=name, kind=kind, contract_name=target))
    unknown = sorted(set(file.op.args) - {a.name for a in args})
    if unknown:
        raise ValueError(f"op.args: {unknown[0]!r} is not an argument of op.schema")
    mapped = {a.contract_name for a in args}
    missing = sorted((set(tensors) | set(parameters)) - mapped)
    if missing:
        raise ValueError(f"op.schema: the contract's {missing[0]!r} has no argument in the op")
    names = {a.name for a in args}
    for i, patch in enumerate(file.patch):
        for name in patch.params:
            if name not in names:
                raise ValueError(f"patch[{i}].params: {name!r} is not an argument of op.schema")
        missing_params = sorted(names - set(patch.params))
        if missing_params:
            raise ValueError(f"patch[{i}].params: op argument {missing_params[0]!r} is missing")
        for name in patch.optional:
            if not next(a for a in args if a.name == name).mutated:
                raise ValueError(f"patch[{i}].optional: {name!r} is not an output (Tensor!)")
    if file.gate is not None:
        _check_gate(file.gate, contract)
    return FrameworkOp(
        namespace=match["namespace"],
        name=match["name"],
        args=args,
        patch=file.patch,
        source=file.source,
        gate=file.gate,
    )


def _check_gate(gate: GateBlock, contract: Contract) -> None:
    """``[gate]`` against the contract; raises ValueError naming the field."""
    missing = sorted(set(contract.dims) - set(gate.dims))
    if missing:
        raise ValueError(f"gate.dims: the contract's dim {missing[0]!r} has no expression")
    for dim, text in gate.dims.items():
        if dim not in contract.dims:
            raise ValueError(f"gate.dims: {dim!r} is no dim of the contract")
        try:
            names = expr.names(text)
        except expr.ExprError as exc:
            raise ValueError(f"gate.dims.{dim}: {exc}") from None
        unknown = sorted(names - set(GATE_NAMES))
        if unknown:
            raise ValueError(f"gate.dims.{dim}: {unknown[0]!r} is none of {', '.join(GATE_NAMES)}")
    tensors = {a.name: a for a in contract.args}
    if gate.reads not in tensors or not tensors[gate.reads].written:
        raise ValueError(f"gate.reads: {gate.reads!r} is no tensor the op writes")
    if (gate.block == "mlp") != (gate.writes is not None):
        raise ValueError(
            f"gate.writes: {'required' if gate.block == 'mlp' else 'only'} for block 'mlp' "
            "(the tensor the up-projection writes)"
        )
    if gate.writes is not None and (
        gate.writes not in tensors or tensors[gate.writes].role == "output"
    ):
        raise ValueError(f"gate.writes: {gate.writes!r} is no tensor the op reads")


def gate_of(framework: FrameworkOp, folder: Path) -> GateBlock:
    """The op's ``[gate]``; raises ContractError (one line) when ``folder``'s framework.toml
    has none (``--gate`` cannot know which serving block surrounds the op)."""
    if framework.gate is None:
        raise ContractError(
            f"{folder / FRAMEWORK_FILE}: no [gate] (block, dims, reads): --gate needs the "
            "serving block around the op (docs/EXPORT.md)"
        )
    return framework.gate


def load_framework(folder: Path, contract: Contract) -> FrameworkOp:
    """Read ``folder/framework.toml``; raises ContractError (one line) if absent or malformed."""
    path = folder / FRAMEWORK_FILE
    if not path.is_file():
        raise ContractError(
            f"{path}: not found; export needs the framework's name for the op "
            '([op] schema = "ns::name(Tensor! out, Tensor x) -> ()", docs/EXPORT.md)'
        )
    try:
        raw = tomllib.loads(read_text(path, FRAMEWORK_FILE))
    except tomllib.TOMLDecodeError as exc:
        raise ContractError(f"{path}: invalid TOML: {exc}") from None
    try:
        file = FrameworkFile.model_validate(raw)
    except ValidationError as exc:
        raise one_line(str(path), exc) from None
    try:
        return parse_op(file, contract)
    except ValueError as exc:
        raise ContractError(f"{path}: {exc}") from None
