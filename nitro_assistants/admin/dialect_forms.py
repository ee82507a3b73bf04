"""The decision form of pauses of graphs of their own (docs/protocol.md §9): an Agent Inbox
request (accept, edit its arguments, respond with text, ignore, as its ``config`` allows) and
any other ``interrupt(value)`` (a choice among its ``options``, fields after its
``response_schema``, a text, or JSON). One sub-form per pause: with branches paused at once, a
pause left blank stays pending. Everything is checked again by ``services.decide``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from nitro_assistants.admin.forms import (
    ReviewDecisionForm,
    StorableJSONField,
    _argument_field,
    _argument_initial,
    register_decision_form,
)
from nitro_assistants.models import Review

INBOX_LABELS = {
    "accept": _("Accept"),
    "edit": _("Edit the arguments"),
    "response": _("Respond with text"),
    "ignore": _("Ignore"),
}
BLANK = ""


def _schema_field(name: str, spec: Any, required: bool) -> forms.Field:
    """A field after one property of a ``response_schema``: enum → choices, string → text,
    integer/number → number, boolean → yes/no; anything else JSON."""
    spec = spec if isinstance(spec, Mapping) else {}
    label = str(spec.get("title") or name)
    help_text = str(spec.get("description") or "")
    if isinstance(spec.get("enum"), list) and spec["enum"]:
        choices = [(json.dumps(v), str(v)) for v in spec["enum"]]
        return forms.TypedChoiceField(
            label=label,
            choices=[(BLANK, "—"), *choices],
            coerce=json.loads,
            empty_value=None,
            required=required,
            help_text=help_text,
        )
    kind = spec.get("type")
    if kind == "string":
        return forms.CharField(label=label, required=required, strip=False, help_text=help_text)
    if kind == "integer":
        return forms.IntegerField(label=label, required=required, help_text=help_text)
    if kind == "number":
        return forms.FloatField(label=label, required=required, help_text=help_text)
    if kind == "boolean":
        return forms.TypedChoiceField(
            label=label,
            choices=[(BLANK, "—"), ("true", _("yes")), ("false", _("no"))],
            coerce=lambda v: v == "true",
            empty_value=None,
            required=required,
            help_text=help_text,
        )
    return StorableJSONField(label=label, required=required, help_text=help_text)


def _schema_properties(schema: Any) -> dict[str, Any] | None:
    """The properties of an object ``response_schema`` the form can follow, or None."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        return None
    properties = schema.get("properties")
    return dict(properties) if isinstance(properties, Mapping) and properties else None


class PauseForm(forms.Form):
    """One pause: the fields its dialect and schema call for."""

    def __init__(self, pause: Mapping[str, Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pause = pause
        self.kind = pause.get("kind")
        self.properties: dict[str, Any] | None = None
        if self.kind == "inbox":
            config = pause.get("config") or {}
            flags = {"accept": "allow_accept", "edit": "allow_edit"}
            flags |= {"response": "allow_respond", "ignore": "allow_ignore"}
            self.allowed = [t for t, flag in flags.items() if config.get(flag) is True]
            self.fields["type"] = forms.ChoiceField(
                label=_("Decision"),
                choices=[
                    (BLANK, _("Leave pending")),
                    *((t, INBOX_LABELS[t]) for t in self.allowed),
                ],
                widget=forms.RadioSelect,
                required=False,
            )
            self.args = dict((pause.get("action_request") or {}).get("args") or {})
            if "edit" in self.allowed:
                for name, value in self.args.items():
                    field = _argument_field(name, value)
                    field.initial = _argument_initial(value)
                    self.fields[f"arg_{name}"] = field
            if "response" in self.allowed:
                self.fields["response"] = forms.CharField(
                    label=_("Response"),
                    required=False,
                    widget=forms.Textarea(attrs={"rows": 3}),
                    max_length=4000,
                )
            return
        self.properties = _schema_properties(pause.get("response_schema"))
        if self.properties is not None:
            required = (pause.get("response_schema") or {}).get("required") or []
            for name, spec in self.properties.items():
                # Every field optional here: a pause left blank stays pending, and the schema
                # itself (checked by services.decide) says what an answer needs.
                self.fields[f"prop_{name}"] = _schema_field(name, spec, False)
                self.fields[f"prop_{name}"].label_suffix = " *" if name in required else None
            return
        options = pause.get("options")
        if isinstance(options, list) and options:
            self.fields["choice"] = forms.TypedChoiceField(
                label=_("Choice"),
                choices=[(BLANK, "—"), *((json.dumps(o), str(o)) for o in options)],
                coerce=json.loads,
                empty_value=None,
                required=False,
            )
        self.fields["text"] = forms.CharField(
            label=_("Answer as text"),
            required=False,
            strip=False,
            widget=forms.Textarea(attrs={"rows": 2}),
        )
        self.fields["json"] = StorableJSONField(
            label=_("Answer as JSON"),
            required=False,
            widget=forms.Textarea(attrs={"rows": 3, "class": "nitro-json"}),
            help_text=_('Any JSON value the graph expects, e.g. true, 42 or {"size": "M"}.'),
        )

    @property
    def value_text(self) -> str:
        """The pause's value as a person reads it: a string as it is, else indented JSON."""
        value = self.pause.get("value")
        if isinstance(value, str):
            return value
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)

    def answer(self) -> tuple[bool, Any]:
        """``(answered, value)`` after ``is_valid``: whether this pause is answered, and with
        what (an Agent Inbox ``HumanResponse``, or the resume value)."""
        data = self.cleaned_data
        if self.kind == "inbox":
            kind = data.get("type") or ""
            if not kind:
                return False, None
            if kind == "edit":
                args = {n: data.get(f"arg_{n}") for n in self.args}
                action = (self.pause.get("action_request") or {}).get("action")
                return True, {"type": "edit", "args": {"action": action, "args": args}}
            if kind == "response":
                return True, {"type": "response", "args": data.get("response") or ""}
            return True, {"type": kind, "args": None}
        if self.properties is not None:
            given = {
                name: data.get(f"prop_{name}")
                for name in self.properties
                if data.get(f"prop_{name}") not in (None, "")
            }
            return (True, given) if given else (False, None)
        given_values = []
        if data.get("choice") is not None:
            given_values.append(data["choice"])
        if data.get("text"):
            given_values.append(data["text"].replace("\r\n", "\n"))
        if data.get("json") is not None:
            given_values.append(data["json"])
        if len(given_values) > 1:
            self.add_error(None, _("Answer with one of the choice, the text or the JSON."))
            return False, None
        return (True, given_values[0]) if given_values else (False, None)


@register_decision_form(Review.Kind.INBOX)
@register_decision_form(Review.Kind.INTERRUPT)
class DialectDecisionForm(ReviewDecisionForm):
    template_name = "admin/nitro_assistants/review/decide_dialect.html"

    def __init__(self, review: Review, data: Mapping[str, Any] | None = None) -> None:
        super().__init__(review, data)
        self.non_field_errors: list[str] = []
        pauses = [p for p in review.payload.get("pauses") or [] if isinstance(p, dict)]
        self.forms = [
            PauseForm(pause, data=data, prefix=f"pause-{index}")
            for index, pause in enumerate(pauses)
        ]
        self.problem = review.payload.get("problem")

    def is_valid(self) -> bool:
        valid = all(form.is_valid() for form in self.forms)
        if not valid:
            return False
        self._answers = {}
        for form in self.forms:
            answered, value = form.answer()
            if form.errors:
                return False
            if answered:
                self._answers[str(form.pause.get("interrupt_id"))] = value
        if not self._answers:
            self.non_field_errors.append(str(_("Answer at least one pause.")))
        return not self.non_field_errors

    def add_error(self, message: str) -> None:
        self.non_field_errors.append(message)

    def decision(self) -> dict[str, Any]:
        return {"answers": dict(self._answers)}
