// The console's only script. Pages work without it; with it, a section
// marked data-live="URL" is replaced by a fresh copy from URL every two
// seconds until the copy says data-final, a log followed (a checked
// data-follow box) stays scrolled to its end, and "select all" boxes
// toggle their table's row boxes.
(function () {
  "use strict";
  function poll(el) {
    var url = el.getAttribute("data-live");
    if (!url || el.hasAttribute("data-final")) return;
    setTimeout(function () {
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
        .then(function (text) {
          var box = document.createElement("div");
          box.innerHTML = text;
          var fresh = box.firstElementChild;
          if (fresh) { el.replaceWith(fresh); follow(); poll(fresh); } else { poll(el); }
        })
        .catch(function () { poll(el); });
    }, 2000);
  }
  function follow() {
    document.querySelectorAll("input[data-follow]").forEach(function (box) {
      var log = document.getElementById(box.getAttribute("data-follow"));
      if (box.checked && log) { log.scrollTop = log.scrollHeight; }
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    follow();
    document.querySelectorAll("input[data-follow]").forEach(function (box) { box.addEventListener("change", follow); });
    document.querySelectorAll("[data-live]").forEach(poll);
    document.querySelectorAll("input[data-select-all]").forEach(function (all) {
      all.addEventListener("change", function () {
        var table = all.closest("table");
        table.querySelectorAll("input[name='" + all.getAttribute("data-select-all") + "']")
          .forEach(function (box) { box.checked = all.checked; });
      });
    });
  });
})();
