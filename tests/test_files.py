"""Atomic writes: a reader sees the old file or the new one, never a half-written one."""

from __future__ import annotations

import stat

import pytest

import damcha_ts.files as files
from damcha_ts.files import write_atomically


def test_text_and_bytes_replace_the_file_readable_by_everyone(tmp_path):
    path = tmp_path / "result.json"
    write_atomically(path, '{"a": 1}')
    assert path.read_text() == '{"a": 1}'
    write_atomically(path, b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_a_crash_before_the_rename_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "report.md"
    write_atomically(path, "old")

    def crash(*args, **kwargs):
        raise OSError("simulated crash between writing the temp file and the rename")

    monkeypatch.setattr(files.os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        write_atomically(path, "new")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["report.md"]
