"""Finding operations: the search path, listing every operation, resolving a kernel name.

Operations are folders holding ``contract.toml``. They are looked for, in order, in the folders
given with ``--path`` (:func:`set_search_dirs`), in :data:`PATH_VARIABLE` (``os.pathsep``
separated), then in the shipped ``kernels/``. The first folder holding an operation's name wins.
Listing never stops at a broken operation: :func:`scan` gives every loadable one and one line
per broken one.
"""

from __future__ import annotations

import os
from pathlib import Path

from astra_graph.contract import (
    CONTRACT_FILE,
    ContractError,
    OperationSpec,
    load_contract,
    read_text,
)
from astra_graph.header import Implementation, load_implementation, parse_header_lines

PATH_VARIABLE = "ASTRA_KERNEL_PATH"
DEFAULT_IMPLEMENTATION = "production"

_extra_dirs: list[Path] = []
"""Folders from ``--path``, searched before the environment variable and ``kernels/``."""


def kernels_root() -> Path:
    """``kernels/`` as shipped in the wheel, or the source checkout's top-level folder."""
    packaged = Path(__file__).parent / "kernels"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "kernels"


def set_search_dirs(dirs: list[str] | None) -> None:
    """The ``--path`` folders, searched first; a folder that does not exist is an error."""
    folders = [Path(raw).expanduser() for raw in dirs or []]
    for raw, folder in zip(dirs or [], folders, strict=True):
        if not folder.is_dir():
            raise ContractError(f"--path: {raw!r} is not a folder")
    _extra_dirs[:] = folders


def search_dirs() -> list[Path]:
    """The folders searched for operations, first match first."""
    env = [Path(p).expanduser() for p in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if p]
    ordered = [*_extra_dirs, *env, kernels_root()]
    return list(dict.fromkeys(p.resolve() for p in ordered if p.is_dir()))


def operation_folders() -> list[Path]:
    """Every operation folder on the search path, one per name (the first one found)."""
    found: dict[str, Path] = {}
    for root in search_dirs():
        if (root / CONTRACT_FILE).is_file():  # a --path naming an operation folder itself
            found.setdefault(root.name, root)
        for contract in sorted(root.glob(f"*/{CONTRACT_FILE}")):
            found.setdefault(contract.parent.name, contract.parent)
    return [found[name] for name in sorted(found)]


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
    """The folder of the operation called ``name`` on the search path, or None."""
    for folder in operation_folders():
        if folder.name == name:
            return folder
    return None


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
