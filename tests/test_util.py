"""msched.util: the one-line message helper and the atomic write that msub, the reorderer and the store share."""

from __future__ import annotations

import os
import stat

import pytest

from msched.util.files import write_atomically
from msched.util.text import one_line, printable


def test_control_bytes_are_escaped_never_raw():
    assert printable("a\x1b[31mred\x1f") == "a\\x1b[31mred\\x1f"
    assert "\x1b" not in one_line("job comment \x1b]0;pwned\x07 here")
    assert printable("plain text") == "plain text"


def test_first_line_of_an_exception_prefers_the_wrapped_one():
    class Wrapped(Exception):
        orig = ValueError("database disk image is malformed\nmore detail")
    assert one_line(Wrapped("(sqlite3.DatabaseError) long SQLAlchemy text")) == "database disk image is malformed"
    assert one_line(RuntimeError("")) == "RuntimeError"
    assert one_line(b"  \nfirst\nsecond") == "first"


def test_all_lines_joins_distinct_lines_and_bounds_the_length():
    text = "sbatch: error: A\nsbatch: error: A\n\nsbatch: error: B\n"
    assert one_line(text, all_lines=True) == "sbatch: error: A; sbatch: error: B"
    assert one_line("", all_lines=True, empty="(no message)") == "(no message)"
    assert len(one_line("x" * 1000, limit=40)) == 40


def test_write_atomically_sets_the_mode_and_replaces_whole_files(tmp_path):
    target = tmp_path / "f.json"
    write_atomically(target, "one", mode=0o644)
    assert target.read_text() == "one" and stat.S_IMODE(target.stat().st_mode) == 0o644
    os.chmod(target, 0o640)
    write_atomically(target, b"two", keep_mode=True)
    assert target.read_bytes() == b"two" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]      # no temporary file left


def test_write_atomically_leaves_the_old_file_on_failure(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(TypeError):
        write_atomically(target, 12345)                                  # not str/bytes: nothing written
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]
