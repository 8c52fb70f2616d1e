#!/usr/bin/env python3
"""Checks that every relative link of a Markdown file (README.md) names a file or directory of
the repository, and that a link's #anchor names a heading of the Markdown file it points to
(slugs as MkDocs makes them: Python-Markdown's toc slugify). Links to http(s) and mailto are not
followed: nothing is fetched. Prints each broken link with its line; exit 1 if any.

    check_readme_links.py README.md
"""
import re
import sys
from pathlib import Path

from markdown.extensions.toc import slugify

# [text](target) and ![alt](target), target up to a space or ')'; <... src="target">.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SRC = re.compile(r"""\bsrc=["']([^"']+)["']""")
FENCE = re.compile(r"^\s*(```|~~~)")


def headings(path):
    """The anchors of a Markdown file's headings, as MkDocs' toc makes them."""
    anchors, in_fence = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        m = None if in_fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            text = re.sub(r"`([^`]*)`", r"\1", m.group(1))
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
            anchors.add(slugify(text, "-"))
    return anchors


def check(md):
    md = Path(md).resolve()
    problems, in_fence = [], False
    for n, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        line = re.sub(r"`[^`]*`", "", line)  # code spans are not links
        for target in LINK.findall(line) + SRC.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = md if not path else (md.parent / path).resolve()
            if not dest.exists():
                problems.append(f"{md.name}:{n}: {target}: no such file {dest}")
            elif anchor and dest.suffix == ".md" and anchor not in headings(dest):
                problems.append(f"{md.name}:{n}: {target}: no heading with anchor #{anchor} "
                                f"in {dest.name}")
    return problems


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    problems = check(argv[1])
    for p in problems:
        print(p)
    print(f"{argv[1]}: {len(problems)} broken relative link(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
