// Progressive enhancement only: every page works without it. Adds a box
// that selects every request of a dead list at once.
document.querySelectorAll("table.dead-list").forEach(function (table) {
  var head = table.querySelector("thead th.check");
  var boxes = table.querySelectorAll("tbody input[type=checkbox][name=id]");
  if (!head || boxes.length === 0) {
    return;
  }
  var all = document.createElement("input");
  all.type = "checkbox";
  all.setAttribute("aria-label", "Select all");
  all.addEventListener("change", function () {
    boxes.forEach(function (b) { b.checked = all.checked; });
  });
  head.replaceChildren(all);
});
