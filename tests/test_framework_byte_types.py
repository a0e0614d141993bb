"""One-byte element types (``uint8``, ``int8``, ``bool``) from import to comparison, on the CPU.

The fixture tests/fixtures/framework/csrc/byte_types.cu was written for these tests in the
style of a serving framework's bit packing (no framework code is copied): a ``bool`` mask and
``int8_t`` codes in, ``uint8_t`` packed bits out, and a grid sized through a ``dim3`` local's
component (``threads.x``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from astra_graph.cli import main
from astra_graph.framework.flatten import flatten
from astra_graph.framework.launchers import WHOLE_LAUNCH_DTYPE, analyse, device_constants
from astra_graph.framework.parse import parse_source
from astra_graph.harness.cases import make_case
from astra_graph.harness.compare import output_error
from astra_graph.kernel.contract import load_contract
from astra_graph.kernel.dtypes import DTYPES

SOURCE = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc" / "byte_types.cu"
H100 = device_constants("sm_90", (13, 0))

pytestmark = pytest.mark.usefixtures("default_search_path")


def test_one_byte_tensors_keep_their_types_and_a_dim3_component_is_read() -> None:
    source = parse_source(flatten(SOURCE, []).text)
    (launcher,) = source.launchers
    (launch,) = launcher.launches
    assert launch.locals["threads.x"] == "128" and launch.locals["threads.y"] == "1"
    kernels, macros, constants = source.kernels, source.macros, source.constants
    analysis = analyse(launcher, launch, kernels, macros, H100, constants, returns=source.returns)
    elements = {name: use.element for name, use in analysis.tensors.items()}
    assert elements == {"bits": "uint8", "mask": "bool", "codes": "int8"}
    # no tensor of the launch's own element type: the contract tests one type none takes
    assert analysis.dtypes == (WHOLE_LAUNCH_DTYPE,)
    assert analysis.shapes["bits"] == ["((mask_0 + 7) // 8)"]
    assert "128" in analysis.grid


def test_whole_draws_wrap_into_one_byte_types_and_bools_are_zero_or_one() -> None:
    draws = np.array([-1.2, 0.3, 1.6, 255.0, 300.0])
    assert DTYPES["uint8"].from_float64(np, draws).tolist() == [255, 0, 2, 255, 44]
    assert DTYPES["int8"].from_float64(np, draws).tolist() == [-1, 0, 2, -1, 44]
    flags = DTYPES["bool"].from_float64(np, draws)
    assert flags.dtype == np.bool_ and flags.tolist() == [True, False, True, True, True]
    assert DTYPES["bool"].to_float64(np, flags).tolist() == [1.0, 0.0, 1.0, 1.0, 1.0]


@pytest.mark.usefixtures("needs_nvrtc")
def test_the_import_validates_and_an_integer_output_is_compared_exactly(tmp_path: Path) -> None:
    assert main(["import", str(SOURCE), "--out", str(tmp_path)]) == 0
    assert main(["validate", str(tmp_path / "pack_negative")]) == 0
    spec = load_contract(tmp_path / "pack_negative")
    contract = spec.contract
    case = make_case(spec, {"mask_0": 64}, WHOLE_LAUNCH_DTYPE, np.random.default_rng(0))
    stored = {name: array.dtype for name, array in case.arrays.items()}
    assert stored == {"bits": np.uint8, "mask": np.bool_, "codes": np.int8}
    # one-byte codes are no row ids: drawn around 0, both signs (the kernel tests codes < 0)
    assert (case.arrays["codes"] < 0).any() and (case.arrays["codes"] > 0).any()
    bits = next(a for a in contract.args if a.name == "bits")
    reference = np.arange(8, dtype=np.float64)
    got = reference.astype(np.uint8)
    assert output_error(contract, bits, WHOLE_LAUNCH_DTYPE, got, reference).finding is None
    got[3] += 1  # one packed byte off by one bit
    assert output_error(contract, bits, WHOLE_LAUNCH_DTYPE, got, reference).finding is not None
