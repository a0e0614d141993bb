"""What travels to the worker: one typed payload for check and bench requests alike.

A request names the operation by its folder *and* carries its validated contract, and carries
every implementation's path (for messages) with its source and tunables, so the worker never
reads a file the caller could have changed between checking and timing. It also carries the
caller's parse of each file (its header and parameter bindings), so the worker does not parse
the file again: a candidate is parsed once on its way from the coding agent's reply to its
verdict (the parse is a frozen model; the worker only revalidates its fields).
:class:`CheckRequest` and ``harness.bench_request.BenchRequest`` extend :class:`JobPayload` with
what each job needs.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from astra_graph.kernel.contract import Binding, Contract, OperationSpec
from astra_graph.kernel.header import Implementation, ImplementationHeader, load_implementation


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OperationPayload(_Payload):
    folder: str
    """The operation's folder (its reference module lives there)."""
    contract: dict[str, object]
    """The validated contract, as ``Contract.model_dump()`` (Python values: JSON would turn
    the infinities of special scenarios into nulls; requests travel pickled)."""

    @classmethod
    def of(cls, spec: OperationSpec) -> OperationPayload:
        return cls(folder=str(spec.folder), contract=spec.contract.model_dump())

    def key(self) -> str:
        return hashlib.sha256(repr(self.model_dump()).encode()).hexdigest()


class KernelPayload(_Payload):
    path: str
    source: str
    tunables: dict[str, int] = {}
    """Tunable settings (the header's defaults for any not given)."""
    header: ImplementationHeader | None = None
    bindings: list[Binding] | None = None
    """The caller's parse of ``source`` (None: the worker parses it)."""

    @classmethod
    def of(cls, impl: Implementation, tunables: dict[str, int] | None = None) -> KernelPayload:
        return cls(
            path=str(impl.path),
            source=impl.source,
            tunables=dict(tunables or {}),
            header=impl.header,
            bindings=impl.bindings,
        )

    def implementation(self, contract: Contract) -> Implementation:
        """The implementation as the caller parsed it, or parsed here under ``contract``."""
        if self.header is None or self.bindings is None:
            return load_implementation(Path(self.path), contract, source=self.source)
        return Implementation(
            path=Path(self.path), source=self.source, header=self.header, bindings=self.bindings
        )


class JobPayload(_Payload):
    op: OperationPayload
    candidate: KernelPayload
    baseline: KernelPayload | None = None


class CheckRequest(JobPayload):
    """What ``Evaluator.check`` asks the worker to verify."""

    suites: list[str]
    extra_shapes: list[dict[str, int]] = []
    params: dict[str, float] = {}
    """Contract parameters the caller fixed (others are drawn per case within their range)."""
    random_shapes: bool = True
    """Add the random shapes of ``harness.plan`` (off only in tests of single cases)."""
    domain: bool = True
    """Add the domain suite (``harness.domain``): off only to measure what it costs, and in
    tests of single cases."""
    partial_kernels: bool = False
    """Accept a candidate whose ``requires`` is narrower than the contract's domain, recording
    it as the kernel's domain (the contract's ``partial_kernels`` allows it too)."""


_SPECS: dict[str, OperationSpec] = {}


def operation_spec(op: OperationPayload) -> OperationSpec:
    """The OperationSpec of a payload, built once per worker (its reference imported once)."""
    key = op.key()
    if key not in _SPECS:
        _SPECS[key] = OperationSpec(
            contract=Contract.model_validate(op.contract), folder=Path(op.folder)
        )
    return _SPECS[key]
