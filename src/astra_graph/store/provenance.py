"""Where a measurement came from: the git commit of the code that produced it.

``ASTRA_GIT_COMMIT`` wins, for hosts that get a copy of the working tree without ``.git`` (the
GPU machines); otherwise ``git rev-parse HEAD`` in the package's checkout, or None.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def git_commit() -> str | None:
    if os.environ.get("ASTRA_GIT_COMMIT"):
        return os.environ["ASTRA_GIT_COMMIT"]
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            cwd=Path(__file__).parent,
        )
    except OSError:
        return None
    return done.stdout.strip() or None
