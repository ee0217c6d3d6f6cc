"""The documentation holds together: README.md is short and leads to every docs/ page, and every link lands.

Commands shown in the pages are checked in test_documented_commands.py.
"""

from __future__ import annotations

import re

import pytest

from rollout.paths import PROJECT_ROOT
from tests.doc_pages import DOCS_DIR, README, anchors, broken_links, doc_pages, linked_files, slug, split_page

README_MAX_LINES = 250
"""The README is what a newcomer reads first; the reference lives in docs/."""


def test_slugs_follow_githubs_rule():
    assert slug("What a result means") == "what-a-result-means"
    assert slug("Token, SSE, timeout") == "token-sse-timeout"
    assert slug("Pinned arguments: `fixed_params`") == "pinned-arguments-fixed_params"
    assert slug("Arithmetic: 21M passages x 768-d (Wikipedia, e5-base)") == "arithmetic-21m-passages-x-768-d-wikipedia-e5-base"
    assert anchors("# Agents\n## Agents\n```\n# not a heading\n```\n") == {"agents", "agents-1"}


def test_the_link_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n## Some part\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n[ok](other.md#some-part) [here](#page) [web](https://example.com/x#y)\n"
        "[gone](missing.md) [no anchor](other.md#nothing) [self](#nowhere)\n"
        "`[in code](missing.md)`\n```\n[in a block](missing.md)\n```\n"
    )
    problems = broken_links(page)
    assert len(problems) == 3, problems
    assert "missing.md: no such file" in problems[0]
    assert "other.md#nothing" in problems[1] and "#nowhere" in problems[2]


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_every_link_lands_on_a_file_and_heading(page):
    assert not broken_links(page), "\n".join(broken_links(page))


def test_the_readme_leads_to_every_docs_page():
    pages = sorted(DOCS_DIR.glob("*.md"))
    assert pages, "no docs/*.md pages found"
    unlinked = [p.name for p in pages if p.resolve() not in linked_files(README)]
    assert not unlinked, f"docs pages README.md does not link to: {unlinked}"


def test_the_readme_is_short():
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move reference text into docs/"


def test_the_quickstart_is_two_command_lines():
    # One line installs and runs the demo, one installs the test extras and runs the tests: nothing else.
    prose, blocks = split_page(README.read_text(encoding="utf-8"))
    (heading_line,) = [n for n, line in prose if line.strip() == "## Quickstart"]
    first = next(b for b in blocks if b.start > heading_line)
    lines = [line for _, line in first.lines]
    assert len(lines) == 2, lines
    demo, tests = lines
    assert re.fullmatch(r"pip install torch==[\d.]+ -e \. && python -m rollout mode=hybrid", demo), demo
    assert re.fullmatch(r'pip install torch==[\d.]+ -e "\.\[test\]" && python -m pytest', tests), tests
    # CI runs the same install as the README's test line.
    install = tests.partition(" && ")[0].removeprefix("pip install ")
    assert install in (PROJECT_ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_a_folder_corpus_passage_is_said_in_words_not_tokens():
    # chunk_tokens counts whitespace-separated words (rollout.data.chunking): a folder's 200 are ~400 BERT tokens.
    from rollout.data.folder import FOLDER_CHUNK_TOKENS
    from rollout.paths import CONF_DIR

    files_yaml = CONF_DIR / "dataset" / "files.yaml"
    texts = {page: " ".join(page.read_text(encoding="utf-8").split())
             for page in (*doc_pages(), files_yaml, CONF_DIR / "config.yaml")}
    said_in_tokens = [str(page.relative_to(PROJECT_ROOT)) for page, text in texts.items()
                      if re.search(rf"\b{FOLDER_CHUNK_TOKENS}[- ]tokens?\b", text)]
    assert not said_in_tokens, f"a folder passage's {FOLDER_CHUNK_TOKENS} words said as tokens in {said_in_tokens}"
    for page in (DOCS_DIR / "retrieval.md", DOCS_DIR / "gateway.md", files_yaml):
        assert f"{FOLDER_CHUNK_TOKENS}-word passages" in texts[page], page
    assert "passages of N words" in texts[DOCS_DIR / "retrieval.md"]
