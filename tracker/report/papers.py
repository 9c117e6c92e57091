"""The source papers by number (the project's seeds), and their naming in a report: a paper's number
comes with its authors and title the first time a page uses it, and the page ends with the list."""

from __future__ import annotations

import re

PAPERS = {
    "000": "Salim, Dawwd and Ali, U-Net Cost Analysis Using Roofline Model (2022)",
    "001": "3D U-Net Optimization Using TVM (draft)",
    "002": "Memory Consumption Modeling of Deep Learning Workloads: 3D U-Net (white paper)",
    "003": "Dong, Gong, Sun, Baruah and Kaeli, Characterizing the Microarchitectural Implications of a "
           "Convolutional Neural Network (CNN) Execution on GPUs (ICPE'18)",
    "004": "Kim et al., Performance Analysis of CNN Frameworks for GPUs (ISPASS'17)",
}
_NUMBER = re.compile(r"\bpaper (\d{3})\b")
_FIGURES = re.compile(r"^(Figures?|Table) ")  # a bare figure number is paper 003's, the method's


def cite(label: str, seen: set[str]) -> str:
    """``label`` ('paper 000', 'Figures 6/7') with each paper named the first time (``seen``
    holds the numbers named already, and gains this label's)."""
    if _FIGURES.match(label):
        label = f"paper 003 {label}"

    def name(match: re.Match) -> str:
        number = match.group(1)
        if number in seen or number not in PAPERS:
            return match.group(0)
        seen.add(number)
        return f"{match.group(0)} ({PAPERS[number]})"

    return _NUMBER.sub(name, label)


def references(seen: set[str]) -> list[str]:
    """'paper 000: Salim, ...' for every paper a page named, in number order."""
    return [f"paper {number}: {PAPERS[number]}" for number in sorted(seen)]
