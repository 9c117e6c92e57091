"""``tracker report``: paper 003's figures and tables for a run, a pair of runs or an experiment,
as PNG and SVG, with ``index.html`` and ``report.md`` and a one-line finding per figure computed
from the data. A figure the store cannot draw (no counters in a model or events run) is listed
with the reason instead of being drawn empty."""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tracker.store import Store


@dataclass
class Section:
    key: str  # file stem
    title: str
    paper: str  # which paper-003 figure it redraws
    figure: object | None  # matplotlib Figure
    finding: str
    table: pd.DataFrame | None = None
    missing: str | None = None  # why there is no figure


def write(sections: list[Section], out: Path, heading: str, about: dict) -> list[Path]:
    """Write every figure as PNG and SVG, then index.html and report.md; the paths written."""
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for s in sections:
        if s.figure is not None:
            for ext in ("png", "svg"):
                s.figure.savefig(out / f"{s.key}.{ext}")
                written.append(out / f"{s.key}.{ext}")
            plt.close(s.figure)
    for name, text in (("index.html", _html(sections, heading, about)), ("report.md", _markdown(sections, heading,
                                                                                                  about))):
        (out / name).write_text(text)
        written.append(out / name)
    return written


def _fmt(value) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _markdown(sections: list[Section], heading: str, about: dict) -> str:
    lines = [f"# {heading}", "", *(f"- **{k}**: {_fmt(v)}" for k, v in about.items()), ""]
    for s in sections:
        lines += [f"## {s.title} ({s.paper})", "", f"**Finding:** {s.finding}", ""]
        if s.figure is not None:
            lines += [f"![{s.title}]({s.key}.png)", ""]
        if s.missing:
            lines += [f"_Not drawn: {s.missing}_", ""]
        if s.table is not None and not s.table.empty:
            columns = [str(c) for c in s.table.columns]
            lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in s.table.itertuples(index=False)]
            lines.append("")
    return "\n".join(lines)


def _html(sections: list[Section], heading: str, about: dict) -> str:
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(heading)}</title>",
             "<style>body{font-family:sans-serif;max-width:1400px;margin:auto;padding:1em}"
             "img{max-width:100%}table{border-collapse:collapse;font-size:12px}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
             ".finding{background:#eef5ff;padding:.4em .8em}.missing{color:#888}</style></head><body>",
             f"<h1>{e(heading)}</h1><table>",
             *(f"<tr><th>{e(k)}</th><td>{e(_fmt(v))}</td></tr>" for k, v in about.items()), "</table>",
             "<ul>", *(f"<li><a href='#{s.key}'>{e(s.title)}</a></li>" for s in sections), "</ul>"]
    for s in sections:
        parts.append(f"<h2 id='{s.key}'>{e(s.title)} <small>({e(s.paper)})</small></h2>")
        parts.append(f"<p class='finding'>{e(s.finding)}</p>")
        if s.figure is not None:
            parts.append(f"<img src='{s.key}.svg' alt='{e(s.title)}'>")
        if s.missing:
            parts.append(f"<p class='missing'>Not drawn: {e(s.missing)}</p>")
        if s.table is not None and not s.table.empty:
            parts.append(s.table.to_html(index=False, na_rep="-", float_format=lambda v: f"{v:.4g}", border=0))
    parts.append("</body></html>")
    return "\n".join(parts)


def report(store: Store, target: str, out: Path, against: str | None = None) -> tuple[list[Path], list[Section]]:
    """Report on a run ('3', 'last'), a run against another (``against``), or an experiment ('e2')."""
    from tracker.report import sections as build
    from tracker.store import find_experiment, find_run

    if target.lower().startswith("e") and target.lower() not in ("last", "latest"):
        experiment = find_experiment(store, target)
        heading, about, parts = build.for_experiment(store, experiment.id)
    else:
        run_id = find_run(store, target).id
        heading, about, parts = build.for_run(store, run_id)
        if against is not None:
            other = find_run(store, against).id
            heading = f"run {other} against run {run_id}"
            parts = build.for_comparison(store, run_id, other) + parts
    return write(parts, out, heading, about), parts
