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
