"""A candidate is parsed once on its way from the coding agent's reply to its verdict and its
timing (issue 21, item 3): the coding step parses it, and the evaluator's check, its timing and
the worker's jobs all use that parse (``kernel.loaded`` in the calling process, the parse
carried in the payload to the worker). Before this change the same file was parsed five times:
coding, the evaluator's check, the check job, the evaluator's timing, the timing job
(``tests/parse_path.py`` walks that path; ``benchmarks/load_counts.py`` prints the count).
"""

from __future__ import annotations

from pathlib import Path

from astra_graph.harness.payload import CheckRequest
from astra_graph.kernel import loaded
from parse_path import BASELINE, parses_from_reply_to_verdict


def test_a_candidate_is_parsed_once_from_reply_to_verdict(tmp_path: Path) -> None:
    assert parses_from_reply_to_verdict(tmp_path) == 1


def test_a_payload_without_a_parse_is_parsed_by_the_worker() -> None:
    """Requests from before the parse travelled (or built by hand) still work."""
    spec = loaded.spec_of(BASELINE)
    impl = loaded.implementation(spec, BASELINE)
    request = CheckRequest.model_validate(
        {
            "op": {"folder": str(spec.folder), "contract": spec.contract.model_dump()},
            "candidate": {"path": str(BASELINE), "source": impl.source},
            "suites": ["tuning"],
        }
    )
    rebuilt = request.candidate.implementation(spec.contract)
    assert rebuilt.header == impl.header and rebuilt.bindings == impl.bindings
