"""The agent layer's loader: a kernel's contract and parsed ``.cu`` files, read once per version.

Every node of the graph needs the run's contract and the starting kernel, and the coding, verify
and tuning steps all need the same candidate's parsed header. Reading them again in each node
cost 22 ``contract.toml`` loads and 27 header parses for one round with the scripted evaluator
(``benchmarks/load_counts.py``). Here each file is read once per version: the cache is keyed
on the file's path with its modification time (ns) and size, so a file edited during a run is
read again, and a file written once (a round's candidate) is parsed once.

Why a cache keyed on the path rather than the loaded objects in the graph's state: the state
already carries the key of every file it means (``State.kernel``, each round's candidate path),
and what it carries is data for ``run.json`` and the checkpoint; a copy of the parsed contract
there would be a second place for what ``contract.toml`` says, checkpointed with the run and
shown by Studio, and a resumed run would carry the old copy rather than read the file. The
cache holds objects the loaders return, frozen Pydantic models, so a caller cannot change what
another caller gets.

The contract's key includes the contract file's own version, found through the kernel's folder
(or its ``// astra: operation`` line, itself cached on the kernel's version).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import TypeVar

from astra_graph.kernel.catalog import contract_folder_of
from astra_graph.kernel.contract import CONTRACT_FILE, OperationSpec, load_contract
from astra_graph.kernel.header import Implementation, load_implementation

MAX_ENTRIES = 64
"""Parsed files kept; a run of R rounds with K candidates and a few repairs each holds about
R*K*3 files, and an evicted one is only parsed again."""

Key = tuple[str, str, int, int]
T = TypeVar("T")

_lock = threading.Lock()  # the K candidate branches run in threads
_cache: OrderedDict[Key, object] = OrderedDict()


def _version(kind: str, path: Path) -> Key:
    """The cache key of ``path`` as it is now; OSError if it cannot be read."""
    resolved = path.resolve()
    stat = resolved.stat()
    return (kind, str(resolved), stat.st_mtime_ns, stat.st_size)


def _get(key: Key, kind: type[T]) -> T | None:
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
    return found if isinstance(found, kind) else None


def _put(key: Key, value: T) -> T:
    with _lock:
        _cache[key] = value
        _cache.move_to_end(key)
        while len(_cache) > MAX_ENTRIES:
            _cache.popitem(last=False)
    return value


def spec_of(kernel: str | Path) -> OperationSpec:
    """The contract of a ``.cu`` file (beside it, or named by its header); ContractError if bad."""
    path = Path(kernel)
    try:
        kernel_key = _version("folder", path)
    except OSError:  # missing: contract_folder_of says so in one line
        return load_contract(contract_folder_of(path))
    folder = _get(kernel_key, Path)
    if folder is None:
        folder = _put(kernel_key, contract_folder_of(path))
    contract_key = _version("contract", folder / CONTRACT_FILE)
    spec = _get(contract_key, OperationSpec)
    return spec if spec is not None else _put(contract_key, load_contract(folder))


def _implementation_key(spec: OperationSpec, path: Path) -> Key:
    """A parse depends on the file and on the contract's version (dims, bindings)."""
    contract = _version("contract", spec.folder / CONTRACT_FILE)
    return _version(f"implementation under {contract}", path)


def implementation(spec: OperationSpec, path: str | Path) -> Implementation:
    """The parsed ``.cu`` file at ``path`` under ``spec``'s contract; ContractError if bad."""
    path = Path(path)
    try:
        key = _implementation_key(spec, path)
    except OSError:  # missing: load_implementation says so in one line
        return load_implementation(path, spec.contract)
    found = _get(key, Implementation)
    return found if found is not None else _put(key, load_implementation(path, spec.contract))


def remember(spec: OperationSpec, impl: Implementation) -> None:
    """Keep ``impl``, parsed from its source, as the parse of the file just written with it."""
    _put(_implementation_key(spec, impl.path), impl)


def kernel(path: str | Path) -> tuple[OperationSpec, Implementation]:
    """A kernel file's contract and its parsed file."""
    spec = spec_of(path)
    return spec, implementation(spec, path)
