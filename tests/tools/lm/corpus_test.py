"""tools/lm/corpus.py: a man page's roff to plain text (what shoal-gpt is trained on), and the
held-out split."""

from tools.lm import corpus


def test_roff_to_text():
    roff = "\n".join([
        '.\\" a comment',
        ".TH EPOLL 7 2023-02-05",
        ".SH NAME",
        "epoll \\- I/O event notification facility",
        ".SH DESCRIPTION",
        "The",
        ".BR epoll (7)",
        "API performs a similar task to",
        ".IR poll (2):",
        "monitoring \\fBmultiple\\fP file descriptors\\(em see",
        ".I ready",
        "lists.",
        ".PP",
        ".EX",
        "int fd = epoll_create1(0);",
        "if (fd == \\-1) exit(1);",
        ".EE",
        ".SS Level\\-triggered",
        "It\\(aqs the default.",
    ])
    assert corpus.roff_to_text(roff) == (
        "NAME\n\nepoll - I/O event notification facility\n\nDESCRIPTION\n\n"
        "The epoll(7) API performs a similar task to poll(2): monitoring multiple file "
        "descriptors-- see ready lists.\n\n"
        "int fd = epoll_create1(0);\nif (fd == -1) exit(1);\n\n"
        "Level-triggered\n\nIt's the default.\n")


def test_heldout_split_is_by_name():
    names = [f"man7/page{i}.7" for i in range(200)]
    held = [n for n in names if corpus.is_heldout(n)]
    assert 10 <= len(held) <= 35  # about 1 in 10
    assert held == [n for n in names if corpus.is_heldout(n)]  # the same every time
