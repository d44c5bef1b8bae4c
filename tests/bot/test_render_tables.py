"""A path from review.json cannot break out of a markdown table cell of the bot's comments.

Paths are shown as code spans, but in a GitHub-flavoured table a ``|`` splits the row before
the code span is read, even between backticks: a file named
``src/a|[Sign in again](https://evil.example/x)|.py`` (legal in git, and review.json is the
analysis job's word) put a live link into the table of new breaks of the sticky comment and the
check run's summary. Rendered with markdown-it-py's GFM table rule, as GitHub renders tables."""

from __future__ import annotations

from markdown_it import MarkdownIt

from bot import render
from bot.review import from_json
from tests.bot.conftest import pr_review

EVIL = "src/a|[Sign in again](https://evil.example/x)|.py"


def _html(markdown: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(markdown)


def test_a_path_with_pipes_stays_in_its_cell_of_the_new_breaks_table():
    data = pr_review("b" * 40, "a" * 40)
    data["findings"][0]["file"] = EVIL
    table = render.new_breaks_table(from_json(data), 10_000)
    html = _html(table)
    assert "evil.example" in html  # the path is shown, as text
    assert "href=\"https://evil.example" not in html
    assert f"<code>{EVIL}:11</code>" in html
    assert all(row.count("<td>") == 4 for row in html.split("<tr>")[2:])
