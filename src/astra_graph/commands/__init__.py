"""One module per ``astra`` subcommand: ``add_parser(subparsers)`` sets ``run(args) -> int``."""
