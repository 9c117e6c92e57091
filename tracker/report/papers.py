"""The source papers by number (the project's seeds), and their naming in a report: a heading names a
paper by its number alone ('paper 003, Figures 10/11'), and the page ends with the list of the
papers it named, each once with its authors and title."""

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
    """``label`` ('paper 000', 'Figures 6/7') as a heading shows it, short ('paper 003, Figures 6/7');
    the papers it names join ``seen``, for the list at the page's end (``references``)."""
    if _FIGURES.match(label):
        label = f"paper 003, {label}"
    seen.update(number for number in _NUMBER.findall(label) if number in PAPERS)
    return label


def references(seen: set[str]) -> list[str]:
    """'paper 000: Salim, ...' for every paper a page named, in number order."""
    return [f"paper {number}: {PAPERS[number]}" for number in sorted(seen)]
