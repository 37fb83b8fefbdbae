"""One line of text for a message: errors and user-controlled strings reach terminals and logs safely.

Why one helper: msub, the reorderer, the store and the Slurm backends each turn an exception (or a
command's stderr) into a one-line message, and any of them may carry text a user wrote (a job's comment,
a model file's exception, a corrupted database page). Control bytes are escaped, never printed raw.
Standard library only: msub imports it on every submission.
"""

from __future__ import annotations


def printable(text: str) -> str:
    """`text` with every non-printable character (ESC, NUL, newlines, ...) written as a visible escape."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def one_line(what: BaseException | str | bytes, *, limit: int = 300, all_lines: bool = False,
             empty: str | None = None) -> str:
    """The first non-blank line of an exception's message (SQLAlchemy's wrapped `orig` preferred), or of
    a command's output; `all_lines` joins the distinct lines with "; " instead (Slurm's multi-line
    errors). At most `limit` characters, control bytes escaped. An empty message gives `empty`, or the
    exception's type name."""
    if isinstance(what, BaseException):
        orig = getattr(what, "orig", None)
        text = str(orig if orig is not None else what)
        fallback = empty if empty is not None else type(what).__name__
    else:
        text = what.decode("utf-8", "replace") if isinstance(what, bytes) else str(what)
        fallback = empty if empty is not None else ""
    lines = [printable(ln.strip()) for ln in text.splitlines() if ln.strip()]
    if not lines:
        return fallback
    out = "; ".join(dict.fromkeys(lines)) if all_lines else lines[0]
    return out[:limit]


def option_value_start(line: str, at: int) -> int | None:
    r"""Where an option's value starts when its name ends at AT: `(?:=|\s+)["']?` matched there in string
    methods (msub reads `--arch X` and `--precision=X` without `re`). None when neither `=` nor a space
    follows the name."""
    n = len(line)
    if at < n and line[at] == "=":
        at += 1
    elif at < n and line[at].isspace():
        while at < n and line[at].isspace():
            at += 1
    else:
        return None
    return at + 1 if at < n and line[at] in "\"'" else at
