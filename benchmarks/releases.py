"""Pinned framework releases, fetched from the package registry into ``.frameworks/`` (ignored).

``fetch(name, version) -> Path`` returns the folder holding the release's kernel sources (only
the parts with kernels are kept: vLLM's ``csrc/``, FlashInfer's ``include/``, SGLang's JIT
kernels), downloading and unpacking them on first use. ``python benchmarks/releases.py
--prefetch`` fetches every pinned release, so the folder can be carried to a GPU host that has
no registry. Nothing here is committed: the cache folder is in ``.gitignore``.

Wheels come through ``pip download --no-deps``. An sdist whose metadata cannot be built here
(vLLM's build requirements pin a torch this machine cannot resolve, so ``pip download`` stops
after downloading it) is fetched through the registry's simple index (its JSON form)
instead, and its SHA-256 checked against the one the registry publishes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(__file__).resolve().parent.parent / ".frameworks"
SIMPLE_INDEX = "https://pypi.org/simple/{name}/"
"""The registry's simple index in its JSON form (PEP 691), which lists each file's SHA-256."""
DOWNLOAD_TIMEOUT_S = 600
"""The largest release (sgl-kernel's wheel, 536 MB) took about 7 s here; a slow link gets 10 min."""


@dataclass(frozen=True)
class Release:
    name: str
    version: str
    kind: str
    """``sdist`` or ``wheel``: what the registry ships the sources in."""
    keep: tuple[str, ...]
    """Path prefixes inside the archive (after its top folder for an sdist) that are kept."""


PINNED: dict[str, Release] = {
    r.name: r
    for r in (
        Release("vllm", "0.33.0", "sdist", ("csrc/",)),
        Release(
            "flashinfer-python",
            "0.7.2.post1",
            "wheel",
            # the header launchers' callers, its TVM-FFI bindings, are csrc/*.cu (its
            # subfolders, ~3,000 files, hold kernels and instantiations, not bindings)
            ("flashinfer/data/include/", "flashinfer/data/csrc/*"),
        ),
        Release(
            "sglang", "0.5.23", "wheel", ("sglang/kernels/jit/csrc/", "sglang/kernels/jit/include/")
        ),
    )
}


SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".inl")
"""What is kept of a release: C++ sources and headers (its Python, binaries and docs are not)."""


def _keep(member: str, keep: tuple[str, ...]) -> bool:
    """Whether ``member`` is kept: a source under a kept prefix, or directly in a kept
    ``folder/*``."""
    if not member.endswith(SOURCE_SUFFIXES):
        return False
    for prefix in keep:
        if prefix.endswith("/*"):
            folder = prefix[:-1]
            if member.startswith(folder) and "/" not in member[len(folder) :]:
                return True
        elif member.startswith(prefix):
            return True
    return False


def _registry_sdist(name: str, version: str, into: Path) -> Path:
    request = urllib.request.Request(
        SIMPLE_INDEX.format(name=name), headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        files = json.load(reply)["files"]
    wanted = f"{name}-{version}.tar.gz"
    found = [f for f in files if f["filename"] == wanted]
    if not found:
        raise RuntimeError(f"{name}=={version}: the registry lists no {wanted}")
    url, digest = found[0]["url"], found[0]["hashes"]["sha256"]
    target = into / wanted
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as reply, target.open("wb") as f:
        shutil.copyfileobj(reply, f)
    if hashlib.sha256(target.read_bytes()).hexdigest() != digest:
        raise RuntimeError(f"{target.name}: SHA-256 differs from the registry's {digest}")
    return target


def _download(release: Release, into: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(into)]
    command += ["--no-binary", ":all:"] if release.kind == "sdist" else ["--only-binary", ":all:"]
    command.append(f"{release.name}=={release.version}")
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S, check=False
    )
    found = sorted(into.iterdir())
    if done.returncode == 0 and found:
        return found[0]
    if release.kind == "sdist":
        return _registry_sdist(release.name, release.version, into)
    tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
    raise RuntimeError(f"pip download {release.name}=={release.version} failed: {tail}")


def _unpack(archive: Path, release: Release, target: Path) -> None:
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as z:
            for member in z.namelist():
                if _keep(member, release.keep) and not member.endswith("/"):
                    out = target / member
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(z.read(member))
        return
    with tarfile.open(archive) as t:
        for entry in t.getmembers():
            inner = entry.name.split("/", 1)[1] if "/" in entry.name else ""
            if entry.isfile() and _keep(inner, release.keep):
                source = t.extractfile(entry)
                assert source is not None  # a regular file always has contents
                out = target / inner
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(source.read())


def _complete(marker: Path, release: Release) -> bool:
    """Whether the unpacked release holds every part it keeps. The marker lists them after
    ``name==version``; a marker of that line alone was written before parts were listed, when
    every part was a prefix, so it lacks only the ``folder/*`` parts."""
    if not marker.is_file():
        return False
    lines = marker.read_text().split()
    if lines[:1] != [f"{release.name}=={release.version}"]:
        return False
    needed = set(release.keep) if len(lines) > 1 else {p for p in release.keep if p.endswith("/*")}
    return needed <= set(lines[1:])


def fetch(name: str, version: str | None = None) -> Path:
    """The unpacked kernel sources of a pinned release (downloaded on first use)."""
    if name not in PINNED:
        raise KeyError(f"{name}: not pinned; expected one of {sorted(PINNED)}")
    release = PINNED[name]
    if version is not None and version != release.version:
        raise KeyError(f"{name}: pinned at {release.version}, not {version}")
    target = CACHE / f"{release.name}-{release.version}"
    complete = target / ".complete"
    if _complete(complete, release):
        return target
    with tempfile.TemporaryDirectory() as tmp:
        archive = _download(release, Path(tmp))
        shutil.rmtree(target, ignore_errors=True)
        _unpack(archive, release, target)
    complete.write_text("\n".join([f"{release.name}=={release.version}", *release.keep]) + "\n")
    return target


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefetch", action="store_true", help="fetch every pinned release")
    args = parser.parse_args(argv)
    if not args.prefetch:
        parser.print_help()
        return 2
    for release in PINNED.values():
        path = fetch(release.name)
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        print(f"{release.name}=={release.version}: {path} ({size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
