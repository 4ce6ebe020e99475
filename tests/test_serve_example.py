"""README's service door: after the two set-up commands, one more, ``bash scripts/serve-example.sh``, starts
the grading service on SQLite with the manual's example configuration (issue 59: "From a fresh clone, the
README's commands start the service on SQLite with one more command")."""

from __future__ import annotations

from pathlib import Path

import httpx
import yaml
from local_service import local_service
from oidc_issuer import Issuer

REPO = Path(__file__).resolve().parents[1]
SCRIPT = "scripts/serve-example.sh"


def test_the_readme_shows_the_one_command():
    door = (REPO / "README.md").read_text().split("\n## As a service", 1)[1].split("\n## ", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in door.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()]
    assert commands[0] == f"bash {SCRIPT}"


def test_the_script_serves_the_manuals_example_on_sqlite(tmp_path):
    """The example's assignments as the manual ships them; only the port, the state and an OIDC issuer are
    this test's (the example's own port may be taken, its state is the checkout's)."""
    example = yaml.safe_load((REPO / "docs" / "instructors" / "service.yaml").read_text())
    assert "database" not in example  # the embedded default
    with local_service(
        tmp_path, Issuer(tmp_path), example["assignments"], workers=example["workers"], command=("bash", SCRIPT)
    ) as service:
        token = (service.state / "instructor.token").read_text().strip()
        gradebook = httpx.get(
            f"{service.url}/api/v1/assignments/a9/gradebook.csv", headers={"Authorization": f"Bearer {token}"}
        )
        assert gradebook.status_code == 200 and gradebook.text.startswith("student,"), gradebook.text[:200]
        databases = [p.name for p in service.state.iterdir() if p.suffix in (".db", ".sqlite", ".sqlite3")]
        assert databases, sorted(service.state.iterdir())
