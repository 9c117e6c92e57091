"""The documentation a newcomer reads holds its shape: a README short enough to read in five
minutes, no line too long to read, every relative link landing on a file (and heading) that exists,
the README's test command the one CI runs, and no word about the environment the project was built
in (how a GPU was obtained, which files went with it, paths and machines outside the repository),
whether in the docs, in any command's --help or in the device catalog's sources."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from tracker.cli import cli

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
PAGES = [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
# how each committed recording was made: read from the README, so held to the same words
RECORDING_NOTES = sorted((ROOT / "tests" / "data").rglob("*.md"))
CATALOG_SOURCES = sorted((ROOT / "tracker" / "model").glob("*.py"))
README_MAX_LINES = 300
LINE_MAX_CHARS = 200

# Words about the build environment, not the product (the build machine is not the user's
# machine: "this machine" in a --help text means the user's, and is allowed there).
ENVIRONMENT_WORDS = [
    r"\blent\b",
    r"\blends?\b",
    r"\bborrow(ed|ing)?\b",
    r"\bsessions?\b",
    r"device tool",
    r"\bcarried\b",
    r"\bcarry\s*\[",
    r"\.\./shared\b",
    r"(?<![\w.])/work\b",
    r"\b\d+-core\b",
    r"machine, \d+ cores",
    r"\bstop \d+\b",
    r"\bissue \d+\b",
    r"farm-studio",
]


def help_texts() -> dict[str, str]:
    """Every command's --help, through click (no subprocess): 'tracker', 'tracker profile', ..."""
    texts = {}

    def walk(command: click.Command, path: list[str]) -> None:
        name = " ".join(path)
        texts[name] = command.get_help(click.Context(command, info_name=name))
        if isinstance(command, click.Group):
            for sub in sorted(command.commands):
                walk(command.commands[sub], [*path, sub])

    walk(cli, ["tracker"])
    return texts


def environment_words(text: str) -> list[str]:
    return [m.group(0) for pattern in ENVIRONMENT_WORDS for m in re.finditer(pattern, text, re.IGNORECASE)]


def test_the_readme_reads_in_five_minutes():
    assert len(README.read_text().splitlines()) <= README_MAX_LINES


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_line_is_too_long_to_read(page):
    long = [n for n, line in enumerate(page.read_text().splitlines(), 1) if len(line) > LINE_MAX_CHARS]
    assert not long, f"{page.name}: lines {long} over {LINE_MAX_CHARS} characters"


@pytest.mark.parametrize("page", PAGES + RECORDING_NOTES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_docs_describe_the_product_not_its_build_environment(page):
    assert environment_words(page.read_text()) == []


def test_no_help_text_describes_the_build_environment():
    texts = help_texts()
    assert "tracker profile" in texts and len(texts) == 1 + len(cli.commands)
    found = {name: words for name, text in texts.items() if (words := environment_words(text))}
    assert found == {}


@pytest.mark.parametrize("source", CATALOG_SOURCES, ids=lambda p: p.name)
def test_the_device_catalog_cites_sources_not_the_build_environment(source):
    assert environment_words(source.read_text()) == []


def test_the_environment_words_are_caught():
    """The patterns find what they are for, and leave the product's own words alone."""
    assert environment_words("a lent H200 ran it; carry ['.whl'] (the device tool), this 2-core box")
    assert environment_words("see ../shared/gpu-2026-11-25-h100/ and issue 43's second session")
    assert not environment_words("launches carry no counters; 16896 cores; cupti_session.py; `shared/fused`")


def anchors(page: Path) -> set[str]:
    """GitHub's anchor for each heading of a Markdown page: lower case, punctuation dropped, spaces
    to dashes."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    titles = re.findall(r"^#+\s+(.+?)\s*$", text, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-") for title in titles}


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return [target for target in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_lands(page):
    for target in links(page):
        path, _, anchor = target.partition("#")
        landing = (page.parent / path).resolve() if path else page
        assert landing.exists(), f"{page.name}: {target} names no file"
        if anchor and landing.suffix == ".md":
            assert anchor in anchors(landing), f"{page.name}: {target} names no heading of {landing.name}"


def test_the_readmes_test_command_is_what_ci_runs():
    ci_command = (ROOT / ".ci" / "run").read_text().splitlines()[-1]
    commands = re.findall(r"```sh\n(.*?)\n```", README.read_text(), re.DOTALL)
    assert commands[:2] == [
        "python -m pip install -c constraints.txt -e . && tracker profile alexnet --batch 128",
        ci_command,
    ]


def test_every_extra_has_its_install_line_in_the_readme():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    text = README.read_text()
    for extra in extras:
        assert f"-e '.[{extra}]'" in text, extra


def test_no_source_or_test_names_an_issue_number():
    """Docstrings and comments say what and why; which issue asked for it is the git log's."""
    sources = sorted((ROOT / "tracker").rglob("*.py")) + sorted((ROOT / "tests").glob("*.py"))
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sources
        if path.name != "test_docs.py"  # its own patterns and the strings they must catch
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bissue #?\d+\b", line, re.IGNORECASE)
    ]
    assert not found, "say what and why instead:\n" + "\n".join(found)
