"""One module per ``astra`` subcommand: ``add_arguments(parser)`` adds its arguments and sets
``run(args) -> int``; its one-line summary lives in ``astra_graph.cli.COMMANDS``.

A command module imports only what building its parser needs at the top (argparse, contract
names): anything heavy (LangGraph, LangChain, matplotlib, CuPy) is imported inside ``run``, so
that ``astra --help`` and the quick commands start in a fraction of a second.
"""


class UsageError(Exception):
    """Bad input that the user must fix: printed as one line, exit code 2.

    It lives here, below the commands and ``cli``, so that ``python -m astra_graph.cli`` (where
    ``cli`` runs as ``__main__``) catches the same class that the commands raise.
    """


INTERRUPTED = 130
"""The exit code of a command stopped by Ctrl-C or SIGTERM (128 + SIGINT, as shells report)."""


def check_arch(flag: str, arch: str) -> None:
    """``arch`` must be ``sm_<NN>`` (or ``sm_<NN>a``) that the installed NVRTC compiles for:
    else UsageError naming the flag and the supported targets (``--arch sm_200`` is bad input,
    exit 2, not a failed compile). Without NVRTC only the form is checked; the compile then
    says NVRTC is missing."""
    import re

    from astra_graph.harness.nvrtc import NvrtcUnavailable, supported_archs

    found = re.fullmatch(r"sm_(\d+)a?", arch)
    if found is None:
        raise UsageError(f"{flag}: expected a target such as sm_90 or sm_90a, got {arch!r}")
    try:
        known = supported_archs()
    except NvrtcUnavailable:
        return
    if int(found.group(1)) not in known:
        names = ", ".join(f"sm_{n}" for n in known)
        raise UsageError(f"{flag}: NVRTC cannot compile for {arch}; it supports {names}")
