"""Error statistics of correct and of deliberately lossy kernels, the data behind the precision
rules of ``harness.compare`` (issue 10), on a GPU.

For every operation and dtype, on the cases a check runs (every suite's shapes and the random
shapes of ``harness.plan``, with its drawn parameters such as eps), with the harness's own input
generation (``launch.make_case``, then ``scenarios.apply``: special values and row magnitudes)
and float64 reference, each kernel runs on copies of the same inputs:

* the shipped ``naive`` and ``production`` kernels (production is the baseline of the rules);
* every correct-but-different kernel of ``tests/fixtures/correct_kernels/<op>/``;
* the deliberately lossy variants of ``benchmarks/lossy_kernels/<op>/`` (double rounding,
  rounding toward zero, low-precision weights or sums): never correct kernels, measured only so
  that the gap between correct and lossy is visible.

Every output is compared by ``compare.output_error``, the function the check itself uses, so the
statistics are the rule's own: mean ``|error| / allowed``, worst ``|error| / allowed``, mean
signed ``error / allowed`` (bias) and the same signed by the reference (``magnitude_bias``,
negative = toward zero), and the fraction of elements equal to the reference rounded once to
the output type. Per kernel, dtype and output the script keeps the element-weighted means over
cases and, against production on the same inputs, the worst per-case value of what each rule
compares: drop of the correctly rounded fraction, bias differences (tolerance units and standard
errors), the mean-error ratio to its floor; and how many cases ``compare.precision_problem``
(the rule) rejects. Results: ``benchmarks/results/correct-kernel-errors-<gpu>-<date>.json`` with
device, date and commit (``ASTRA_GIT_COMMIT`` on hosts without ``.git``).

Usage: ``python benchmarks/correct_kernel_errors.py [--out FILE] [--seed N] [OP ...]``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from astra_graph.store.provenance import git_commit

ROOT = Path(__file__).resolve().parents[1]
CORRECT = ROOT / "tests" / "fixtures" / "correct_kernels"
LOSSY = ROOT / "benchmarks" / "lossy_kernels"
OPS = ("silu_and_mul", "fused_add_rmsnorm", "merge_attn_states_lse")
SHIPPED = ("production", "naive")
"""Shipped implementations measured (default tunables); production is the rules' baseline."""
MEANS = ("mean_abs", "bias", "magnitude_bias", "exact_fraction")
"""Element-weighted means over cases."""
STATISTICS = ("mean_abs", "max_abs", "bias", "magnitude_bias", "exact_fraction")
RULE_FIGURES = ("exact_drop", "bias_diff", "magnitude_bias_diff", "bias_sigmas", "mean_vs_floor")


@dataclass
class Tally:
    """One kernel's statistics for one dtype and output, accumulated over cases."""

    measured: int = 0
    weighted: dict[str, float] = field(default_factory=lambda: dict.fromkeys(MEANS, 0.0))
    max_abs: float = 0.0
    rule: dict[str, float] = field(default_factory=lambda: dict.fromkeys(RULE_FIGURES, 0.0))
    cases: int = 0
    ruled_cases: int = 0
    """Cases large enough for the precision rules (both sides measured enough elements)."""
    rejected: int = 0
    first_problem: str = ""
    outside_tolerance: int = 0

    def add(
        self, result: Any, base: Any, problem: str | None, min_elements: int, ratio_floor: float
    ) -> None:
        self.cases += 1
        self.max_abs = max(self.max_abs, result.worst_ratio)
        if result.finding is not None:
            self.outside_tolerance += 1
        n = result.measured
        self.measured += n
        for key, value in (
            ("mean_abs", result.mean_ratio),
            ("bias", result.bias),
            ("magnitude_bias", result.magnitude_bias),
            ("exact_fraction", result.exact_fraction),
        ):
            self.weighted[key] += value * n
        if problem:
            self.rejected += 1
            self.first_problem = self.first_problem or problem
        if base is None or min(n, base.measured) < min_elements:
            return
        self.ruled_cases += 1
        se = math.hypot(result.bias_std_err, base.bias_std_err) or math.inf
        bias_diff = abs(result.bias - base.bias)
        magnitude_diff = abs(result.magnitude_bias - base.magnitude_bias)
        floor = max(base.mean_ratio, result.rounding_ratio, ratio_floor)  # as the rule floors it
        for key, value in (
            ("exact_drop", base.exact_fraction - result.exact_fraction),
            ("bias_diff", bias_diff),
            ("magnitude_bias_diff", magnitude_diff),
            ("bias_sigmas", max(bias_diff, magnitude_diff) / se),
            ("mean_vs_floor", result.mean_ratio / floor),
        ):
            self.rule[key] = max(self.rule[key], value)

    def summary(self) -> dict[str, Any]:
        n = self.measured or 1
        means = {k: self.weighted[k] / n for k in MEANS}
        return {
            **means,
            "max_abs": self.max_abs,
            **self.rule,
            "cases": self.cases,
            "ruled_cases": self.ruled_cases,
            "rejected_cases": self.rejected,
            "first_problem": self.first_problem,
            "outside_tolerance_cases": self.outside_tolerance,
            "measured_elements": self.measured,
        }


def kernels_of(spec: Any) -> list[tuple[str, str, Path]]:
    """(label, kind, file): kind is ``shipped``, ``correct`` or ``lossy``."""
    found = [(name, "shipped", spec.folder / f"{name}.cu") for name in SHIPPED]
    found += [(p.stem, "correct", p) for p in sorted((CORRECT / spec.name).glob("*.cu"))]
    found += [(p.stem, "lossy", p) for p in sorted((LOSSY / spec.name).glob("*.cu"))]
    return found


def measure(op: str, seed: int) -> dict[str, Any]:
    import cupy
    import numpy as np

    from astra_graph.harness import scenarios
    from astra_graph.harness.cases import Case, make_case
    from astra_graph.harness.compare import (
        RATIO_FLOOR,
        STATS_MIN_ELEMENTS,
        output_error,
        precision_problem,
    )
    from astra_graph.harness.launch import LaunchError, load_kernel, synchronize
    from astra_graph.harness.plan import plan_cases
    from astra_graph.kernel.catalog import resolve
    from astra_graph.kernel.contract import SUITE_NAMES
    from astra_graph.kernel.header import load_implementation

    spec, _ = resolve(op)
    contract = spec.contract
    listed = kernels_of(spec)
    impls = {label: load_implementation(path, contract) for label, _, path in listed}
    loaded = {
        (label, dtype): load_kernel(spec, impls[label], dtype)
        for label, _, _ in listed
        for dtype in contract.dtypes
    }

    def supported(dims: Any) -> bool:
        return all(kernel.unsupported(dims) is None for kernel in loaded.values())

    rng = cupy.random.default_rng(seed)
    cases = plan_cases(spec, SUITE_NAMES, [], np.random.default_rng(seed), supported=supported)
    written = [a for a in contract.args if a.written]
    tallies = {
        (label, dtype, arg.name): Tally()
        for label, _, _ in listed
        for dtype in contract.dtypes
        for arg in written
    }
    failures: list[str] = []
    started = time.monotonic()
    for case in cases:
        data = make_case(spec, case.dims, case.dtype, rng, case.params)
        scenarios.apply(spec, data.arrays, case.dtype, rng)
        inputs = [a for a in contract.args if a.role != "output"]
        pristine = {a.name: data.arrays[a.name].copy() for a in inputs}
        f64 = {
            a.name: contract.dtype_of(a, case.dtype).to_float64(cupy, pristine[a.name])
            for a in inputs
        }
        reference = spec.reference(cupy, f64, data.scalars)
        del f64
        baseline: dict[str, Any] = {}
        for label, _, _ in listed:  # production first: the others are compared with it
            arrays = {
                a.name: pristine[a.name].copy()
                if a.name in pristine
                else cupy.empty_like(data.arrays[a.name])
                for a in contract.args
            }
            try:
                loaded[(label, case.dtype)].launch(
                    Case(data.dims, case.dtype, arrays, data.scalars)
                )
                synchronize()
            except LaunchError as exc:
                failures.append(f"{label} {contract.label(case.dims)} {case.dtype}: {exc}")
                continue
            for arg in written:
                before = pristine.get(arg.name) if arg.role == "inout" else None
                result = output_error(
                    contract, arg, case.dtype, arrays[arg.name], reference[arg.name], before
                )
                if label == "production":
                    baseline[arg.name] = result
                base = baseline.get(arg.name)
                problem = (
                    None if label == "production" else precision_problem(contract, result, base)
                )
                tallies[(label, case.dtype, arg.name)].add(
                    result, base, problem, STATS_MIN_ELEMENTS, RATIO_FLOOR
                )
            del arrays
        del data, pristine, reference
        cupy.get_default_memory_pool().free_all_blocks()
    kinds = {label: kind for label, kind, _ in listed}
    rows = [
        {"kernel": label, "kind": kinds[label], "dtype": dtype, "output": name, **t.summary()}
        for (label, dtype, name), t in tallies.items()
    ]
    return {
        "cases": len(cases),
        "shapes": sorted({contract.label(c.dims) for c in cases}),
        "seconds": round(time.monotonic() - started, 1),
        "launch_failures": failures,
        "kernels": rows,
    }


def summarise(op_result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per dtype and output: the range over correct kernels of each figure, and each lossy one."""
    rows = op_result["kernels"]
    table = []
    for dtype, output in sorted({(r["dtype"], r["output"]) for r in rows}):
        group = [r for r in rows if r["dtype"] == dtype and r["output"] == output]
        correct = [r for r in group if r["kind"] != "lossy"]
        entry: dict[str, Any] = {"dtype": dtype, "output": output, "correct_kernels": len(correct)}
        for key in (*STATISTICS, *RULE_FIGURES):
            # production against itself is no measurement of a rule's figure
            values = [r[key] for r in correct if r["kernel"] != "production" or key in STATISTICS]
            entry[f"correct_{key}"] = [min(values), max(values)] if values else None
        entry["correct_rejected"] = [r["kernel"] for r in correct if r["rejected_cases"]]
        entry["lossy"] = {
            r["kernel"]: {k: r[k] for k in (*STATISTICS, *RULE_FIGURES, "rejected_cases")}
            for r in group
            if r["kind"] == "lossy"
        }
        table.append(entry)
    return table


def _gpu_slug(name: str) -> str:
    match = re.search(r"\b([A-Z]\d{2,4})\b", name)
    return match[1].lower() if match else "gpu"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ops", nargs="*", default=list(OPS), help="operations (default: all)")
    parser.add_argument("--seed", type=int, default=20261123, help="inputs and random shapes")
    parser.add_argument("--out", type=Path, help="JSON file (default: benchmarks/results/...)")
    args = parser.parse_args(argv)
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    device = name.decode() if isinstance(name, bytes) else str(name)
    date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out = args.out or (
        ROOT
        / "benchmarks"
        / "results"
        / f"correct-kernel-errors-{_gpu_slug(device)}-{date[:10]}.json"
    )
    results: dict[str, Any] = {
        "benchmark": "correct_kernel_errors",
        "device": device,
        "date": date,
        "commit": git_commit(),
        "seed": args.seed,
        "units": "error / allowed, allowed = atol + rtol * |reference| (the contract's tolerance)",
        "ops": {},
    }
    for op in args.ops:
        measured = measure(op, args.seed)
        results["ops"][op] = {**measured, "summary": summarise(measured)}
        out.write_text(json.dumps(results, indent=1))  # a run cut short keeps what it finished
        print(f"{op}: {measured['cases']} cases in {measured['seconds']} s", flush=True)
        for entry in results["ops"][op]["summary"]:
            low, high = entry["correct_exact_fraction"]
            print(
                f"  {entry['dtype']:<9} {entry['output']:<9} correct ({entry['correct_kernels']}): "
                f"exact {low:.4f}..{high:.4f} "
                f"drop<={entry['correct_exact_drop'][1]:.4f} "
                f"bias diff<={entry['correct_bias_diff'][1]:.4f} "
                f"toward-zero diff<={entry['correct_magnitude_bias_diff'][1]:.4f} "
                f"({entry['correct_bias_sigmas'][1]:.1f} se) "
                f"mean/floor<={entry['correct_mean_vs_floor'][1]:.2f} "
                f"rejected: {entry['correct_rejected'] or 'none'}"
            )
            for label, lossy in entry["lossy"].items():
                print(
                    f"    lossy {label:<26} exact {lossy['exact_fraction']:.4f} "
                    f"drop {lossy['exact_drop']:.4f} bias diff {lossy['bias_diff']:.4f} "
                    f"toward-zero diff {lossy['magnitude_bias_diff']:.4f} "
                    f"({lossy['bias_sigmas']:.1f} se) mean/floor {lossy['mean_vs_floor']:.2f} "
                    f"rejected cases {lossy['rejected_cases']}"
                )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
