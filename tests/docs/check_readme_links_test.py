"""check_readme_links.py on made-up trees: what it reports, word for word, and what it skips."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import check_readme_links  # noqa: E402


def tree(tmp_path, readme):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(
        "# A page\n\n## Install on `Kubernetes`\n\n```\n## not a heading\n```\n")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "demo").write_text("#!/bin/sh\n")
    (tmp_path / "README.md").write_text(readme)
    return tmp_path / "README.md"


def test_good_links_pass(tmp_path):
    md = tree(tmp_path, "[p](docs/page.md) [k](docs/page.md#install-on-kubernetes)\n"
                        "[d](scripts/demo) [dir](docs/) ![i](docs/page.md)\n"
                        "[web](https://example.org/x.md) [top](#top)\n\n# Top\n")
    assert check_readme_links.check(md) == []


def test_missing_file_and_anchor_are_reported_with_their_line(tmp_path):
    md = tree(tmp_path, "intro\n[gone](docs/gone.md)\n[a](docs/page.md#not-a-heading)\n"
                        "[b](docs/page.md#no-such)\n")
    problems = check_readme_links.check(md)
    assert problems == [
        f"README.md:2: docs/gone.md: no such file {tmp_path / 'docs' / 'gone.md'}",
        "README.md:3: docs/page.md#not-a-heading: no heading with anchor #not-a-heading in page.md",
        "README.md:4: docs/page.md#no-such: no heading with anchor #no-such in page.md",
    ]


def test_code_spans_and_fences_are_not_links(tmp_path):
    md = tree(tmp_path, "`[x](nope.md)`\n```\n[y](nope.md)\n```\n")
    assert check_readme_links.check(md) == []


def test_main_exit_status(tmp_path, capsys):
    md = tree(tmp_path, "[gone](gone.md)\n")
    assert check_readme_links.main(["x", str(md)]) == 1
    assert capsys.readouterr().out.endswith("1 broken relative link(s)\n")
    assert check_readme_links.main(["x"]) == 2
