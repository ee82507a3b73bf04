/* Live updates of the review screen, and the poller the queue uses too.
 *
 * NitroLive.poll(url, seconds, onChange) asks `url` every `seconds` with the ETag of the last
 * answer: an unchanged state is a 304 (nothing to do); a changed one calls onChange(body). It
 * polls four times slower while the tab is hidden and at once when it shows again. Nothing here
 * reloads the page: it rewrites the few elements whose state changed.
 */
(function () {
  "use strict";

  function csrfToken() {
    var input = document.querySelector("input[name=csrfmiddlewaretoken]");
    if (input) return input.value;
    var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  function poll(url, seconds, onChange) {
    var etag = null;
    var timer = null;
    var busy = false;
    var period = Math.max(Number(seconds) || 3, 0.5) * 1000;

    function schedule() {
      clearTimeout(timer);
      timer = setTimeout(tick, document.hidden ? period * 4 : period);
    }

    function tick() {
      if (busy) return schedule();
      busy = true;
      var headers = { Accept: "application/json" };
      if (etag) headers["If-None-Match"] = etag;
      fetch(url, { headers: headers, credentials: "same-origin", cache: "no-store" })
        .then(function (response) {
          if (response.status === 304) return null;
          if (!response.ok) throw new Error("live: " + response.status);
          etag = response.headers.get("ETag");
          return response.json();
        })
        .then(function (body) {
          if (body) onChange(body);
        })
        .catch(function () {
          /* a dropped poll: the next one catches up */
        })
        .then(function () {
          busy = false;
          schedule();
        });
    }

    document.addEventListener("visibilitychange", function () {
      if (!document.hidden) tick();
    });
    tick();
    return { now: tick };
  }

  function setCount(pending) {
    document.querySelectorAll("[data-nitro-count]").forEach(function (badge) {
      badge.textContent = String(pending);
      badge.hidden = !pending;
    });
  }

  function minutesSince(iso, serverNow) {
    if (!iso) return 0;
    return Math.max(Math.floor((serverNow - Date.parse(iso)) / 60000), 0);
  }

  window.NitroLive = {
    poll: poll,
    csrfToken: csrfToken,
    setCount: setCount,
    minutesSince: minutesSince,
  };

  // -- the review screen ---------------------------------------------------------------------
  function reviewScreen(root) {
    var d = root.dataset;
    var me = Number(d.me);
    var claimBox = document.getElementById("nitro-claim");
    var claimText = document.getElementById("nitro-claim-text");
    var takeOver = document.getElementById("nitro-take-over");
    var nowBox = document.getElementById("nitro-live-now");
    var lastHolder = null;
    var skew = 0; // server clock minus ours
    // mayClaim: this reviewer may decide the review and it is pending; holds: the claim is theirs.
    var mayClaim = !!d.renew;
    var holds = mayClaim && !!document.querySelector("#nitro-claim.nitro-claim-mine");
    var claiming = false;

    function showClaim(claim) {
      if (!claimBox) return;
      var mine = claim && Number(claim.user) === me;
      claimBox.classList.toggle("nitro-claim-mine", !!mine);
      claimBox.classList.toggle("nitro-claim-other", !!claim && !mine);
      claimBox.hidden = !claim;
      if (takeOver) takeOver.hidden = !claim || mine;
      if (!claim) {
        claimText.textContent = "";
      } else {
        var age = minutesSince(claim.since, Date.now() + skew) + " " + d.labelMin;
        claimText.textContent = "";
        if (mine) {
          claimText.textContent = d.labelMine + " · " + age;
        } else {
          var who = document.createElement("strong");
          who.textContent = claim.name;
          claimText.appendChild(who);
          var took = lastHolder === me;
          claimText.appendChild(
            document.createTextNode(" " + (took ? d.labelTaken : d.labelOther) + " (" + age + ")")
          );
        }
      }
      lastHolder = claim ? Number(claim.user) : null;
      holds = !!mine;
      // Someone else's claim is left alone (taken back only by the button); a review nobody
      // holds any more (their tab closed, their lease ran out) is claimed by the open screen.
      if (!claim && mayClaim && !claiming) {
        claiming = true;
        post("renew").then(function () {
          claiming = false;
        });
      }
    }

    function showReview(state) {
      if (!state) return;
      var status = document.getElementById("nitro-status");
      if (status && status.textContent !== state.status_label) {
        status.textContent = state.status_label;
        status.className = "nitro-status nitro-status-" + state.status;
      }
      // The heading, breadcrumb and tab title name the status too ("Review #12 ..., applied"),
      // and the thread's state beside it moved with the same change: all follow together.
      var heading = document.getElementById("nitro-title");
      if (heading && state.title && heading.textContent !== state.title) {
        var before = heading.textContent;
        document.querySelectorAll("[data-nitro-title]").forEach(function (element) {
          element.textContent = state.title;
        });
        if (document.title.indexOf(before) >= 0) document.title = document.title.replace(before, state.title);
      }
      var threadStatus = document.getElementById("nitro-thread-status");
      if (threadStatus && state.thread_status_label && threadStatus.textContent !== state.thread_status_label) {
        threadStatus.textContent = state.thread_status_label;
        threadStatus.className = "nitro-thread-status-" + state.thread_status;
      }
      var outcome = document.getElementById("nitro-outcome");
      if (outcome && state.outcome_label) {
        var text = state.outcome_label + (state.error ? " — " + state.error : "");
        if (outcome.textContent.trim() !== text) outcome.textContent = text;
        outcome.dataset.outcome = state.outcome;
      }
      if (state.status !== d.status) {
        d.status = state.status;
        if (state.status !== "pending") {
          mayClaim = holds = false;
          if (takeOver) takeOver.hidden = true;
        }
      }
      var serverNow = document.querySelector(".nitro-now");
      if (nowBox && state.next && !serverNow) {
        nowBox.textContent = d.labelWaits + " ";
        var link = document.createElement("a");
        link.href = state.next.url;
        link.textContent = state.next.kind + " #" + state.next.pk;
        nowBox.appendChild(link);
        if (state.next.summary) nowBox.appendChild(document.createTextNode(" — " + state.next.summary));
        nowBox.hidden = false;
      } else if (nowBox && !state.next) {
        nowBox.hidden = true;
      }
      showClaim(state.claim);
    }

    function post(action, beacon) {
      var form = new FormData();
      form.append("action", action);
      form.append("csrfmiddlewaretoken", csrfToken());
      if (beacon && navigator.sendBeacon) return navigator.sendBeacon(d.claimUrl, form);
      return fetch(d.claimUrl, {
        method: "POST",
        body: form,
        credentials: "same-origin",
        headers: { Accept: "application/json", "X-CSRFToken": csrfToken() },
      })
        .then(function (r) {
          return r.ok ? r.json() : null;
        })
        .then(function (body) {
          if (body) showClaim(body.claim);
        })
        .catch(function () {});
    }

    // The review decided just before this one was opened (NEXT_AFTER_DECISION): its outcome.
    var strip = document.getElementById("nitro-decided");
    if (strip) {
      poll(strip.dataset.liveUrl, d.pollSeconds, function (body) {
        var state = body.review;
        if (!state) return;
        var outcome = document.getElementById("nitro-decided-outcome");
        var text = (state.outcome_label || state.status_label) + (state.error ? " — " + state.error : "");
        if (outcome.textContent !== text) outcome.textContent = text;
        strip.dataset.outcome = state.outcome || "";
        var following = document.getElementById("nitro-decided-next");
        following.textContent = "";
        if (state.next && Number(state.next.pk) !== Number(d.review)) {
          following.appendChild(document.createTextNode(" · " + d.labelWaits + " "));
          var link = document.createElement("a");
          link.href = state.next.url;
          link.textContent = state.next.kind + " #" + state.next.pk;
          following.appendChild(link);
        }
      });
    }

    var renewEvery = Math.max(Number(d.leaseSeconds) / 3, 5) * 1000;
    setInterval(function () {
      if (holds) post("renew");
    }, renewEvery);
    // Leaving the screen frees the review, unless it is left by submitting one of its forms:
    // a decision ends the claim's purpose anyway, and a release posted alongside it would only
    // contend with it for the database.
    var submitting = false;
    document.addEventListener("submit", function () {
      submitting = true;
    });
    window.addEventListener("pagehide", function () {
      if (holds && !submitting) post("release", true);
    });
    window.addEventListener("pageshow", function (event) {
      if (event.persisted && mayClaim) post("renew"); // back from the page cache: claim again
    });

    poll(d.liveUrl, d.pollSeconds, function (body) {
      if (body.now) skew = Date.parse(body.now) - Date.now();
      setCount(body.pending);
      showReview(body.review);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var root = document.getElementById("nitro-inbox");
    if (root) reviewScreen(root);
  });
})();
