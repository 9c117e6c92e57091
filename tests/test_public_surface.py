"""The package docstring's example, run line by line against a real store, so it cannot go stale."""

from __future__ import annotations

import ast
import re
import textwrap

import pytest

import tracker


def docstring_example() -> str:
    """The indented block of ``tracker.__doc__`` after ``import tracker``, as Python source."""
    block = re.search(r"\n( {4}import tracker\n.*?)\n\n", tracker.__doc__ or "", re.S)
    assert block, "tracker.__doc__ has no indented example starting with `import tracker`"
    return textwrap.dedent(block.group(1))


def test_the_docstring_example_runs(tmp_path, monkeypatch):
    import tracker.profile
    from tracker.errors import BackendUnavailable

    def no_gpu(what: str) -> str:
        raise BackendUnavailable(f"{what} needs an NVIDIA GPU, and this machine has none (the test hides it)")

    monkeypatch.setattr(tracker.profile, "require_gpu", no_gpu)  # the example's auto profile: a model run
    monkeypatch.chdir(tmp_path)  # the example's trace.db and report/ land here
    made = tracker.profile.profile(
        "trace.db", tracker.nets.build("alexnet"), 4, backend="model", device=tracker.model.lookup("h100")
    )
    example = docstring_example()
    namespace: dict = {}
    for statement in ast.parse(example).body:
        line = ast.get_source_segment(example, statement)
        try:
            exec(compile(ast.Module([statement], type_ignores=[]), "tracker.__doc__", "exec"), namespace)
        except Exception as exc:
            pytest.fail(f"the docstring's `{line}` raised {type(exc).__name__}: {exc}")
    assert namespace["run"] == made.run_id
    assert [r["run_id"] for r in tracker.list_runs(namespace["store"])] == [made.run_id, made.run_id + 1]
    assert any((tmp_path / "report").iterdir())
