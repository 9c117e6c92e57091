"""The report as pages for people: index.html and report.md with a header in words, a table of
contents, one finding per figure, tables whose numbers carry units (tracker.units) and whose empty
cells are blank, and the sections a run has no counters for folded into one line that names the
command that fills them."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from tracker import units
from tracker.report.document import Report, Section
from tracker.report.papers import cite, references

STYLE = """
body{font-family:system-ui,sans-serif;max-width:1400px;margin:auto;padding:1em 2em;color:#222;line-height:1.45}
h1{font-size:1.5em;margin-bottom:.2em}.lede{font-size:1.05em;color:#333;max-width:70em}
nav ol{columns:2;font-size:.95em}img{max-width:100%;height:auto;border:1px solid #eee}
table{border-collapse:collapse;font-size:12px;margin:.5em 0}
td,th{border:1px solid #ddd;padding:2px 8px;text-align:right;white-space:nowrap}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
.about th,.about td{text-align:left;white-space:normal}
.finding{background:#eef5ff;padding:.4em .8em;border-left:4px solid #4C72B0}
.missing{color:#666}details{margin:.6em 0}summary{cursor:pointer}.scroll{overflow-x:auto}
code{background:#f4f4f4;padding:0 .3em}
"""


def write_pages(report: Report, out: Path) -> list[Path]:
    pages = {"index.html": _html(report), "report.md": _markdown(report)}
    for name, text in pages.items():
        (out / name).write_text(text, encoding="utf-8")
    return [out / name for name in pages]


def shown(table: pd.DataFrame) -> pd.DataFrame:
    """The table less its columns with no value in any row (a model run has no spread)."""
    return table.loc[:, [not all(units.is_missing(v) or v == "" for v in table[c]) for c in table.columns]]


def table_cells(table: pd.DataFrame) -> list[list[str]]:
    """Every cell as a person reads it: units from the column's name, blank where empty."""
    columns = [str(c) for c in table.columns]
    return [[units.cell(column, value) for column, value in zip(columns, row)] for row in table.itertuples(index=False)]


def _about_rows(about: dict) -> list[tuple[str, str]]:
    return [
        (key, units.cell(key, value)) for key, value in about.items() if not units.is_missing(value) and value != ""
    ]


def _drawn(report: Report) -> list[Section]:
    return [s for s in report.sections if not s.folded and not s.empty]


def _empty_line(report: Report) -> str | None:
    """The sections with nothing to show, each with why, in one line."""
    empty = [f"{s.title} ({s.missing})" for s in report.sections if s.empty]
    return f"Left out, with nothing to show: {'; '.join(empty)}." if empty else None


def _folded_line(report: Report) -> str | None:
    folded = [s for s in report.sections if s.folded]
    if not folded:
        return None
    return (
        f"{len(folded)} sections need hardware counters, which this run did not collect: "
        f"{', '.join(s.title for s in folded)}."
    )


def _html(report: Report) -> str:
    e = html.escape
    parts = [
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{e(report.heading)}</title>"
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{e(report.heading)}</h1>",
        f"<p class='lede'>{e(report.summary)}</p>",
        "<details><summary>Settings</summary><table class='about'>",
        *(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in _about_rows(report.about)),
        "</table></details>",
        "<nav><h2>Contents</h2><ol>",
        *(f"<li><a href='#{s.key}'>{e(s.title)}</a></li>" for s in _drawn(report)),
    ]
    folded = _folded_line(report)
    if folded:
        parts.append("<li><a href='#not-collected'>Not collected in this run</a></li>")
    parts.append("</ol></nav>")
    seen: set[str] = set()
    for s in _drawn(report):
        parts += [
            f"<section id='{s.key}'><h2>{e(s.title)} <small>{e(cite(s.paper, seen))}</small></h2>",
            f"<p class='finding'>{e(s.finding)}</p>",
        ]
        if s.figure is not None:  # the image links to itself: a wide figure opens at full size
            parts.append(
                f"<a href='{s.key}.svg' title='open at full size'><img src='{s.key}.svg' alt='{e(s.title)}'></a>"
            )
        if s.missing:
            parts.append(f"<p class='missing'>Not drawn: {e(s.missing)}</p>")
        if s.table is not None and not s.table.empty:
            parts.append(
                f"<details><summary>Table ({units.count_of(len(s.table), 'row')})</summary>"
                f"<div class='scroll'>{_html_table(shown(s.table))}</div></details>"
            )
        parts.append("</section>")
    if _empty_line(report):
        parts.append(f"<p class='missing'>{e(_empty_line(report) or '')}</p>")
    if folded:
        command = report.fill_command
        parts.append(
            f"<section id='not-collected'><h2>Not collected in this run</h2><p class='missing'>{e(folded)} "
            f"Fill them with <code>{e(command)}</code> on a GPU.</p></section>"
        )
    if seen:
        parts += [
            "<section id='references'><h2>References</h2><ul>",
            *(f"<li>{e(line)}</li>" for line in references(seen)),
            "</ul></section>",
        ]
    parts.append("</body></html>")
    return "\n".join(parts)


def _html_table(table: pd.DataFrame) -> str:
    e = html.escape
    head = "".join(f"<th>{e(units.header(str(c)))}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td>{e(v)}</td>" for v in row) + "</tr>" for row in table_cells(table))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to dashes."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def _markdown(report: Report) -> str:
    lines = [f"# {report.heading}", "", report.summary, "", "## Contents", ""]
    lines += [f"{i}. [{s.title}](#{_anchor(s.title)})" for i, s in enumerate(_drawn(report), 1)]
    folded = _folded_line(report)
    if folded:
        lines.append(f"{len(_drawn(report)) + 1}. [Not collected in this run](#not-collected-in-this-run)")
    lines += ["", "## Settings", "", "| setting | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in _about_rows(report.about)]
    seen: set[str] = set()
    for s in _drawn(report):
        lines += ["", f"## {s.title}", "", f"_{cite(s.paper, seen)}_", "", f"**Finding:** {s.finding}", ""]
        if s.figure is not None:
            lines += [f"[![{s.title}]({s.key}.png)]({s.key}.svg)", ""]
        if s.missing:
            lines += [f"_Not drawn: {s.missing}_", ""]
        if s.table is not None and not s.table.empty:
            table = shown(s.table)
            lines += [
                "| " + " | ".join(units.header(str(c)) for c in table.columns) + " |",
                "|" + "---|" * len(table.columns),
            ]
            lines += ["| " + " | ".join(row) + " |" for row in table_cells(table)]
    if _empty_line(report):
        lines += ["", f"_{_empty_line(report)}_"]
    if folded:
        lines += ["", "## Not collected in this run", "", f"{folded} Fill them with `{report.fill_command}` on a GPU."]
    if seen:
        lines += ["", "## References", "", *(f"- {line}" for line in references(seen))]
    return "\n".join(lines) + "\n"
