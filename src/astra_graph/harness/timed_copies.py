"""The timed copies of one implementation for one shape: inputs, poisons, fingerprints.

:class:`TimedCopies` holds, for the timing job (``harness.bench``), every copy's arguments as the
rows of one batch array per argument, two input sets that alternate between timed samples, the
random-payload NaN poisons written over the outputs before every sample, one fingerprint of the
written bits per sample, and the re-check of what the timed calls left (moved out of bench.py,
issue 21; the reasons are in the class's and the constants' docstrings).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from astra_graph.harness import timing
from astra_graph.harness.domain import largest_arg_elements
from astra_graph.harness.oracle import reference_with_own_error
from astra_graph.harness.poison import nan_poison
from astra_graph.harness.results import Evidence, RejectReason
from astra_graph.kernel.contract import OperationSpec

TIMING_POISONS = 2
"""Random-payload NaN patterns per output, written over it in turn before each timed sample: a
fixed fill byte (0xFF until 2026-11-24) told a kernel that it was being timed, not checked."""
TIMING_INPUT_SETS = 2
"""Input sets each copy alternates between, one per timed sample: the same buffers never see the
same inputs in two consecutive samples, so a result replayed per buffer is the other set's."""
TIMED_CHECKED_COPIES = 8
"""Copies whose outputs, as the last timed sample left them, are compared with the float64
reference after timing, drawn after timing (OS entropy) among the launched ones; with the
fingerprints of every sample (every copy's outputs) a kernel that skips or replays work on any
copy in any sample shows, and the ones compared cannot be known while it runs."""
TIMED_TRANSIENT_BYTES_PER_ELEMENT = 8
"""Bytes per element of the largest argument held for a moment while copies are added, counted:
the float32 draw of an input set (4; ``cases.random_values``) and its conversion to the storage
type before it is written into the set (at most 4)."""
BATCH_ROW_ALIGN = 256
"""Each input copy starts at a multiple of this many bytes in its batch (cudaMalloc's
alignment), whatever the shape's size."""


class TimedCopies:
    """One implementation's inputs for one shape: copies, input sets, references.

    The copies of each argument are the rows of one batch array (``copies x shape``), so that
    restoring every copy's inputs before a graph replay, or poisoning every copy's outputs, is
    one operation per argument instead of one per copy (with 256 copies the per-copy restores
    were most of the timing of an in-place operation's small shapes).

    Every copy has its own random inputs, and there are :data:`TIMING_INPUT_SETS` sets of them:
    before each timed sample (outside the events) the next set is copied into the batches, so
    the same buffers see other inputs from one sample to the next. A kernel that replays what it
    computed for a buffer (a launch counter per buffer set, a clock, a key on a few input
    values) writes the previous set's answer, which the fingerprints and the re-check see."""

    def __init__(self, kernel: Any, spec: OperationSpec) -> None:
        self.kernel = kernel
        self.spec = spec
        self.cases: list[Any] = []
        self.batches: dict[str, Any] = {}
        """Argument name -> its copies, one per row (what the kernel is launched on)."""
        self.sets: list[dict[str, Any]] = []
        """Per input set: input argument name -> its copies (never launched on)."""
        self.current = 0
        """The input set now in the batches."""
        self.references: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        self._bound: dict[int, tuple[Any, Any, Any, list[Any], int]] = {}
        self._poisons: dict[str, list[Any]] = {}
        """Output name -> NaN patterns as large as its batch (:data:`TIMING_POISONS`)."""
        self._poisoned = 0
        self.fingerprints: list[tuple[int, Any]] = []
        """One (input set, device scalar) per timed sample: the sum of the written bits."""

    @property
    def inputs(self) -> list[str]:
        return [a.name for a in self.spec.contract.args if a.role != "output"]

    @property
    def outputs(self) -> list[str]:
        return [a.name for a in self.spec.contract.args if a.role == "output"]

    def bytes_per_copy(self, dims: Mapping[str, int], dtype: str) -> int:
        """GPU memory one more copy takes in :meth:`add_copies`: every input in its batch and
        in each of the :data:`TIMING_INPUT_SETS` sets, every output in its batch and in each of
        the :data:`TIMING_POISONS` patterns, and the largest argument's transient draw
        (:data:`TIMED_TRANSIENT_BYTES_PER_ELEMENT`)."""
        contract = self.spec.contract
        held = 0
        for arg in contract.args:
            element = contract.dtype_of(arg, dtype)
            row = _padded_row(math.prod(contract.shape_of(arg, dims)), element.itemsize)
            kept = TIMING_POISONS if arg.role == "output" else TIMING_INPUT_SETS
            held += (1 + kept) * row * element.itemsize
        largest = largest_arg_elements(self.spec, dims)
        return held + TIMED_TRANSIENT_BYTES_PER_ELEMENT * largest

    def add_copies(self, dims: Mapping[str, int], dtype: str, rng: Any, total: int) -> None:
        """Grow to ``total`` copies, every one with its own random inputs in every set (drawn
        afresh: no launch has touched them)."""
        import cupy

        from astra_graph.harness.cases import Case, random_values

        if len(self.cases) >= total:
            return
        contract = self.spec.contract
        batches, views = {}, {}
        sets: list[dict[str, Any]] = [{} for _ in range(TIMING_INPUT_SETS)]
        for arg in contract.args:
            element = contract.dtype_of(arg, dtype)
            shape = contract.shape_of(arg, dims)
            size = math.prod(shape)
            row = _padded_row(size, element.itemsize)
            batch = cupy.empty((total, row), dtype=element.storage)
            if arg.role != "output":
                for inputs in sets:
                    drawn = cupy.empty((total, row), dtype=element.storage)
                    if arg.init.distinct:  # no two alike within a copy, as a case draws
                        copies = [random_values(arg, (size,), rng, dims) for _ in range(total)]
                        values = cupy.stack(copies)
                    else:
                        values = random_values(arg, (total, size), rng, dims)
                    drawn[:, :size] = element.from_float64(cupy, values)
                    inputs[arg.name] = drawn
                batch[...] = sets[0][arg.name]
            batches[arg.name] = batch
            views[arg.name] = [batch[i, :size].reshape(shape) for i in range(total)]
        self.batches, self.sets, self.current = batches, sets, 0
        self._bound, self.references = {}, {}
        self._poisons = {
            a.name: [
                nan_poison(cupy, rng, contract.dtype_of(a, dtype), batches[a.name].shape)
                for _ in range(TIMING_POISONS)
            ]
            for a in contract.args
            if a.role == "output"
        }
        scalars = contract.scalar_values(dims)
        self.cases = [
            Case(dict(dims), dtype, {n: v[i] for n, v in views.items()}, scalars)
            for i in range(total)
        ]

    def _set_view(self, name: str, index: int, which: int | None = None) -> Any:
        """Copy ``index`` of an input as input set ``which`` (the current one) holds it."""
        view = self.cases[index].arrays[name]
        batch = self.sets[self.current if which is None else which][name]
        return batch[index, : view.size].reshape(view.shape)

    def poison(self, stream: Any) -> None:
        """Write NaNs with random payloads over every copy's pure outputs, the next of the
        patterns each time (in-place arguments get their next inputs instead)."""
        self._poisoned += 1
        with stream:
            for name in self.outputs:
                patterns = self._poisons[name]
                self.batches[name][...] = patterns[self._poisoned % len(patterns)]

    def expect(self, index: int) -> None:
        """The reference for copy ``index`` on the current input set (computed from the set,
        which no launch touches, so it holds the inputs the last sample was given)."""
        import cupy

        case = self.cases[index]
        contract = self.spec.contract
        inputs = {}
        for arg in contract.args:
            if arg.role != "output":
                source = self._set_view(arg.name, index)
                inputs[arg.name] = contract.dtype_of(arg, case.dtype).to_float64(cupy, source)
        reference = reference_with_own_error(self.spec, case.dtype, cupy, inputs, case.scalars)
        self.references[index] = (inputs, reference)

    def launch(self, index: int, stream: Any) -> None:
        """Launch on copy ``index``. The first launch of a copy goes through the harness's
        checked path (geometry, shared-memory attribute); later ones reuse its geometry and
        argument list, so that a timed call costs the host one driver call and no Python
        arithmetic, as close as Python allows to the C++ launch of a framework op."""
        bound = self._bound.get(index)
        if bound is None:
            case = self.cases[index]
            kernel = self.kernel.at(case.dims)  # the instantiation this shape runs
            kernel.launch(case, stream)
            grid, block, smem = kernel.geometry(case.dims)
            self._bound[index] = (kernel, grid, block, kernel.arguments(case), smem)
            return
        kernel, grid, block, args, smem = bound
        try:
            kernel.function(grid, block, args, shared_mem=smem, stream=stream)
        except Exception as exc:  # CuPy's CUDARuntimeError / CUDADriverError
            from astra_graph.harness.launch import STICKY_CUDA_ERRORS, LaunchError

            code = getattr(exc, "status", None)
            raise LaunchError(
                f"launch of {kernel.compiled.entry}: {exc}",
                sticky=code in STICKY_CUDA_ERRORS,
                code=code,
            ) from None

    def restore(self, index: int, stream: Any) -> None:
        """Copy ``index``'s inputs from the next input set (before a sample of copy 0)."""
        self.current = (self.current + 1) % len(self.sets)
        with stream:
            for name in self.inputs:
                self.batches[name][index] = self.sets[self.current][name][index]

    def restore_all(self, stream: Any) -> None:
        """Every copy's inputs from the next input set (before a graph replay)."""
        self.current = (self.current + 1) % len(self.sets)
        with stream:
            for name in self.inputs:
                self.batches[name][...] = self.sets[self.current][name]

    def subject(self, name: str, fingerprinted: bool = False) -> timing.Subject:
        """A timing subject; ``fingerprinted``: record each sample's outputs (afresh)."""
        self.fingerprints = []
        return timing.Subject(
            name=name,
            launch=self.launch,
            copies=len(self.cases),
            restore=self.restore if self.inputs else None,
            restore_all=self.restore_all if self.inputs else None,
            poison=self.poison if self.outputs else None,
            after_sample=self.fingerprint if fingerprinted else None,
        )

    def fingerprint(self, stream: Any) -> None:
        """Record (on the stream, no synchronisation) the sum of the bits of every copy's
        written elements, with the input set the sample ran on: equal after every sample of a
        set for a kernel that computes every time. Every copy's row, so a sample that skips
        work on any copy shows."""
        total = None
        with stream:
            for arg in self.spec.contract.args:
                if arg.written:
                    array = self.cases[0].arrays[arg.name]
                    bits = self.batches[arg.name][:, : array.size]
                    part = bits.view(f"uint{8 * array.itemsize}").sum(dtype="uint64")
                    total = part if total is None else total + part
        if total is not None:
            self.fingerprints.append((self.current, total))

    def first_unlike_sample(self) -> tuple[int, int] | None:
        """(the first timed sample whose outputs differ from those of the last sample on the
        same input set, the number of samples), or None. The last sample's outputs are the ones
        the re-check compares with the reference."""
        sums = [(which, int(value)) for which, value in self.fingerprints]  # one read each
        last = {which: value for which, value in sums}
        unlike = [k for k, (which, value) in enumerate(sums) if value != last[which]]
        return (unlike[0], len(sums)) if unlike else None

    def launched(self) -> list[int]:
        """The copies the timed calls ran on (single-launch nodes run copy 0 only; a graph of
        copies runs every copy)."""
        return sorted(self._bound)

    def mutated_input(self, index: int) -> str | None:
        """The first pure input of copy ``index`` that the timed calls changed, or None."""
        for arg in self.spec.contract.args:
            if arg.role == "input":
                now = self.cases[index].arrays[arg.name]
                kind = f"uint{8 * now.itemsize}"
                given = self._set_view(arg.name, index)
                if bool((now.view(kind) != given.view(kind)).any()):  # bits: NaN too
                    return arg.name
        return None

    def check(self, index: int) -> tuple[RejectReason, Evidence] | None:
        """Why copy ``index``'s outputs, as the timed calls left them, are wrong (against its
        reference on the current input set); or None."""
        from astra_graph.harness.compare import compare_outputs

        case = self.cases[index]
        inputs, reference = self.references[index]
        written = {a.name: case.arrays[a.name] for a in self.spec.contract.args if a.written}
        found, _ = compare_outputs(self.spec, inputs, written, reference, case.dtype)
        if found is None:
            return None
        evidence = found.evidence()
        evidence.dims, evidence.dtype = dict(case.dims), case.dtype
        return found.reason, evidence


def _padded_row(size: int, itemsize: int) -> int:
    """Elements of one copy's row of ``size`` elements, padded to :data:`BATCH_ROW_ALIGN` bytes:
    every copy starts where cudaMalloc's would."""
    return -(-size * itemsize // BATCH_ROW_ALIGN) * BATCH_ROW_ALIGN // itemsize
