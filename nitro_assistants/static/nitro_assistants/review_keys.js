/* The review screen by keyboard (docs/admin.md "Keyboard"): decide without the mouse.

   a          approve everything held as proposed and submit (the one-click Approve / Send as
              drafted / Approve plan button); on a question or blueprint: choose Answer / Accept
   e          edit: choose Edit for the current call (or the reply) and go to its first field
   r          reject (or, on an interaction, ask for a revision) and go to the reason
   s          respond: choose Respond for the current call and go to the response
   j / k      next / previous held call (several calls are decided together)
   Ctrl+Enter submit the decision as chosen (also from inside a text field)
   ?          show or hide this help;  Esc  close it, or leave the text field

   Letters act only outside text fields, so typing a reason never decides anything; nothing
   here submits a decision except "a" (what the Approve button does) and Ctrl+Enter. */
(function () {
  "use strict";
  var form = document.querySelector("form.nitro-decide");
  var help = document.getElementById("nitro-keys-help");
  var toggle = document.getElementById("nitro-keys-toggle");
  var status = document.getElementById("nitro-keys-status");
  if (!form || !help) {
    return;
  }
  var current = 0;

  function units() {
    return Array.prototype.slice.call(
      form.querySelectorAll("fieldset.nitro-call-form, fieldset.nitro-reply-form, fieldset.nitro-interaction-form")
    );
  }

  function say(text) {
    if (status) {
      status.textContent = text;
    }
  }

  function mark(index) {
    var all = units();
    if (!all.length) {
      return null;
    }
    current = Math.max(0, Math.min(index, all.length - 1));
    all.forEach(function (unit, i) {
      unit.classList.toggle("nitro-current", i === current && all.length > 1);
    });
    return all[current];
  }

  function typing(element) {
    if (!element || element === document.body) {
      return false;
    }
    if (element.isContentEditable || element.tagName === "TEXTAREA" || element.tagName === "SELECT") {
      return true;
    }
    if (element.tagName !== "INPUT") {
      return false;
    }
    return ["radio", "checkbox", "submit", "button", "reset", "hidden"].indexOf(element.type) < 0;
  }

  function radio(unit, values) {
    for (var i = 0; i < values.length; i++) {
      var found = unit.querySelector(
        'input[type=radio][name$="-action"][value="' + values[i] + '"], ' +
          'input[type=radio][name="interaction-decision"][value="' + values[i] + '"]'
      );
      if (found) {
        return found;
      }
    }
    return null;
  }

  function choose(values, focusSelector, label) {
    var unit = mark(current);
    if (!unit) {
      return;
    }
    var input = radio(unit, values);
    if (!input) {
      say(label + ": " + (help.dataset.notAllowed || "not allowed here"));
      return;
    }
    input.checked = true;
    input.dispatchEvent(new Event("change", { bubbles: true }));
    var target = focusSelector ? unit.querySelector(focusSelector) : null;
    (target || input).focus();
    say(label);
  }

  function showHelp(show) {
    help.hidden = !show;
    if (toggle) {
      toggle.setAttribute("aria-expanded", show ? "true" : "false");
    }
  }

  if (toggle) {
    toggle.addEventListener("click", function () {
      showHelp(help.hidden);
    });
  }

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.isComposing) {
      return;
    }
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      var submit = form.querySelector("input[name=_decide]");
      if (submit) {
        submit.click();
      }
      return;
    }
    if (event.key === "Escape") {
      if (!help.hidden) {
        showHelp(false);
      } else if (typing(document.activeElement)) {
        document.activeElement.blur();
      }
      return;
    }
    if (typing(document.activeElement) || event.ctrlKey || event.metaKey || event.altKey) {
      return;
    }
    var handled = true;
    switch (event.key) {
      case "?":
        showHelp(help.hidden);
        break;
      case "a":
        var approve = form.querySelector("input[name=_approve]");
        if (approve) {
          approve.click();
        } else {
          choose(["approve", "accept", "answer"], null, help.dataset.approve || "Approve");
        }
        break;
      case "e":
        choose(["edit"], "[name*='-arg__'], textarea[name='reply-content']", help.dataset.edit || "Edit");
        break;
      case "r":
        choose(
          ["reject", "request_revision"],
          "textarea[name$='-message'], textarea[name='interaction-note']",
          help.dataset.reject || "Reject"
        );
        break;
      case "s":
        choose(["respond"], "textarea[name$='-message']", help.dataset.respond || "Respond");
        break;
      case "j":
      case "k":
        var unit = mark(current + (event.key === "j" ? 1 : -1));
        if (unit) {
          unit.scrollIntoView({ block: "nearest" });
        }
        break;
      default:
        handled = false;
    }
    if (handled) {
      event.preventDefault();
    }
  });
  mark(0);

  // Choosing an option of a question (or writing an answer) means Answer: the decision follows,
  // as the server reads a form posted without one (QuestionDecisionForm).
  form.addEventListener("change", answering);
  form.addEventListener("input", answering);
  function answering(event) {
    var target = event.target;
    if (!target.closest || !target.closest(".nitro-question")) {
      return;
    }
    if ((target.type === "checkbox" || target.type === "radio") && !target.checked) {
      return;
    }
    if (target.tagName === "TEXTAREA" && !target.value.trim()) {
      return;
    }
    var answer = form.querySelector('input[type=radio][name="interaction-decision"][value="answer"]');
    if (answer && !answer.checked) {
      answer.checked = true;
      answer.dispatchEvent(new Event("change", { bubbles: true }));
    }
  }
})();
