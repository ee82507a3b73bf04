/* The policy rule form's condition builder (admin/policies.py ConditionsWidget): rows of path,
   operator and value under the conditions' JSON, which it writes back into the JSON field.

   The JSON stays the field the server reads and validates (policies.clean_conditions); the rows
   are drawn from it, and redrawn when it is edited by hand. JSON the rows cannot show (a
   condition with other keys, not a list) leaves the rows disabled and the JSON as it is. */
(function () {
  "use strict";

  function parsed(text) {
    try {
      return { ok: true, value: JSON.parse(text) };
    } catch (error) {
      return { ok: false };
    }
  }

  // A value as typed: JSON when it is JSON (42, true, ["a"], "42"), else the text itself.
  function valueOf(text) {
    var json = parsed(text);
    return json.ok ? json.value : text;
  }

  // A value to type: a text that is not itself JSON as it is, anything else as JSON.
  function shown(value) {
    if (typeof value === "string" && !parsed(value).ok) {
      return value;
    }
    return JSON.stringify(value);
  }

  // The conditions as rows, or null when the JSON is more than rows can show.
  function rowsOf(text) {
    if (!text.trim()) {
      return [];
    }
    var json = parsed(text);
    if (!json.ok || !Array.isArray(json.value)) {
      return null;
    }
    var rows = [];
    for (var i = 0; i < json.value.length; i++) {
      var item = json.value[i];
      if (!item || typeof item !== "object" || Array.isArray(item)) {
        return null;
      }
      var keys = Object.keys(item);
      for (var k = 0; k < keys.length; k++) {
        if (["path", "op", "value"].indexOf(keys[k]) < 0) {
          return null;
        }
      }
      rows.push({ path: item.path, op: item.op, value: item.value });
    }
    return rows;
  }

  function builder(box) {
    var field = document.getElementById(box.dataset.for);
    if (!field) {
      return;
    }
    var operators = JSON.parse(box.dataset.operators);
    var body = box.querySelector("tbody");
    var add = box.querySelector(".nitro-add-condition");
    var note = box.querySelector(".nitro-conditions-note");

    function input(className, value, label, placeholder) {
      var element = document.createElement("input");
      element.type = "text";
      element.className = className;
      element.value = value;
      element.setAttribute("aria-label", label);
      element.placeholder = placeholder;
      return element;
    }

    function row(condition) {
      var tr = document.createElement("tr");
      var path = input(
        "nitro-condition-path",
        typeof condition.path === "string" ? condition.path : shown(condition.path === undefined ? "" : condition.path),
        box.dataset.labelPath,
        box.dataset.placeholderPath
      );
      var op = document.createElement("select");
      op.className = "nitro-condition-op";
      op.setAttribute("aria-label", box.dataset.labelOp);
      operators.forEach(function (pair) {
        var option = document.createElement("option");
        option.value = pair[0];
        option.textContent = pair[1];
        op.appendChild(option);
      });
      op.value = condition.op || "eq";
      var value = input(
        "nitro-condition-value",
        condition.value === undefined ? "" : shown(condition.value),
        box.dataset.labelValue,
        box.dataset.placeholderValue
      );
      var remove = document.createElement("button");
      remove.type = "button";
      remove.className = "button nitro-remove-condition";
      remove.textContent = box.dataset.labelRemove;
      remove.addEventListener("click", function () {
        tr.remove();
        write();
      });
      [path, op, value, remove].forEach(function (element) {
        var td = document.createElement("td");
        td.appendChild(element);
        tr.appendChild(td);
      });
      return tr;
    }

    // The rows, as the JSON the server reads.
    function write() {
      var conditions = Array.prototype.map.call(body.rows, function (tr) {
        return {
          path: tr.querySelector(".nitro-condition-path").value.trim(),
          op: tr.querySelector(".nitro-condition-op").value,
          value: valueOf(tr.querySelector(".nitro-condition-value").value),
        };
      });
      field.value = conditions.length ? JSON.stringify(conditions, null, 2) : "[]";
    }

    // The JSON, as rows (when it can be shown as rows).
    function read() {
      var rows = rowsOf(field.value);
      note.hidden = rows !== null;
      add.disabled = rows === null;
      if (rows === null) {
        body.replaceChildren();
        return;
      }
      body.replaceChildren.apply(body, rows.map(row));
    }

    add.addEventListener("click", function () {
      var tr = row({ path: "", op: "eq", value: undefined });
      body.appendChild(tr);
      write();
      tr.querySelector("input").focus();
    });
    body.addEventListener("input", write);
    body.addEventListener("change", write);
    field.addEventListener("input", read);
    read();
    box.hidden = false;
  }

  function start() {
    Array.prototype.forEach.call(document.querySelectorAll(".nitro-conditions-builder"), builder);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
