// convmem viewer: progressive enhancement only; every page works without this script.
(function () {
  "use strict";
  // Times: the server renders its own local time; show the reader's local time instead.
  document.querySelectorAll("time[datetime]").forEach(function (el) {
    var d = new Date(el.getAttribute("datetime"));
    if (isNaN(d.getTime())) return;
    var pad = function (n) { return String(n).padStart(2, "0"); };
    el.textContent = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  });

  // Click a fact: light up its source messages on this page without a reload. When a source is
  // not on the current timeline page, follow the link (the server lists the fact's messages).
  function highlight(factId) {
    var row = document.querySelector('tr.fragment[data-fact="' + CSS.escape(factId) + '"]');
    if (!row) return false;
    var ids = (row.getAttribute("data-sources") || "").split(" ").filter(Boolean);
    if (!ids.length) return false;
    var found = ids.map(function (id) {
      return document.querySelector('#timeline tr.message[data-message="' + CSS.escape(id) + '"]');
    });
    if (found.some(function (el) { return el === null; })) return false;
    document.querySelectorAll("tr.message.hl").forEach(function (el) { el.classList.remove("hl"); });
    document.querySelectorAll("tr.fragment.selected").forEach(function (el) { el.classList.remove("selected"); });
    row.classList.add("selected");
    found.forEach(function (el) { el.classList.add("hl"); });
    found[0].scrollIntoView({ block: "center" });
    return true;
  }
  document.querySelectorAll("a.fact-link").forEach(function (a) {
    a.addEventListener("click", function (ev) {
      if (ev.metaKey || ev.ctrlKey || ev.shiftKey) return;
      if (highlight(a.getAttribute("data-fact"))) {
        ev.preventDefault();
        history.replaceState(null, "", a.getAttribute("href"));
      }
    });
  });

  // Inject preview: switching the vendor shows its payload at once.
  var vendor = document.getElementById("vendor");
  if (vendor && vendor.form) {
    vendor.addEventListener("change", function () {
      var options = vendor.form.querySelector("textarea[name=options]");
      if (options) options.value = "";  // the new vendor's own placeholder options
      vendor.form.submit();
    });
  }

  // Deleting a fact asks first.
  document.querySelectorAll('form[action$="/delete"] button.danger').forEach(function (b) {
    if (b.closest("form.confirm")) return;
    b.addEventListener("click", function (ev) {
      if (!window.confirm("Delete this fact? It stays in the audit log.")) ev.preventDefault();
    });
  });
})();
