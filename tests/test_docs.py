"""The manual (docs/) builds with no warning, every link inside it leads somewhere, and its references
are complete: the CLI page names every subcommand and flag of ``grader.cli.build_parser()``, the format
page every field of every schema in grader/schemas/.  The site is built once for the module (a few
seconds); the checks walk the parser and the schemas on their own, not through the generator they check.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from html import unescape
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from grader.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"

pytest.importorskip("sphinx", reason="the docs extra (pip install -e '.[docs]') builds the manual")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-E", "-b", "html",
         "-d", str(out / "doctrees"), str(DOCS), str(out / "html")],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    site = out / "html"
    site.joinpath("build.log").write_text(done.stdout + done.stderr)
    return site


def build_log(site: Path) -> str:
    return site.joinpath("build.log").read_text()


def text_of(html: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


def test_the_site_builds_without_a_warning(site):
    log = build_log(site)
    assert "WARNING" not in log and "ERROR" not in log, log[-4000:]
    assert (site / "index.html").is_file(), log[-4000:]


def test_every_page_is_built(site):
    """Every Markdown page under docs/ is a page of the site (docs/handouts/, the course's documents as
    given out, excepted), so a guide written beside the others is never left out."""
    pages = {
        path.relative_to(DOCS).with_suffix(".html")
        for path in DOCS.rglob("*.md")
        if not path.relative_to(DOCS).parts[0].startswith(("_", "handouts"))
    }
    missing = sorted(str(page) for page in pages if not (site / page).is_file())
    assert not missing, missing


IDS = re.compile(r"""\bid=["']([^"']+)["']""")
LINKS = re.compile(r"""\b(?:href|src)=["']([^"']+)["']""")


def test_every_internal_link_leads_to_a_page_and_an_anchor_that_exist(site):
    """linkcheck for the links inside the site only (no network): each relative href or src names a file
    of the build, and each #fragment an id on that page."""
    ids: dict[Path, set[str]] = {}
    broken = []
    for page in site.rglob("*.html"):
        for link in LINKS.findall(page.read_text()):
            parts = urlsplit(unescape(link))
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(site)}: {link}")
                continue
            if parts.fragment and target.suffix == ".html":
                known = ids.setdefault(target, set(IDS.findall(target.read_text())))
                if unquote(parts.fragment) not in known:
                    broken.append(f"{page.relative_to(site)}: {link} (no such anchor)")
    assert not broken, "\n".join(broken)


def commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ("grader",)):
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from commands(child, (*words, name))


def section_html(html: str, anchor: str) -> str:
    """``<section id=anchor>`` up to the next section: the reference pages' sections are siblings."""
    start = html.find(f'<section id="{anchor}"')
    assert start >= 0, f"no section {anchor}"
    end = html.find("<section", start + 1)
    return html[start : end if end > 0 else len(html)]


def section(html: str, anchor: str) -> str:
    return text_of(section_html(html, anchor))


def first_cells(html: str) -> list[str]:
    """The text of each table row's first cell: the argument, or the field's path."""
    return [text_of(cell) for cell in re.findall(r"<tr[^>]*>\s*<td[^>]*>(.*?)</td>", html, re.S)]


def test_the_cli_reference_names_every_subcommand_and_flag(site):
    html = (site / "reference" / "cli.html").read_text()
    seen = 0
    for words, parser in commands(build_parser()):
        anchor = "cli-" + "-".join(words)
        shown, rows = section(html, anchor), " | ".join(first_cells(section_html(html, anchor)))
        for action in parser._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
                continue
            names = action.option_strings or [action.metavar or action.dest]
            for name in names:
                assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", rows), f"{' '.join(words)}: {name}"
                seen += 1
            if action.help and "%" not in action.help:
                assert " ".join(action.help.split()) in shown, f"{' '.join(words)} {names[0]}: its help"
    assert seen > 80  # the parser's ~90 arguments: the walk reached the nested subcommands


def property_names(schema) -> set[str]:
    """Every key of every ``properties`` object, wherever it is in the schema ($defs included)."""
    found: set[str] = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                found |= set(value)
            found |= property_names(value)
    elif isinstance(schema, list):
        for value in schema:
            found |= property_names(value)
    return found


@pytest.mark.parametrize("schema", sorted(p.name for p in (REPO / "grader" / "schemas").glob("*.json")))
def test_the_format_reference_names_every_field_of_every_schema(site, schema):
    """A field the schema defines but the page does not list (a $def nothing reaches, a branch the
    generator does not walk) fails here, by name."""
    html = (site / "reference" / "formats.html").read_text()
    anchor = "format-" + schema.removesuffix(".json").replace(".", "-")
    fields = {
        part for path in first_cells(section_html(html, anchor)) for part in re.split(r"[.\[\]{} ]+", path)
    }  # fmt: skip
    wanted = property_names(json.loads((REPO / "grader" / "schemas" / schema).read_text()))
    assert wanted, schema
    assert not wanted - fields, f"{schema}: fields not in the reference: {sorted(wanted - fields)}"
    assert f"grader/schemas/{schema}" in section(html, anchor)


README = REPO / "README.md"


def test_the_readme_is_a_front_door():
    """At most 200 lines (issue 61, item 1), one section per door, and every link in it leads to a file."""
    text = README.read_text()
    assert text.count("\n") <= 200, f"README.md has {text.count(chr(10))} lines"
    headings = re.findall(r"^## (.+)$", text, re.M)
    for door in ("Students", "GitHub Classroom", "Instructors", "On a cluster", "As a service", "Getting help"):
        assert any(heading.startswith(door) for heading in headings), door
    links = re.findall(r"\]\(([^)\s]+)\)|\bsrc=\"([^\"]+)\"", text)
    targets = [a or b for a, b in links if not (a or b).startswith(("http://", "https://", "#"))]
    assert targets
    missing = [target for target in targets if not (REPO / target.split("#")[0]).exists()]
    assert not missing, missing
