"""English text for shoal-gpt from Debian's Linux man-pages packages: one manual page = one
document, its roff markup stripped to plain text by a small deterministic converter (not groff,
whose output varies with its version and the terminal).

`manpages` (sections 1, 4, 5, 7, 8: file formats, devices, overviews) is the pretraining
corpus; `manpages-dev` (sections 2 and 3: system calls and C library functions) is the
federated fine-tuning corpus, a domain the base model has not seen, split by topic among
clients (non-IID).
"""

from __future__ import annotations

import functools
import gzip
import os
import re
import subprocess
import zlib

MAN_ROOT = "/usr/share/man"
# Named roff characters -> text (the ones the man-pages project uses; others are dropped).
_NAMED = {"aq": "'", "dq": '"', "lq": '"', "rq": '"', "oq": "'", "cq": "'", "em": "--",
          "en": "-", "hy": "-", "mi": "-", "bu": "*", "co": "(c)", "rg": "(R)", "ti": "~",
          "ha": "^", "rs": "\\", "bv": "|", "ga": "`", "ua": "^", "da": "v", "->": "->",
          "<-": "<-", "<=": "<=", ">=": ">=", "!=": "!=", "mu": "x", "de": " degrees",
          "tm": "(TM)", "pl": "+", "eq": "=", "sl": "/", "fo": "<<", "fc": ">>", "Fo": "<<",
          "Fc": ">>", "ss": "ss", "aa": "'", "at": "@", "sh": "#", "Do": "$", "ps": "#"}
_ESCAPE = re.compile(r"\\(\((..)|\[([^\]]*)\]|f(\(..|\[[^\]]*\]|.)|s[-+]?\d|\*(\(..|\[[^\]]*\]|.)"
                     r"|[&|^%:/,!~0dut]|e|-|\s|.)")
# Font and text macros whose arguments are text; every other request line is dropped.
_TEXT_MACROS = {"B", "I", "BR", "RB", "IR", "RI", "BI", "IB", "SM", "SB", "SH", "SS", "TP",
                "IP", "UR", "MT", "OP", "Nm", "Pa", "Ar", "Fl", "Em"}


def package_version(package: str) -> str:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True,
                         text=True)
    if out.returncode != 0 or not out.stdout:
        raise SystemExit(f"Debian package {package} is not installed (scripts/lib.sh installs "
                         f"it; apt-get install {package})")
    return out.stdout


def package_pages(package: str, sections: tuple[str, ...]) -> list[str]:
    """The package's manual pages in `sections` ("man7", ...), regular files only, sorted."""
    out = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, check=True)
    pages = []
    for path in out.stdout.split("\n"):
        parts = path.split("/")
        if (path.startswith(MAN_ROOT + "/man") and path.endswith(".gz") and len(parts) == 6
                and parts[4] in sections and os.path.isfile(path) and not os.path.islink(path)):
            pages.append(path)
    return sorted(pages)


def _unescape(text: str) -> str:
    def repl(m: re.Match) -> str:
        whole = m.group(1)
        if m.group(2) is not None or m.group(3) is not None:
            return _NAMED.get(m.group(2) or m.group(3), "")
        if whole.startswith(("f", "s", "*")) or whole in ("&", "|", "^", "%", ":", "/", ",",
                                                          "!", "~", "0", "d", "u", "t"):
            return " " if whole in ("~", "0") else ""
        if whole == "e":
            return "\\"
        if whole == "-":
            return "-"
        if whole.isspace():
            return " "
        return whole
    return _ESCAPE.sub(repl, text)


def roff_to_text(roff: str) -> str:
    """Plain text of a man page: request lines dropped, text macros' arguments kept, escapes
    resolved, filled text joined into one line per paragraph (`.nf`/`.EX` blocks keep their
    lines); paragraphs separated by a blank line."""
    paras: list[str] = []
    cur: list[str] = []
    fill = True

    def para():
        if cur:
            paras.append((" " if fill else "\n").join(cur).strip())
            cur.clear()

    for raw in roff.split("\n"):
        line = raw.rstrip()
        if line.startswith(('.\\"', "'\\\"", '\\"')):
            continue
        if line.startswith((".", "'")):
            name, _, args = line[1:].strip().partition(" ")
            if name in ("nf", "EX", "fi", "EE"):
                para()
                fill = name in ("fi", "EE")
            elif name in ("SH", "SS"):
                para()
                paras.append(_unescape(args.replace('"', "")).strip())
            elif name in ("PP", "LP", "P", "TP", "IP", "sp", "br", "RS", "RE", "TS", "TE"):
                para()
                if name == "IP" and args:
                    tag = args.split('"')[1] if args.startswith('"') else args.split(" ")[0]
                    cur.append(_unescape(tag))
                    para()
            elif name in _TEXT_MACROS and args:
                words = re.findall(r'"[^"]*"|\S+', args)
                joined = ("" if name in ("BR", "RB", "IR", "RI", "BI", "IB") else " ")
                cur.append(_unescape(joined.join(w.strip('"') for w in words)))
            continue
        if not line.strip():
            para()
            continue
        cur.append(_unescape(line))
    para()
    return "\n\n".join(p for p in paras if p) + "\n"


# Character-set tables (man7/iso_8859-1.7, ...): rows of code points, not prose.
_TABLE_PAGES = re.compile(r"man7/(iso_8859|cp125|koi8|armscii|ascii\.)")


def read_page(path: str) -> str | None:
    """The page's text, or None for a `.so` redirect (an alias of another page)."""
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        roff = f.read()
    if roff.lstrip().startswith(".so "):
        return None
    return roff_to_text(roff)


@functools.lru_cache(maxsize=4)
def documents(package: str, sections: tuple[str, ...]) -> list[tuple[str, str]]:
    """(name, text) per page, e.g. ("man7/signal.7", "..."), sorted by name (read once per
    process: the clients of one process share it)."""
    docs = []
    for path in package_pages(package, sections):
        text = read_page(path)
        if text and len(text) > 200 and not _TABLE_PAGES.match(path[len(MAN_ROOT) + 1:]):
            docs.append((path[len(MAN_ROOT) + 1:-len(".gz")], text))
    return docs


def is_heldout(name: str, every: int = 10) -> bool:
    """The held-out split: a page whose name's CRC-32 is 0 mod `every` (about 1 in `every`),
    stable when pages are added or removed."""
    return zlib.crc32(name.encode()) % every == 0


PRETRAIN_PACKAGE = "manpages"
PRETRAIN_SECTIONS = ("man1", "man4", "man5", "man7", "man8")
FINETUNE_PACKAGE = "manpages-dev"
FINETUNE_SECTIONS = ("man2", "man3")
