"""The measurements behind the error rule's thresholds (harness.compare), on a GPU.

For each operation the production kernel (default tunables) is the baseline. Every correct
variant available (each shipped implementation under each of its tunable settings, and every
kernel in ``tests/fixtures/correct_kernels/<op>/``) and, for contrast, the bad fixtures that
lose precision, run on the same inputs as the baseline (the tuning suite's shapes, both dtypes,
special values and varied rows as in a check). Per kernel the worst over shapes of: the drop of
the correctly rounded fraction below the baseline's, the difference of mean signed error and of
mean error along the reference's sign (in units of the tolerance, and in standard errors), and
the mean-error ratio. Results: ``benchmarks/results/precision_stats-<date>.json`` with device,
date and commit. Usage: ``python benchmarks/precision_stats.py`` on a GPU host.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any

from astra_graph.store.provenance import git_commit

ROOT = Path(__file__).resolve().parents[1]
OPS = ("silu_and_mul", "fused_add_rmsnorm", "merge_attn_states_lse")
PRECISION_FIXTURES = (
    "silu_double_rounding",
    "rmsnorm_residual_toward_zero",
    "rmsnorm_half_sum_of_squares",
    "low_precision",
)


def _variants(spec: Any) -> list[tuple[str, Path, dict[str, int], bool]]:
    """(label, file, tunables, correct) for every kernel to measure."""
    from astra_graph.kernel.header import load_implementation

    found = []
    for path in spec.implementations():
        impl = load_implementation(path, spec.contract)
        for config in impl.header.configurations():
            label = f"{path.stem}[{','.join(f'{k}={v}' for k, v in config.items())}]"
            found.append((label, path, config, True))
    for path in sorted((ROOT / "tests/fixtures/correct_kernels" / spec.name).glob("*.cu")):
        found.append((f"correct/{path.stem}", path, {}, True))
    for path in sorted((ROOT / "tests/fixtures/bad_kernels").glob("*.cu")):
        text = path.read_text()
        op = re.search(r"^// op: (\w+)", text, re.M)
        name = (
            op[1]
            if op
            else ("fused_add_rmsnorm" if path.name.startswith("rmsnorm") else "silu_and_mul")
        )
        if path.stem in PRECISION_FIXTURES and name == spec.name:
            found.append((f"bad/{path.stem}", path, {}, False))
    return found


def measure(op: str) -> list[dict[str, Any]]:
    import cupy
    import numpy as np

    from astra_graph.harness import scenarios
    from astra_graph.harness.cases import Case, make_case
    from astra_graph.harness.compare import output_error
    from astra_graph.harness.launch import load_kernel, synchronize
    from astra_graph.harness.plan import draw_params
    from astra_graph.kernel.catalog import resolve
    from astra_graph.kernel.header import load_implementation

    spec, baseline_impl = resolve(op)
    contract = spec.contract
    rng = cupy.random.default_rng(20261123)
    planner = np.random.default_rng(20261123)
    rows = []
    for label, path, config, correct in _variants(spec):
        impl = load_implementation(path, contract)
        worst: dict[str, float] = {
            "exact_drop": 0.0,
            "bias": 0.0,
            "magnitude_bias": 0.0,
            "bias_sigmas": 0.0,
            "mean_ratio": 0.0,
        }
        failed = ""
        for dtype in contract.dtypes:
            cand = load_kernel(spec, impl, dtype, config)
            base = load_kernel(spec, baseline_impl, dtype)
            for dims in contract.suite("tuning"):
                if cand.unsupported(dims) or base.unsupported(dims):
                    continue
                data = make_case(spec, dims, dtype, rng, draw_params(spec, {}, planner))
                scenarios.apply(spec, data.arrays, dtype, rng)
                inputs = {a.name: data.arrays[a.name] for a in contract.args if a.role != "output"}
                f64 = {
                    n: contract.dtype_of(a, dtype).to_float64(cupy, inputs[n])
                    for a in contract.args
                    if (n := a.name) in inputs
                }
                reference = spec.reference(cupy, f64, data.scalars)
                errors = []
                for kernel in (base, cand):
                    arrays = {
                        a.name: (
                            inputs[a.name].copy()
                            if a.name in inputs
                            else cupy.empty_like(data.arrays[a.name])
                        )
                        for a in contract.args
                    }
                    kernel.launch(Case(data.dims, dtype, arrays, data.scalars))
                    synchronize()
                    errors.append(
                        {
                            a.name: output_error(
                                contract, a, dtype, arrays[a.name], reference[a.name]
                            )
                            for a in contract.args
                            if a.written
                        }
                    )
                for name, b in errors[0].items():
                    c = errors[1][name]
                    if c.finding is not None:
                        failed = failed or f"{contract.label(dims)} {dtype} {name}: outside"
                    if min(b.measured, c.measured) < 1024:
                        continue
                    se = math.hypot(b.bias_std_err, c.bias_std_err) or 1e-12
                    worst["exact_drop"] = max(
                        worst["exact_drop"], b.exact_fraction - c.exact_fraction
                    )
                    worst["bias"] = max(worst["bias"], abs(c.bias - b.bias))
                    worst["magnitude_bias"] = max(
                        worst["magnitude_bias"], abs(c.magnitude_bias - b.magnitude_bias)
                    )
                    worst["bias_sigmas"] = max(
                        worst["bias_sigmas"],
                        abs(c.bias - b.bias) / se,
                        abs(c.magnitude_bias - b.magnitude_bias) / se,
                    )
                    worst["mean_ratio"] = max(
                        worst["mean_ratio"], c.mean_ratio / max(b.mean_ratio, 1e-12)
                    )
                del data, inputs, f64, reference
            cupy.get_default_memory_pool().free_all_blocks()
        rows.append({"kernel": label, "correct": correct, "outside_tolerance": failed, **worst})
        print(
            f"{op:<22} {label:<48} {'correct' if correct else 'BAD    '} "
            f"exact drop {worst['exact_drop']:+.4f} bias {worst['bias']:.4f} "
            f"toward-zero {worst['magnitude_bias']:.4f} ({worst['bias_sigmas']:.1f} se) "
            f"mean x{worst['mean_ratio']:.2f} {failed}",
            flush=True,
        )
    return rows


def main() -> int:
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results = {
        "benchmark": "precision_stats",
        "device": name.decode() if isinstance(name, bytes) else str(name),
        "date": date,
        "commit": git_commit(),
        "ops": {},
    }
    out = ROOT / "benchmarks" / "results" / f"precision_stats-{date[:10]}.json"
    for op in sys.argv[1:] or OPS:
        results["ops"][op] = measure(op)
        out.write_text(json.dumps(results, indent=2))
    correct = [r for rows in results["ops"].values() for r in rows if r["correct"]]
    summary = {
        k: max(r[k] for r in correct)
        for k in ("exact_drop", "bias", "magnitude_bias", "bias_sigmas", "mean_ratio")
    }
    results["worst_correct"] = summary
    out.write_text(json.dumps(results, indent=2))
    print("worst over correct kernels:", json.dumps(summary))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
