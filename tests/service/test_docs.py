"""The documentation keeps up with the code: the map of the code in docs/development.md names every
module and every top-level folder (and nothing that does not exist), the README's short map names
only what exists, every relative link in the documents leads to a file and heading that exist, and
docs/operations.md lists exactly the metrics served.

The map is the section ``## Map of the code`` of docs/development.md; each of its entries is a list
item whose first inline code is a path from the repository's root: ```- `service/config.py`: ...```.
A path ending in ``/`` is a folder. The modules of :data:`LISTED` packages are named one by one; a
folder below them (a subpackage such as ``service/sql/``) covers every module inside it. Any other
top-level folder (``bench/``, ``tests/``, a new ``devkit/``, ...) is named as a folder, which covers
what it holds; add a package to :data:`LISTED` to have its modules listed one by one. The README's
section of the same name is a short map: folders, whose entries must exist too.
"""
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.markdown_text import FENCE, slugs

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAP = ROOT / "docs" / "development.md"  # the map of every module; the README has a short one
MAP_HEADING = "## Map of the code"
# Packages whose modules the map names one by one.
LISTED = ("service", "operators", "expressions")
# Not modules with a job of their own: a package marker (a package is named by its folder, or its
# modules are) and the ``python -m`` shim (``service/__main__.py`` only calls ``cli.main``).
NOT_MODULES = {"__init__.py", "__main__.py"}
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md",
             ROOT / "helm" / "changejoin" / "README.md"]


def map_entries(document: str) -> list[str]:
    """The paths a document's map names, in order."""
    assert MAP_HEADING in document, f"no '{MAP_HEADING}' section"
    section = document.split(MAP_HEADING, 1)[1]
    section = re.split(r"^#{1,2} ", section, maxsplit=1, flags=re.M)[0]
    return re.findall(r"^- `([^`]+)`", section, flags=re.M)


def listed_modules(root: Path = ROOT) -> list[str]:
    """Every module of the :data:`LISTED` packages, as a path from the root."""
    found = []
    for package in LISTED:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" not in path.parts and path.name not in NOT_MODULES:
                found.append(path.relative_to(root).as_posix())
    return found


def uncovered(modules: list[str], entries: list[str]) -> list[str]:
    """The modules the map does not name: named exactly, or inside a folder entry below a listed
    package (the listed package's own folder covers nothing: its modules are named one by one)."""
    folders = [e for e in entries if e.endswith("/") and e.rstrip("/") not in LISTED]
    return [m for m in modules if m not in entries and not any(m.startswith(f) for f in folders)]


def tracked_top_level_folders() -> list[str]:
    proc = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip("not a git checkout: the tracked folders are unknown")
    return sorted({p.split("/", 1)[0] + "/" for p in proc.stdout.splitlines() if "/" in p and not p.startswith(".")})


def test_the_map_names_every_module():
    missing = uncovered(listed_modules(), map_entries(MAP.read_text()))
    assert missing == [], "add a line for each to the map of the code in docs/development.md (a package: one for its folder)"


def test_the_map_names_every_top_level_folder():
    entries = map_entries(MAP.read_text())
    named = {e.split("/", 1)[0] + "/" for e in entries if "/" in e}
    missing = [f for f in tracked_top_level_folders() if f not in named]
    assert missing == [], "add a line for each folder to the map of the code in docs/development.md"


@pytest.mark.parametrize("document", [MAP, README], ids=["development.md", "README.md"])
def test_everything_a_map_names_exists_once(document):
    entries = map_entries(document.read_text())
    assert entries, "the map names nothing"
    wrong = [e for e in entries if not (ROOT / e).exists() or (ROOT / e).is_dir() != e.endswith("/")]
    assert wrong == [], "map entries that are not (or not as written: folders end in /) in the tree"
    assert sorted(e for e in set(entries) if entries.count(e) > 1) == []


def test_the_readme_keeps_a_short_map_and_leads_to_the_whole_one():
    entries = map_entries(README.read_text())
    assert len(entries) <= 12, "the README's map is a short one: folders; every module's line is in docs/development.md"
    assert "docs/development.md#map-of-the-code" in LINK.findall(prose(README.read_text()))


def test_a_subpackage_folder_covers_its_modules_but_a_listed_package_folder_does_not():
    modules = ["service/config.py", "service/sql/parse.py", "service/sql/resolve.py", "operators/new.py"]
    assert uncovered(modules, ["service/config.py", "service/sql/", "operators/"]) == ["operators/new.py"]
    assert uncovered(modules, ["service/", "service/sql/parse.py"]) == [
        "service/config.py", "service/sql/resolve.py", "operators/new.py"]
    assert uncovered(modules, ["service/config.py", "service/sq/", "service/sql/parse.py", "operators/new.py"]) == [
        "service/sql/resolve.py"]


def test_map_entries_are_the_first_code_of_each_list_item_of_the_section():
    text = "# t\n- `a.py`: not in the map\n## Map of the code\n\nintro `x/`\n\n- `b/c.py`: uses `d.py`\n" \
           "- `e/`: a folder\n\n## Next\n- `f.py`: after the map\n"
    assert map_entries(text) == ["b/c.py", "e/"]


# -- links ------------------------------------------------------------------------------------

INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(markdown: str) -> str:
    """The text outside fenced blocks and inline code."""
    return INLINE_CODE.sub("", FENCE.sub("", markdown))


def broken_links(document: Path) -> list[str]:
    text = document.read_text()
    broken = []
    for target in LINK.findall(prose(text)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (document.parent / path).resolve() if path else document
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in slugs(resolved.read_text()):
            broken.append(f"{target}: no such heading in {resolved.name}")
    return broken


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(document):
    assert broken_links(document) == []


def test_the_link_check_sees_files_anchors_and_skips_code_and_urls(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n## A `code` heading: yes\n")
    doc = tmp_path / "doc.md"
    doc.write_text("# Doc\n[ok](other.md#a-code-heading-yes) [ok](#doc) [web](https://example.com/x)\n"
                   "[bad](gone.md) [bad](other.md#nope) [bad](#nowhere) `[code](gone.md)`\n"
                   "```\n[fenced](gone.md)\n```\n")
    assert broken_links(doc) == ["gone.md: no such file", "other.md#nope: no such heading in other.md",
                                 "#nowhere: no such heading in doc.md"]


def test_the_links_the_documents_use_are_found():
    assert "docs/configuration.md" in LINK.findall(prose(README.read_text()))


# -- metrics ----------------------------------------------------------------------------------

def test_operations_lists_exactly_the_metrics_the_service_serves():
    from service.metrics import JoinMetrics

    served = {f.name + "_total" if f.type == "counter" else f.name for f in JoinMetrics().registry.collect()}
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text[text.index("## Metrics and health"):]
    section = section[:section.index("\n## ", 1)]
    assert set(re.findall(r"`(changejoin_[a-z_]+)`", section)) == served
