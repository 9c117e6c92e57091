// tracker serve: tables that sort and filter, and plots that open what a click names.
"use strict";

function sortKey(cell) {
  const raw = cell.dataset.sort;
  const number = Number(raw);
  return raw !== "" && raw !== "None" && !Number.isNaN(number) ? number : raw.toLowerCase();
}

function sortBy(header) {
  const table = header.closest("table");
  const column = Array.from(header.parentNode.children).indexOf(header);
  const ascending = header.getAttribute("aria-sort") !== "ascending";
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  rows.sort((a, b) => {
    const x = sortKey(a.cells[column]), y = sortKey(b.cells[column]);
    if (typeof x !== typeof y) return typeof x === "number" ? -1 : 1;  // numbers before blanks
    return (x < y ? -1 : x > y ? 1 : 0) * (ascending ? 1 : -1);
  });
  rows.forEach((row) => body.appendChild(row));
  table.querySelectorAll("th").forEach((th) => th.removeAttribute("aria-sort"));
  header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
}

function filterRows(input) {
  const wanted = input.value.toLowerCase();
  const table = document.getElementById(input.dataset.table);
  Array.from(table.tBodies[0].rows).forEach((row) => {
    row.hidden = wanted !== "" && !row.textContent.toLowerCase().includes(wanted);
  });
}

function drawPlots() {
  document.querySelectorAll(".plot").forEach((div) => {
    const figure = JSON.parse(div.dataset.figure);
    Plotly.newPlot(div, figure.data, figure.layout, {displaylogo: false, responsive: true});
    div.on("plotly_click", (event) => {
      const link = event.points.length ? event.points[0].customdata : null;
      if (link) window.location.assign(link);
    });
  });
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("table.sortable th").forEach((th) => th.addEventListener("click", () => sortBy(th)));
  document.querySelectorAll("input.filter").forEach((input) => input.addEventListener("input", () => filterRows(input)));
  if (window.Plotly) drawPlots();
});
