"""Finding operations: the search path, listing every operation, resolving a kernel name.

Operations are folders holding ``contract.toml``. They are looked for, in order, in the folders
given with ``--path`` (:func:`set_search_dirs`), in :data:`PATH_VARIABLE` (``os.pathsep``
separated), then in the shipped ``kernels/``. An operation is known by its contract's ``name``,
both when listed and when resolved (a folder's own name only stands in for a contract too broken
to give one). The first folder on the path holding a name wins, so ``--path`` takes precedence;
every later folder with the same name is reported by :func:`shadowed`, one line each, rather than
listed twice. A path entry that is a file, or names nothing, is an error naming it. Listing
never stops at a broken operation: :func:`scan` gives every loadable one and one line per
broken one.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from astra_graph.kernel.contract import (
    CONTRACT_FILE,
    ContractError,
    OperationSpec,
    load_contract,
    read_text,
)
from astra_graph.kernel.header import Implementation, load_implementation, parse_header_lines

PATH_VARIABLE = "ASTRA_KERNEL_PATH"
DEFAULT_IMPLEMENTATION = "production"

_extra_dirs: list[Path] = []
"""Folders from ``--path``, searched before the environment variable and ``kernels/``."""


def kernels_root() -> Path:
    """``kernels/`` as shipped in the wheel, or the source checkout's top-level folder."""
    packaged = Path(__file__).parents[1] / "kernels"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[3] / "kernels"


def set_search_dirs(dirs: list[str] | None) -> None:
    """The ``--path`` folders, searched first; a folder that does not exist is an error."""
    folders = [Path(raw).expanduser() for raw in dirs or []]
    for raw, folder in zip(dirs or [], folders, strict=True):
        if not folder.is_dir():
            raise ContractError(f"--path: {raw!r} is not a folder")
    _extra_dirs[:] = folders


def search_dirs() -> list[Path]:
    """The folders searched for operations, first match first. An entry of
    :data:`PATH_VARIABLE` that is not a folder is a ContractError naming it."""
    env = [p for p in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if p]
    for raw in env:
        folder = Path(raw).expanduser()
        if not folder.is_dir():
            what = "a file" if folder.exists() else "not found"
            raise ContractError(
                f"{PATH_VARIABLE}: {raw!r} is {what}; expected folders of operations, "
                f"separated by {os.pathsep!r}"
            )
    ordered = [*_extra_dirs, *(Path(p).expanduser() for p in env), kernels_root()]
    return list(dict.fromkeys(p.resolve() for p in ordered if p.is_dir()))


def _contract_name(folder: Path) -> str:
    """The ``name`` of the folder's contract, read without loading the rest; the folder's own
    name when the file cannot give one (``scan`` then reports what is broken)."""
    try:
        with (folder / CONTRACT_FILE).open("rb") as file:
            name = tomllib.load(file).get("name")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return folder.name
    return name if isinstance(name, str) and name else folder.name


def _by_name() -> tuple[dict[str, Path], list[str]]:
    """(the first folder of each operation name on the search path, one line per later one)."""
    found: dict[str, Path] = {}
    hidden: list[str] = []
    for root in search_dirs():
        folders = [root] if (root / CONTRACT_FILE).is_file() else []  # --path naming one op
        folders += [c.parent for c in sorted(root.glob(f"*/{CONTRACT_FILE}"))]
        for folder in folders:
            name = _contract_name(folder)
            first = found.setdefault(name, folder)
            if first != folder:
                hidden.append(
                    f"{folder}: operation {name!r} is hidden by {first} (earlier on the path)"
                )
    return found, hidden


def operation_folders() -> list[Path]:
    """Every operation folder on the search path, one per contract name (the first found)."""
    found, _ = _by_name()
    return [found[name] for name in sorted(found)]


def shadowed() -> list[str]:
    """One line for each operation folder hidden by an earlier one of the same name."""
    return _by_name()[1]


def scan() -> tuple[list[OperationSpec], list[str]]:
    """(every operation that loads, one line for each that does not)."""
    specs, broken = [], []
    for folder in operation_folders():
        try:
            specs.append(load_contract(folder))
        except ContractError as exc:
            broken.append(str(exc))
    return specs, broken


def operations() -> list[OperationSpec]:
    """Every operation on the search path; raises ContractError for the first broken one."""
    specs, broken = scan()
    if broken:
        raise ContractError(broken[0])
    return specs


def find_operation(name: str) -> Path | None:
    """The folder of the operation whose contract is called ``name`` (as listed), or None."""
    found, _ = _by_name()
    return found.get(name)


def contract_folder_of(path: Path) -> Path:
    """The operation folder of a ``.cu`` file: its own, or the one its header names.

    A file outside any operation folder says which operation it implements with
    ``// astra: operation = NAME`` (looked up on the search path).
    """
    folder = path.resolve().parent
    if (folder / CONTRACT_FILE).is_file():
        return folder
    named = parse_header_lines(read_text(path, "implementation"), str(path)).get("operation")
    if not named:
        raise ContractError(
            f"{path}: no {CONTRACT_FILE} beside it and no '// astra: operation = NAME' line"
        )
    found = find_operation(named)
    if found is None:
        raise ContractError(f"{path}: header.operation: no operation {named!r} on the search path")
    return found


Target = tuple[OperationSpec, Implementation]
"""A resolved kernel: its operation and the implementation (``resolve``'s answer), passed on
as it is so that nothing resolves the same kernel twice."""


def resolve(target: str | Path) -> Target:
    """A kernel named by path (``kernels/op/x.cu``), by ``op/impl``, or by operation name.

    A bare operation name means its ``production.cu``. A ``.cu`` path finds its contract in its
    own folder or names its operation (:func:`contract_folder_of`). Names are looked up on the
    search path (:func:`search_dirs`).
    """
    text = str(target)
    path = Path(text)
    if path.suffix == ".cu":
        if not path.is_file():
            raise ContractError(f"{path}: implementation file not found")
        spec = load_contract(contract_folder_of(path))
        return spec, load_implementation(path, spec.contract)
    if path.is_dir():
        spec = load_contract(path)
        return spec, load_implementation(path / f"{DEFAULT_IMPLEMENTATION}.cu", spec.contract)
    op, _, impl = text.partition("/")
    folder = find_operation(op)
    if folder is None:
        known = ", ".join(p.name for p in operation_folders())
        where = ", ".join(str(d) for d in search_dirs())
        raise ContractError(
            f"{text}: no such kernel file or operation (operations: {known}; searched {where})"
        )
    spec = load_contract(folder)
    impl_path = folder / f"{impl or DEFAULT_IMPLEMENTATION}.cu"
    return spec, load_implementation(impl_path, spec.contract)
