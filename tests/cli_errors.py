"""How a command that refuses its input must end: one line, ``Error: ...``, a non-zero exit."""

from __future__ import annotations

from collections.abc import Container


def refused(result, *words: str, codes: Container[int] | None = None, before: str = "") -> str:
    """The one error line of a failed command, after checking that it printed nothing else
    (``before``: a line its output may start with, such as profile's chosen backend) and exited
    with one of ``codes`` (None: any but 0); each of ``words`` is in that line."""
    assert result.exit_code != 0 if codes is None else result.exit_code in codes, (result.exit_code, result.output)
    assert result.stdout == "" or bool(before) and result.stdout.startswith(before), result.stdout[:500]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr[:2000]
    assert "internal error" not in lines[0] and "Traceback" not in result.output
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]
