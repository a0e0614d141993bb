"""``astra import`` on the GPU: imported operations checked against themselves, the original as
the oracle, and a wrong candidate rejected by it.

The framework-style fixtures (tests/fixtures/framework/csrc) are imported into a temporary
folder; every operation that came in must be accepted when its original kernel is both the
candidate and the baseline, its reference being that same original run at its most precise
dispatched type. A copy whose output is scaled by 1.01 must be rejected: the oracle can fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.harness.evaluator import Evaluator
from astra_graph.kernel.contract import load_contract

pytestmark = pytest.mark.gpu

CSRC = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc"
CHECK_DEADLINE_S = 240
"""An imported kernel compiles up to four instantiations per check; generous on a cold cache."""


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("imported")
    for source in ("activation.cu", "layernorm.cu"):
        assert main(["import", str(CSRC / source), "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("op", ["silu_and_mul", "mul_and_silu", "fused_add_rms_norm", "scale_rows"])
def test_an_imported_operation_is_accepted_against_itself(imported: Path, op: str) -> None:
    spec = load_contract(imported / op)
    production = imported / op / "production.cu"
    with Evaluator(deadline_s=CHECK_DEADLINE_S) as evaluator:
        verdict = evaluator.check(spec, production, production)
    assert verdict.accepted, verdict.message


def test_the_oracle_rejects_a_wrong_candidate(imported: Path, tmp_path: Path) -> None:
    spec = load_contract(imported / "fused_add_rms_norm")
    production = imported / "fused_add_rms_norm" / "production.cu"
    source = production.read_text()
    scaled = source.replace(
        "static_cast<scalar_t>(x * s_variance) * weight[idx]",
        "static_cast<scalar_t>(x * s_variance * 1.01f) * weight[idx]",
    )
    assert scaled != source
    wrong = tmp_path / "wrong.cu"
    wrong.write_text(scaled)
    with Evaluator(deadline_s=CHECK_DEADLINE_S) as evaluator:
        verdict = evaluator.check(spec, production, wrong)
    assert not verdict.accepted
