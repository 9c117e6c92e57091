"""What a report is made of, below everything that builds or writes one: its ``Section``s (a
figure, a finding, a table) and the ``Report`` that holds them with its header."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass
class Section:
    key: str  # file stem and anchor
    title: str
    paper: str  # which paper-003 figure it redraws
    figure: object | None  # matplotlib Figure
    finding: str
    table: pd.DataFrame | None = None
    missing: str | None = None  # why there is no figure
    needs_counters: bool = False  # empty because the run has no hardware counters

    @property
    def folded(self) -> bool:
        """Shown only as a name in the page's 'not collected' line."""
        return self.needs_counters and self.figure is None

    @property
    def empty(self) -> bool:
        """Nothing to show (no figure, finding or table row): left out, named with why in one line."""
        return (
            not self.needs_counters
            and self.figure is None
            and not self.finding
            and (self.table is None or self.table.empty)
        )


@dataclass
class Report:
    heading: str
    summary: str  # the header in words: network, batch, GPU, backend, variants, L1, ncu, repeats, when
    about: dict  # the settings behind it, one row each
    sections: list[Section] = field(default_factory=list)
    fill_command: str = ""  # the command that collects the counters folded sections need
    unfinished: str | None = None  # what a run that did not complete holds (tracker.profilers.unfinished)

    def __post_init__(self) -> None:
        # A section's key names its figure's files and its anchor: two alike would draw one figure
        # over the other (as a fusion experiment's pairs and its speedups would).
        keys = [s.key for s in self.sections]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            raise ValueError(f"report sections share the key(s) {', '.join(repeated)}")
