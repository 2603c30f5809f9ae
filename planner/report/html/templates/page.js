// moeplan's HTML report: sortable tables. The page reads the same without this script: it only
// adds sort buttons to the headers of tables marked "sortable". A plan and the variants folded
// under it share one <tbody> and move together; they sort by the plan's own row.
(function () {
  "use strict";

  function keyOf(body, column) {
    var cell = body.rows[0] && body.rows[0].cells[column];
    if (!cell) return null;
    var raw = cell.getAttribute("data-value");
    if (raw === null) raw = cell.textContent.trim();
    if (raw === "" || raw === "-") return null;
    var number = Number(raw);
    return isNaN(number) ? raw.toLowerCase() : number;
  }

  function compare(a, b, ascending) {
    if (a === null && b === null) return 0;
    if (a === null) return 1; // rows without a value go last either way
    if (b === null) return -1;
    var order = a < b ? -1 : a > b ? 1 : 0;
    return ascending ? order : -order;
  }

  function sortTable(table, column, header) {
    var ascending = header.getAttribute("aria-sort") !== "ascending";
    var headers = table.tHead.rows[0].cells;
    for (var i = 0; i < headers.length; i++) headers[i].removeAttribute("aria-sort");
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var bodies = Array.prototype.slice.call(table.tBodies);
    var keyed = bodies.map(function (body, index) {
      return { body: body, key: keyOf(body, column), index: index };
    });
    keyed.sort(function (x, y) {
      return compare(x.key, y.key, ascending) || x.index - y.index;
    });
    keyed.forEach(function (item) {
      table.appendChild(item.body);
    });
  }

  var tables = document.querySelectorAll("table.sortable");
  Array.prototype.forEach.call(tables, function (table) {
    var headers = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(headers, function (header, column) {
      if (!header.hasAttribute("data-sortable")) return;
      var button = document.createElement("button");
      button.type = "button";
      button.title = "sort by " + header.textContent.trim();
      while (header.firstChild) button.appendChild(header.firstChild);
      header.appendChild(button);
      button.addEventListener("click", function () {
        sortTable(table, column, header);
      });
    });
  });
})();
