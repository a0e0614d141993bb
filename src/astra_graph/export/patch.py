"""``astra export --format patch``: a unified diff that puts the run's kernel into the framework's
own launcher, ready to open as a pull request.

The framework file and its launcher come from ``[source]`` of ``framework.toml`` (the
:class:`~astra_graph.export.framework.FrameworkSource` record ``astra import`` writes). The
patch adds, just above the launcher:

- the run's kernel source once per tunable setting the dispatch table uses, each copy in its own
  namespace with the tunables ``#define``d around it (the harness passes them as ``-D``; a
  framework builds the file once, so every setting needs its own instantiation);
- ``astra_<op>::launch(...)``: a host function taking the launcher's own arguments, which checks
  the GPU, dtypes, contiguity, alignment and the verified domain, picks the setting for the
  shape's bucket, computes the geometry and launches on ``at::cuda::getCurrentCUDAStream()``,
  returning false for anything it does not cover;

and one line at the top of the launcher, ``if (astra_<op>::launch(args...)) return;``, so every
shape outside the domain still takes the framework's own path. The contract's expressions are
written as C++ over ``int64_t`` with Python's floor division and modulo (helpers in the patch),
so the geometry equals what the harness verified.

``--check`` compiles the patched file with nvcc against torch's headers and the framework's
include folders (``[source] include_dirs``); the result is one line.
"""

from __future__ import annotations

import ast
import difflib
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

from astra_graph.export.dispatch_source import ExportError, dim_sources, verified_domain
from astra_graph.export.torch_package import FinishedRun, settings_used
from astra_graph.framework.device import TORCH_TYPES_BEGIN, TORCH_TYPES_END, framework_type_map
from astra_graph.harness.buckets import DECODE_MAX_ROWS, LARGEST_ROW_CLASS, ROW_CLASSES
from astra_graph.kernel import expr
from astra_graph.kernel.dtypes import DTYPES, TYPE_PARAMETER
from astra_graph.kernel.expr import split_top_level
from astra_graph.kernel.header import DEFAULT_STD

NVCC_TIMEOUT_S = 600
"""A torch-header build of one file takes about a minute on the H100 machine; ten is a hang."""
DEFAULT_SMEM_LIMIT = 48 * 1024
_SCALAR_TYPES = {
    "float16": "at::ScalarType::Half",
    "bfloat16": "at::ScalarType::BFloat16",
    "float32": "at::ScalarType::Float",
    "float64": "at::ScalarType::Double",
    "int32": "at::ScalarType::Int",
    "int64": "at::ScalarType::Long",
    "uint8": "at::ScalarType::Byte",
    "int8": "at::ScalarType::Char",
    "bool": "at::ScalarType::Bool",
}
_C_TYPES = {"int32": "int32_t", "int64": "int64_t", "float32": "float", "float64": "double"}
HELPERS = """\
inline int64_t floordiv(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));  // Python's //, as the harness computes
}
inline int64_t mod(int64_t a, int64_t b) { return a - floordiv(a, b) * b; }
inline int64_t ceil_div(int64_t a, int64_t b) { return -floordiv(-a, b); }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
inline int64_t power(int64_t a, int64_t b) { int64_t r = 1; while (b-- > 0) r *= a; return r; }
inline double log2(double x) { return std::log2(x); }"""
PARAM_TYPE = """\
// the type of parameter I of a kernel (through its address): each pointer argument is cast to
// the kernel's own pointer type
template <typename F, size_t I> struct astra_param;
template <size_t I, typename... A> struct astra_param<void (*)(A...), I> {
  using type = typename std::tuple_element<I, std::tuple<A...>>::type;
};
template <typename F, size_t I> using astra_param_t = typename astra_param<F, I>::type;"""
FRAMEWORK_TYPES_GUARD = "ASTRA_FRAMEWORK_TYPES"
"""The include guard around ``astra_framework_t`` in a patched file (two patched ops, one map)."""


class _Cpp:
    """An :mod:`astra_graph.kernel.expr` expression as C++ over ``int64_t`` names."""

    def __call__(self, text: str | int) -> str:
        if isinstance(text, int):
            return f"int64_t({text})"
        return self.node(expr.parse(text).body)

    def node(self, node: ast.AST) -> str:
        match node:
            case ast.Constant(value=int() as value):
                return f"int64_t({value})"
            case ast.Constant(value=float() as value):
                return repr(value)
            case ast.Name(id=name):
                return name
            case ast.UnaryOp(op=ast.USub(), operand=operand):
                return f"(-{self.node(operand)})"
            case ast.UnaryOp(op=ast.UAdd(), operand=operand):
                return self.node(operand)
            case ast.BinOp(left=left, op=op, right=right):
                a, b = self.node(left), self.node(right)
                functions = {ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Pow: "power"}
                if type(op) in functions:
                    return f"{functions[type(op)]}({a}, {b})"
                if isinstance(op, ast.Div):
                    return f"(double({a}) / double({b}))"
                symbol = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}[type(op)]
                return f"({a} {symbol} {b})"
            case ast.Compare(left=left, ops=ops, comparators=comparators):
                symbols = {
                    ast.Eq: "==",
                    ast.NotEq: "!=",
                    ast.Lt: "<",
                    ast.LtE: "<=",
                    ast.Gt: ">",
                    ast.GtE: ">=",
                }
                parts, current = [], self.node(left)
                for cmp, right in zip(ops, comparators, strict=True):
                    nxt = self.node(right)
                    parts.append(f"({current} {symbols[type(cmp)]} {nxt})")
                    current = nxt
                return f"int64_t({' && '.join(parts)})"
            case ast.BoolOp(op=op, values=values):
                joiner = " && " if isinstance(op, ast.And) else " || "
                return f"int64_t({joiner.join(f'bool({self.node(v)})' for v in values)})"
            case ast.Call(func=ast.Name(id=name), args=args):
                items = [self.node(a) for a in args]
                if name in ("min", "max"):
                    out = items[0]
                    for item in items[1:]:
                        out = f"std::{name}<int64_t>({out}, {item})"
                    return out
                if name == "select" and len(items) == 3:  # C++'s own `c ? a : b`; a function
                    # named select would meet POSIX select() of <sys/select.h> in torch's headers
                    return f"(bool({items[0]}) ? {items[1]} : {items[2]})"
                return f"{name}({', '.join(items)})"
        raise ExportError(f"cannot write {ast.unparse(node)!r} as C++")

    def dims3(self, text: str | int) -> str:
        """``dim3(x, y, z)`` of a grid or block expression (a number or a tuple)."""
        body = None if isinstance(text, int) else expr.parse(text).body
        items = body.elts if isinstance(body, ast.Tuple) else None
        parts = [self.node(e) for e in items] if items else [self(text)]
        return f"dim3({', '.join(f'unsigned({p})' for p in parts)})"


cpp = _Cpp()

_INCLUDE = re.compile(r"^\s*#\s*include\b")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def _launcher_span(text: str, launcher: str, where: str) -> tuple[int, int, list[str]]:
    """(offset of the launcher's definition, offset just after its opening brace, its
    parameter names) in ``text``; raises ExportError when the launcher is not defined there."""
    pattern = re.compile(rf"^[ \t]*(?:[\w:<>&*]+[ \t]+)+{launcher}[ \t]*\(", re.MULTILINE)
    for match in pattern.finditer(text):
        depth, i = 1, match.end()
        while i < len(text) and depth:
            depth += (text[i] == "(") - (text[i] == ")")
            i += 1
        rest = text[i:].lstrip()
        while rest.startswith(("//", "/*")):  # a comment after the parameters (`)  // [..., d]`)
            comment = _COMMENT.match(rest)
            rest = rest[comment.end() if comment else len(rest) :].lstrip()
        if not rest.startswith("{"):
            continue  # a declaration, not the definition
        params = split_top_level(_COMMENT.sub(" ", text[match.end() : i - 1]))
        names = [re.findall(r"[A-Za-z_]\w*", p.split("=")[0])[-1] for p in params if p.strip()]
        return match.start(), text.index("{", i) + 1, names
    raise ExportError(f"{where}: no definition of the launcher {launcher!r} found")


def _without_torch_stand_ins(source: str) -> tuple[list[str], bool]:
    """The source's lines without the stand-ins of torch's element types an imported kernel
    carries for NVRTC (``framework.device``: c10's types, torch's macros), which the framework's
    build takes from torch itself; and whether there were any (then the kernel's entry names
    ``astra_framework_t``, which the patch defines once in torch's terms)."""
    lines, skipping, found = [], False, False
    for line in source.splitlines():
        if line.strip() == TORCH_TYPES_BEGIN:
            skipping = found = True
        elif skipping:
            skipping = line.strip() != TORCH_TYPES_END
        else:
            lines.append(line)
    return lines, found


def entry_function(dtype: str) -> str:
    """The function a kernel copy's namespace defines for the instantiation of ``dtype``."""
    return f"astra_entry_{dtype}"


def kernel_copies(run: FinishedRun) -> tuple[list[str], str]:
    """(the kernel's #include lines, the kernel once per setting in its own namespace).

    Each copy ends with one ``astra_entry_<dtype>()`` per element type returning the address
    of that setting's instantiation, so the entry's names (``fw::silu`` in an imported entry)
    are looked up inside the copy, not in the framework's namespaces of the same names."""
    includes, body = [], []
    lines, stand_ins = _without_torch_stand_ins(run.impl.source)
    for line in lines:
        if _INCLUDE.match(line):
            includes.append(line.strip())
        elif line.strip() != "#pragma once":
            body.append(line)
    copies = []
    if stand_ins:
        copies.append(
            "\n".join(
                [
                    f"#ifndef {FRAMEWORK_TYPES_GUARD}  // once per file, however many ops it has",
                    f"#define {FRAMEWORK_TYPES_GUARD}",
                    framework_type_map().rstrip(),
                    f"#endif  // {FRAMEWORK_TYPES_GUARD}",
                ]
            )
        )
    for i, setting in enumerate(settings_used(run)):
        defines = [f"#define {k} {v}" for k, v in sorted(setting.items())]
        undefines = [f"#undef {k}" for k in sorted(setting)]
        entries = [
            f"inline auto {entry_function(dtype)}() {{ return "
            f"&{run.impl.header.entry_for(DTYPES[dtype], setting).lstrip(':')}; }}"
            for dtype in run.spec.contract.dtypes
        ]
        copies.append(
            "\n".join(
                [
                    f"namespace astra_{run.spec.name}_{i} {{",
                    *defines,
                    *body,
                    *entries,
                    *undefines,
                    f"}}  // namespace astra_{run.spec.name}_{i}",
                ]
            )
        )
    return includes, "\n\n".join(copies)


_CPP_TYPES = {
    "Tensor": "const torch::Tensor&",
    "Tensor!": "const torch::Tensor&",
    "float": "double",
    "int": "int64_t",
}
"""The C++ parameter types of torch's schema types (the launcher's own signature)."""


def dispatcher(run: FinishedRun, arch: str) -> str:
    """``namespace astra_<op> { bool launch(...) }``: the host-side dispatch in C++.

    Written in the order the function runs: the opening and the GPU check, the per-tensor and
    dtype checks, the dims and the verified domain, the bucket's setting, then one ``case`` per
    setting that launches; every step's lines return false for what it does not cover."""
    fw = run.framework
    op = run.spec.name
    tensor_of = {a.name: fw.by_contract()[a.name].name for a in run.spec.contract.args}
    params = [f"{_CPP_TYPES[s.kind]} {s.name}" for s in fw.args]
    major, minor = arch.removeprefix("sm_")[:-1], arch[-1]
    lines = [
        f"namespace astra_{op} {{",
        HELPERS,
        PARAM_TYPE,
        "",
        f"// {op} from astra-graph run {run.result.run_id}: the kernel verified on {arch} for",
        "// the shapes below; false hands the call back to the launcher's own code.",
        f"inline bool launch({', '.join(params)}) {{",
        f"  const at::cuda::OptionalCUDAGuard device_guard(device_of({fw.args[0].name}));",
        "  const auto* props = at::cuda::getCurrentDeviceProperties();",
        f"  if (props->major != {major} || props->minor != {minor}) return false;",
    ]
    lines += _tensor_checks(run, tensor_of)
    lines += _dim_checks(run, tensor_of)
    settings = settings_used(run)
    lines += _setting_choice(run, settings)
    lines.append("  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();")
    lines.append("  switch (setting) {")
    for i, setting in enumerate(settings):
        lines += _setting_case(run, tensor_of, i, setting)
    lines += ["  }", "  return false;", "}", f"}}  // namespace astra_{op}"]
    return "\n".join(lines)


def _tensor_checks(run: FinishedRun, tensor_of: dict[str, str]) -> list[str]:
    """Per tensor: on the GPU, contiguous, aligned as the contract says and of its rank; then
    ``dtype_index`` (the contract dtype of the type-parameter tensor) and every tensor's dtype
    against it, so the launch below can pick the kernel instantiation by index."""
    contract = run.spec.contract
    typed = next((a for a in contract.args if a.dtype == TYPE_PARAMETER), contract.args[0])
    lines = []
    for a in contract.args:
        t = tensor_of[a.name]
        lines.append(
            f"  if (!{t}.is_cuda() || !{t}.is_contiguous() || "
            f"reinterpret_cast<uintptr_t>({t}.data_ptr()) % {a.align} != 0) return false;"
        )
        lines.append(f"  if ({t}.dim() != {len(a.shape)}) return false;")
    lines.append("  int dtype_index = -1;")
    for i, dtype in enumerate(contract.dtypes):
        lines.append(
            f"  if ({tensor_of[typed.name]}.scalar_type() == {_SCALAR_TYPES[dtype]}) "
            f"dtype_index = {i};"
        )
    lines.append("  if (dtype_index < 0) return false;")
    for a in contract.args:
        if a.dtype == TYPE_PARAMETER:
            lines.append(
                f"  if ({tensor_of[a.name]}.scalar_type() != "
                f"{tensor_of[typed.name]}.scalar_type()) return false;"
            )
        else:
            lines.append(
                f"  if ({tensor_of[a.name]}.scalar_type() != {_SCALAR_TYPES[a.dtype]}) "
                "return false;"
            )
    item_sizes = ", ".join(str(DTYPES[d].itemsize) for d in contract.dtypes)
    lines.append(f"  const int64_t item_sizes[] = {{{item_sizes}}};")
    lines.append("  [[maybe_unused]] const int64_t elem_bytes = item_sizes[dtype_index];")
    return lines


def _dim_checks(run: FinishedRun, tensor_of: dict[str, str]) -> list[str]:
    """The dims read from the tensors' sizes, each inside the verified domain, and every size
    equal to the contract's shape over those dims: only verified shapes reach the kernel."""
    spec = run.spec
    lines = []
    for dim, (arg, axis, factor) in dim_sources(spec).items():
        t = tensor_of[arg]
        lines.append(f"  if ({t}.size({axis}) % {factor} != 0) return false;")
        lines.append(f"  const int64_t {dim} = {t}.size({axis}) / {factor};")
    for dim, (low, high, multiple) in verified_domain(spec).items():
        lines.append(
            f"  if ({dim} < {low} || {dim} > {high} || {dim} % {multiple} != 0) return false;"
        )
    for a in spec.contract.args:
        for axis, entry in enumerate(a.shape):
            lines.append(f"  if ({tensor_of[a.name]}.size({axis}) != {cpp(entry)}) return false;")
    return lines


def _setting_choice(run: FinishedRun, settings: list[dict[str, int]]) -> list[str]:
    """The shape's bucket (decode or not, row class by bytes per row, as
    :mod:`astra_graph.harness.buckets` computes it) and ``setting``: the index in ``settings``
    of the dispatch table's verified choice for that bucket, else 0 (the defaults)."""
    contract = run.spec.contract
    rows = next(iter(contract.dims))
    lines = [
        f"  const int64_t rows = std::max<int64_t>({rows}, 1);",
        f"  [[maybe_unused]] const bool decode = rows <= {DECODE_MAX_ROWS};",
        f"  const double row_bytes = double({cpp(contract.bytes_moved)}) / double(rows);",
    ]
    classes = ROW_CLASSES
    chain = " : ".join(f"row_bytes < {limit} ? {i}" for i, (limit, _) in enumerate(classes))
    lines.append(f"  [[maybe_unused]] const int row_class = {chain} : {len(classes)};")
    class_index = {name: i for i, (_, name) in enumerate(classes)} | {
        LARGEST_ROW_CLASS: len(classes)
    }
    lines.append("  int setting = 0;  // the implementation's defaults")
    for chosen in run.dispatch.dispatch if run.dispatch else []:
        if not chosen.verified:
            continue
        phase, row_class = chosen.bucket.split("/")
        index = settings.index({**settings[0], **chosen.tunables})
        lines.append(
            f"  if ({'' if phase == 'decode' else '!'}decode && row_class == "
            f"{class_index[row_class]}) setting = {index};  // {chosen.bucket}"
        )
    return lines


def _setting_case(
    run: FinishedRun, tensor_of: dict[str, str], i: int, setting: dict[str, int]
) -> list[str]:
    """``case i``: the setting's tunables as constants, the header's requirements, the launch
    geometry, and per dtype the launch of that setting's kernel copy with the bound arguments."""
    contract, header = run.spec.contract, run.impl.header
    lines = [f"    case {i}: {{"]
    for name, value in sorted(setting.items()):
        lines.append(f"      [[maybe_unused]] const int64_t {name} = {value};")
    for clause in header.requires:
        lines.append(f"      if (!({cpp(clause)})) return false;")
    lines.append(f"      const dim3 grid = {cpp.dims3(header.grid)};")
    lines.append(f"      const dim3 block = {cpp.dims3(header.block)};")
    lines.append(f"      const int64_t smem = {cpp(header.smem)};")
    for d, dtype in enumerate(contract.dtypes):
        lines += [
            f"      if (dtype_index == {d}) {{",
            f"        auto kernel = astra_{run.spec.name}_{i}::{entry_function(dtype)}();",
            f"        if (smem > {DEFAULT_SMEM_LIMIT}) cudaFuncSetAttribute(kernel, "
            "cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));",
            f"        kernel<<<grid, block, smem, stream>>>"
            f"({', '.join(_kernel_args(run, tensor_of, dtype))});",
            "        return true;",
            "      }",
        ]
    lines.append("      return false;")
    lines.append("    }")
    return lines


def _kernel_args(run: FinishedRun, tensor_of: dict[str, str], dtype: str) -> list[str]:
    """The kernel's arguments in binding order: tensors as typed pointers, a scalar with a
    default from the launcher's own argument, and every computed value from the dims."""
    contract = run.spec.contract
    by_contract = run.framework.by_contract()
    scalars = {s.name: s for s in contract.scalars}
    args = []
    for index, b in enumerate(run.impl.bindings):
        if b.kind == "tensor":
            # the kernel's own pointer type, whatever it spells the element (__half, c10::Half)
            param = f"astra_param_t<decltype(kernel), {index}>"
            address = f"{tensor_of[b.name]}.data_ptr()"
            if b.value is not None:  # an address moved by whole bytes
                address = f"static_cast<char*>({address}) + static_cast<int64_t>({cpp(b.value)})"
            args.append(f"reinterpret_cast<{param}>({address})")
        elif b.kind == "null":
            args.append("nullptr")
        elif b.kind == "scalar" and scalars[b.name].default is not None:
            args.append(f"static_cast<{_C_TYPES[b.dtype or 'int32']}>({by_contract[b.name].name})")
        else:
            computed = b.value if b.kind == "expr" else scalars[b.name].value
            assert computed is not None  # computed from the dims
            args.append(f"static_cast<{_C_TYPES[b.dtype or 'int32']}>({cpp(computed)})")
    return args


def patched_text(run: FinishedRun, original: str, where: str, arch: str) -> str:
    """The framework file with the kernel, the dispatcher and the launcher's first line added."""
    source = run.framework.source
    assert source is not None  # write_patch checked
    start, body, names = _launcher_span(original, source.launcher, where)
    if len(names) != len(run.framework.args):
        raise ExportError(
            f"{where}: launcher {source.launcher} takes {len(names)} arguments, the op "
            f"{run.framework.qualname} {len(run.framework.args)}"
        )
    includes, copies = kernel_copies(run)
    wanted = [
        "#include <ATen/cuda/CUDAContext.h>",
        "#include <c10/cuda/CUDAGuard.h>",
        "#include <cuda_fp16.h>",
        "#include <cuda_bf16.h>",
        "#include <cmath>",
        "#include <cstdint>",
        "#include <algorithm>",
        "#include <tuple>",
        *includes,
    ]
    added_includes = [i for i in dict.fromkeys(wanted) if i not in original]
    block = "\n".join(
        [
            f"// --- astra-graph: {run.spec.name}, run {run.result.run_id} "
            "(astra export --format patch) ---",
            *added_includes,
            "",
            copies,
            "",
            dispatcher(run, arch),
            f"// --- end astra-graph: {run.spec.name} ---",
            "",
            "",
        ]
    )
    call = f"\n  if (astra_{run.spec.name}::launch({', '.join(names)})) return;"
    return original[:start] + block + original[start:body] + call + original[body:]


def write_patch(run: FinishedRun, root: Path, out: Path, arch: str) -> tuple[Path, Path]:
    """Write ``<out>/<op>.patch`` (a unified diff, paths relative to ``root``) and the patched
    file under ``<out>/patched/``; returns both paths."""
    source = run.framework.source
    if source is None:
        raise ExportError(
            f"{run.spec.folder}/framework.toml: no [source] (file, launcher, kernel): the op "
            "was not imported from a framework file"
        )
    path = root / source.file
    if not path.is_file():
        raise ExportError(f"--framework-root: {path} not found ([source] file = {source.file!r})")
    original = path.read_text()
    patched = patched_text(run, original, str(path), arch)
    diff = difflib.unified_diff(
        original.splitlines(keepends=True),
        patched.splitlines(keepends=True),
        fromfile=f"a/{source.file}",
        tofile=f"b/{source.file}",
    )
    out.mkdir(parents=True, exist_ok=True)
    diff_path = out / f"{run.spec.name}.patch"
    diff_path.write_text("".join(diff))
    patched_path = out / "patched" / source.file
    patched_path.parent.mkdir(parents=True, exist_ok=True)
    patched_path.write_text(patched)
    return diff_path, patched_path


def check_patch(run: FinishedRun, root: Path, patched: Path, arch: str) -> str | None:
    """Compile the patched file with nvcc and torch's headers; None when it builds, else one
    line saying why not. A missing nvcc or torch is an ExportError (a missing tool, not a
    failed build)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise ExportError("--check: nvcc not found on PATH")
    try:
        from torch.utils.cpp_extension import include_paths
    except ImportError:
        raise ExportError("--check: torch is not installed; its headers build the file") from None
    source = run.framework.source
    assert source is not None  # write_patch checked
    command = [
        nvcc,
        "-c",
        str(patched),
        "-o",
        str(patched.with_suffix(".o")),
        f"-std={run.impl.header.std or DEFAULT_STD}",  # the build's, as the header keeps it
        f"-arch={arch}",
        "--expt-relaxed-constexpr",
        *(f"-I{p}" for p in include_paths()),
        f"-I{sysconfig.get_paths()['include']}",
        *(f"-I{root / d}" for d in source.include_dirs),
        f"-I{(root / source.file).parent}",
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"nvcc took over {NVCC_TIMEOUT_S} s"
    if done.returncode:
        errors = [line for line in done.stderr.splitlines() if "error" in line]
        return f"nvcc failed: {(errors or done.stderr.splitlines() or ['?'])[0]}"
    return None
