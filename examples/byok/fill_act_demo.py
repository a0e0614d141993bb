"""The decisions `astra new act_demo` leaves to the user, for the activation example, as a script.

Used by gpu_check.sh to time a new operation from `astra new` to its first `astra optimize`:
the contract takes silu_and_mul's shapes, suites and tolerances, the reference is silu * up,
and the header picks the functor and the launch.
"""

import re
import sys
from pathlib import Path

folder = Path(sys.argv[1])
contract = (folder / "contract.toml").read_text()
contract = contract.replace('summary = "TODO: what the kernel computes"', 'summary = "silu(x) * y"')
contract = re.sub(r'bytes_moved = ".*"', 'bytes_moved = "3 * tokens * d * elem_bytes"', contract)
contract = contract.replace("[dims.d]", "[dims.tokens]\nmin = 1\n\n[dims.d]")
contract = contract.replace('min = 1\ndescription = "TODO"', "min = 8\nmultiple_of = 8")
contract = contract.replace(
    'shape = ["d"]  # TODO: the real shape\nrole = "inout"',
    'shape = ["tokens", "d"]\nrole = "output"',
    1,
)
contract = contract.replace(
    'shape = ["d"]  # TODO: the real shape\nrole = "input"',
    'shape = ["tokens", "2 * d"]\nrole = "input"',
    1,
)
shapes = "[{ tokens = 16, d = 4096 }, { tokens = 256, d = 11008 }, { tokens = 2048, d = 14336 }]"
contract = re.sub(r"tuning = \[.*\]", f"tuning = {shapes}", contract)
contract = re.sub(
    r"heldout = \[.*\]",
    "heldout = [{ tokens = 7, d = 3584 }, { tokens = 333, d = 8192 }]",
    contract,
)
(folder / "contract.toml").write_text(contract)
(folder / "reference.py").write_text(
    "def act_demo(xp, inputs, params):\n"
    "    x = inputs['input']\n"
    "    d = x.shape[-1] // 2\n"
    "    a, b = x[:, :d], x[:, d:]\n"
    "    with __import__('numpy').errstate(over='ignore'):\n"
    "        return {'out': a / (1.0 + xp.exp(-a)) * b}\n"
)
header = (folder / "production.cu").read_text()
header = header.replace("<T, ActFn, act_first>", "<T, byok::SiluFunctor<T>, true>")
assert "SiluFunctor" in header, header
header = header.replace("// astra: grid = d", "// astra: grid = tokens").replace(
    "// astra: block = 256", "// astra: block = min(d, 1024)"
)
(folder / "production.cu").write_text(header)
