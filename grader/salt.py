"""The input salt: the secret every case's inputs are keyed by, where it comes from and where it may go.

It reaches the matrix session only (``grader.runner`` strips :data:`SALT_ENV` from every other
child's environment), and the docker backend hands it to the grader in the container the same way,
never to a rank.  The lowest layer that names it, so the pipeline, the runner and the docker
backend read one constant without importing each other.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from grader.errors import UserError

SALT_ENV = "GRADER_INPUT_SALT"


def input_salt(secret_file: Path | None) -> tuple[str, str]:
    """(the salt every input is keyed by, how it was chosen: the ``salt`` isolation layer).

    Random per grading unless the instructor gives a secret (a file, or ``GRADER_INPUT_SALT``) for
    reproducible regrades.  Either way it reaches the matrix session only, never a rank.
    """
    if secret_file is not None:
        try:
            secret = secret_file.read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"--secret-file {secret_file}: {exc}") from exc
        if not secret:
            raise UserError(f"--secret-file {secret_file} is empty")
        return secret, "on: the instructor's secret (--secret-file)"
    if os.environ.get(SALT_ENV):
        return os.environ[SALT_ENV], f"on: the instructor's secret ({SALT_ENV})"
    return secrets.token_hex(16), "on: random for this grading"
