// The review screen's record of what the reviewer opened (docs/redaction.md, "Complete
// previews"): each collapsed value of a held call that is opened adds its path to the decision
// form's hidden field "opened", which the decision states as shown. The parts a rule names are
// drawn open for a browser without this script (the field then lists them); with it, they are
// folded again here, and an approval needs each of them opened first.
(function () {
  "use strict";

  function start() {
    var field = document.querySelector('form.nitro-decide input[name="opened"]');
    if (!field) {
      return;
    }
    var opened = [];
    try {
      opened = JSON.parse(field.value || "[]");
    } catch (error) {
      opened = [];
    }
    var paths = new Set(Array.isArray(opened) ? opened.map(String) : []);
    function write() {
      field.value = JSON.stringify(Array.from(paths));
    }
    document.querySelectorAll("details[data-nitro-path]").forEach(function (details) {
      var path = details.getAttribute("data-nitro-path");
      if (details.hasAttribute("data-nitro-must-show")) {
        details.open = false;
        paths.delete(path);
      }
      details.addEventListener("toggle", function () {
        if (details.open && !paths.has(path)) {
          paths.add(path);
          write();
        }
      });
    });
    write();
    document.documentElement.setAttribute("data-nitro-previews", "ready");
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
