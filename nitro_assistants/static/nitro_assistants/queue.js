/* The review queue, live and by keyboard.
 *
 * Live: the rows on the page follow their review (status, claim, assignment) and reviews that
 * arrive are added (read from this very queue URL, so its filters and columns apply) without
 * reloading the page: ticked boxes, scroll position and focus stay.
 * Keys (outside form fields): j / ArrowDown and k / ArrowUp move, Enter or o opens, x ticks,
 * n claims the next review (in this list's order and filters) and opens it, ? shows or hides
 * the keys' help (Esc closes it).
 */
(function () {
  "use strict";

  // Django's actions (admin/js/actions.js) work on the checkboxes they are handed once, when the
  // page loads: rows added live would be left out of "x of y selected", of the select-all box
  // and of shift-click ranges. Its ready() calls window.Actions at DOMContentLoaded, which comes
  // after this deferred script ran: hand it checkboxes that are looked up at each use instead.
  function currentBoxes() {
    return Array.prototype.slice.call(
      document.querySelectorAll("#result_list tbody input.action-select")
    );
  }
  var liveBoxes = {
    forEach: function (fn) {
      currentBoxes().forEach(fn);
    },
  };
  Object.defineProperty(liveBoxes, "length", {
    get: function () {
      return currentBoxes().length;
    },
  });
  liveBoxes[Symbol.iterator] = function () {
    return currentBoxes()[Symbol.iterator]();
  };
  var djangoActions = window.Actions;
  if (djangoActions) {
    window.Actions = function (boxes, options) {
      return djangoActions(liveBoxes, options);
    };
  }

  function countAdded(added) {
    // The counter's total is the rows on the page (data-actions-icnt): it grows with them.
    var counter = document.querySelector("span.action-counter");
    if (!counter || !added) return;
    counter.dataset.actionsIcnt = String(Number(counter.dataset.actionsIcnt || 0) + added);
    window.dispatchEvent(new Event("pageshow")); // Django's actions recount on it
  }

  function rows() {
    return Array.prototype.slice.call(document.querySelectorAll("#result_list tbody tr"));
  }

  function rowId(row) {
    var box = row.querySelector("input.action-select");
    return box ? Number(box.value) : null;
  }

  function ids() {
    return rows().map(rowId).filter(Boolean);
  }

  function start(root) {
    var d = root.dataset;
    var me = Number(d.me);
    var newest = Math.max.apply(null, [0].concat(ids()));
    var skew = 0;
    var pendingView = !/[?&]status=(?!pending)/.test(window.location.search);
    var poller = null;

    function claimText(claim) {
      var age = NitroLive.minutesSince(claim.since, Date.now() + skew);
      return claim.short + " · " + age + " " + d.labelMin;
    }

    // Returns whether the row's status changed (the list's counts may have too).
    function updateRow(row, state) {
      var status = row.querySelector("td.field-status");
      var moved = !!status && status.textContent !== state.status_label;
      if (moved) status.textContent = state.status_label;
      row.classList.toggle("nitro-row-closed", state.status !== "pending" && pendingView);
      var claim = row.querySelector(".nitro-claim");
      if (claim) {
        var text = state.claim ? claimText(state.claim) : "—";
        if (claim.textContent !== text) claim.textContent = text;
        claim.classList.toggle("nitro-claimed", !!state.claim);
        claim.classList.toggle("nitro-claim-mine", !!state.claim && Number(state.claim.user) === me);
        claim.dataset.since = state.claim ? state.claim.since : "";
        claim.title = state.claim ? state.claim.name : "";
      }
      var assigned = row.querySelector(".nitro-assigned");
      if (assigned) {
        var who = state.assigned ? d.labelFor.replace("%s", state.assigned) : "";
        if (assigned.textContent !== who) assigned.textContent = who;
        assigned.hidden = !who;
      }
      return moved;
    }

    // The counts the page was rendered with ("7 results (9 total)" by the search box, "7 reviews"
    // under the list, "Select all 7 reviews" across pages), as the fresh page has them: how many
    // reviews the list's filters hold now. A closed row stays on screen, marked, but no longer
    // counts. Only text and plain links are taken: Django's actions hold listeners on the rest.
    var COUNTS = [
      ["#changelist-search span.small.quiet", "html"],
      ["#changelist-form p.paginator", "html"],
      ["#changelist-form .actions span.all", "text"],
      ["#changelist-form .actions span.question a", "text"],
    ];

    function updateCounts(doc) {
      COUNTS.forEach(function (pair) {
        var mine = document.querySelectorAll(pair[0]);
        var fresh = doc.querySelectorAll(pair[0]);
        mine.forEach(function (element, i) {
          var from = fresh[i];
          if (!from) return;
          if (pair[1] === "html") {
            if (element.innerHTML !== from.innerHTML) element.innerHTML = from.innerHTML;
          } else if (element.textContent !== from.textContent) {
            element.textContent = from.textContent;
          }
        });
      });
    }

    // Read this very queue URL again: rows that arrived are added, and the counts follow.
    function refresh() {
      fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
        .then(function (r) {
          return r.ok ? r.text() : "";
        })
        .then(function (html) {
          if (!html) return;
          var doc = new DOMParser().parseFromString(html, "text/html");
          updateCounts(doc);
          var tbody = document.querySelector("#result_list tbody");
          if (!tbody) {
            // The queue was empty: it has no table (and Django's actions were never set up).
            // Its form holds nothing a reviewer typed: take the fresh one's content whole.
            var fresh = doc.getElementById("changelist-form");
            var mine = document.getElementById("changelist-form");
            if (!fresh || !mine || !fresh.querySelector("#result_list tbody tr")) return;
            mine.innerHTML = fresh.innerHTML;
            rows().forEach(function (row) {
              row.classList.add("nitro-row-new");
            });
            if (window.Actions) window.Actions(document.querySelectorAll("tr input.action-select"));
            if (poller) poller.now();
            return;
          }
          var have = {};
          ids().forEach(function (id) {
            have[id] = true;
          });
          var fresh = Array.prototype.slice.call(doc.querySelectorAll("#result_list tbody tr"));
          var added = 0;
          fresh.forEach(function (row, index) {
            var id = rowId(row);
            if (!id || have[id]) return;
            var imported = document.importNode(row, true);
            imported.classList.add("nitro-row-new");
            // Place it where the fresh page has it: before the next row both pages share.
            var before = null;
            for (var i = index + 1; i < fresh.length && !before; i++) {
              var next = rowId(fresh[i]);
              if (have[next]) before = tbody.querySelector('input.action-select[value="' + next + '"]');
            }
            tbody.insertBefore(imported, before ? before.closest("tr") : null);
            added += 1;
          });
          countAdded(added);
          if (added && poller) poller.now();
        })
        .catch(function () {});
    }

    var url = d.liveUrl;
    poller = NitroLive.poll(
      {
        toString: function () {
          return url + "?ids=" + ids().join(",");
        },
      },
      d.pollSeconds,
      function (body) {
        if (body.now) skew = Date.parse(body.now) - Date.now();
        NitroLive.setCount(body.pending);
        var states = body.rows || {};
        var moved = false;
        rows().forEach(function (row) {
          var state = states[rowId(row)];
          if (state && updateRow(row, state)) moved = true;
        });
        if (body.newest > newest || moved) {
          newest = Math.max(newest, body.newest || 0);
          refresh();
        }
      }
    );

    // -- keyboard ----------------------------------------------------------------------------
    var focus = -1;
    var help = document.getElementById("nitro-keys-help");
    var helpToggle = document.getElementById("nitro-keys-toggle");

    function showHelp(show) {
      if (!help) return;
      help.hidden = !show;
      if (helpToggle) helpToggle.setAttribute("aria-expanded", show ? "true" : "false");
    }

    if (helpToggle) {
      helpToggle.addEventListener("click", function () {
        showHelp(help.hidden);
      });
    }

    function move(to) {
      var list = rows();
      if (!list.length) return;
      focus = Math.min(Math.max(to, 0), list.length - 1);
      list.forEach(function (row, i) {
        row.classList.toggle("nitro-row-focus", i === focus);
      });
      list[focus].scrollIntoView({ block: "nearest" });
      var link = list[focus].querySelector("a.nitro-held");
      if (link) link.focus({ preventScroll: true });
    }

    document.addEventListener("keydown", function (event) {
      var target = event.target;
      if (event.altKey || event.ctrlKey || event.metaKey) return;
      if (target.closest && target.closest("input, textarea, select, [contenteditable]")) return;
      var list = rows();
      var current = rows()[focus];
      switch (event.key) {
        case "j":
        case "ArrowDown":
          move(focus + 1);
          break;
        case "k":
        case "ArrowUp":
          move(focus < 0 ? list.length - 1 : focus - 1);
          break;
        case "Enter":
        case "o":
          if (!current) return;
          var link = current.querySelector("a.nitro-held");
          if (link) window.location.href = link.href;
          break;
        case "x":
          if (!current) return;
          var box = current.querySelector("input.action-select");
          if (box) box.click();
          break;
        case "n":
          var next = document.getElementById("nitro-next-review");
          if (next) window.location.href = next.href;
          break;
        case "?":
          showHelp(help && help.hidden);
          break;
        case "Escape":
          if (!help || help.hidden) return;
          showHelp(false);
          break;
        default:
          return;
      }
      event.preventDefault();
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var root = document.getElementById("nitro-queue");
    if (root && window.NitroLive) start(root);
  });
})();
