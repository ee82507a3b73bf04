"""Decision forms for typed interactions (docs/protocol.md §8), registered on the review screen's hook:
answer questions, accept a blueprint or send it back, approve a plan (optional steps toggled,
editable fields edited) or send it back with comments per step. Each builds the decide API's body
for :func:`nitro_assistants.services.decide`, which checks it against the revision shown."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from nitro_assistants.admin.content import show_blueprint, show_plan, show_questions
from nitro_assistants.admin.forms import ReviewDecisionForm, _posting, register_decision_form
from nitro_assistants.models import Review
from nitro_assistants.rules import (
    BOOLEAN_WIDGETS,
    CONTENT_KEY,
    DECISIONS_BY_KIND,
    MAX_NOTE,
    NUMBER_WIDGETS,
    option_values,
    plan_steps,
)

DECISION_LABELS = {
    "answer": _("Answer"),
    "accept": _("Accept"),
    "approve": _("Approve"),
    "request_revision": _("Ask for a revision"),
    "cancel": _("Dismiss"),
}


def _choice(*decisions: str) -> forms.ChoiceField:
    return forms.ChoiceField(
        label=_("Decision"),
        widget=forms.RadioSelect,
        choices=[(d, DECISION_LABELS[d]) for d in decisions],
    )


def _note() -> forms.CharField:
    return forms.CharField(
        label=_("Note for the assistant"),
        required=False,
        max_length=MAX_NOTE,
        widget=forms.Textarea(attrs={"rows": 2}),
    )


class DecisionForm(forms.Form):
    def __init__(self, *decisions: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fields["decision"] = _choice(*decisions)
        self.fields["note"] = _note()


class InteractionDecisionForm(ReviewDecisionForm):
    """The decision, a note, and per-item sub-forms; the service does the real checking."""

    decisions: tuple[str, ...] = ()

    def __init__(self, review: Review, data: Mapping[str, Any] | None = None) -> None:
        super().__init__(review, data)
        self.non_field_errors: list[str] = []
        self.interaction: dict[str, Any] = dict(review.payload.get("interaction") or {})
        self.problems: list[str] = list(review.payload.get("problems") or [])
        self.form = DecisionForm(*self.decisions, data=data, prefix="interaction")
        self.items: list[forms.Form] = []

    @property
    def content_json(self) -> str:
        """The questions, blueprint or plan as JSON, for reading."""
        key = CONTENT_KEY[self.review.kind]
        return json.dumps(self.interaction.get(key), indent=2, ensure_ascii=False, default=str)

    def is_valid(self) -> bool:
        valid = [self.form.is_valid(), *(item.is_valid() for item in self.items)]
        return all(valid) and not self.non_field_errors

    def add_error(self, message: str) -> None:
        self.non_field_errors.append(message)

    def body(self, **fields: Any) -> dict[str, Any]:
        data = self.form.cleaned_data
        return {
            "decision": data["decision"],
            "revision": self.review.revision,
            "digest": self.review.digest,
            "note": data["note"],
            **fields,
        }


class QuestionForm(forms.Form):
    def __init__(self, question: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.question = question
        self.shown: dict[str, Any] = {}
        input_kind = question.get("input") or "single_select"
        options = [
            (str(o.get("optionId")), str(o.get("label") or o.get("optionId")))
            for o in question.get("options") or []
            if isinstance(o, dict)
        ]
        label = str(question.get("prompt") or question.get("questionId"))
        if options:
            if input_kind == "multi_select" or question.get("multiple"):
                self.fields["options"] = forms.MultipleChoiceField(
                    label=label,
                    choices=options,
                    required=False,
                    widget=forms.CheckboxSelectMultiple,
                )
            else:
                self.fields["options"] = forms.ChoiceField(
                    label=label,
                    choices=options,
                    required=False,
                    widget=forms.RadioSelect,
                )
        if input_kind == "text" or question.get("allowOther"):
            self.fields["text"] = forms.CharField(
                label=_("Other") if options else label,
                required=False,
                max_length=MAX_NOTE,
                widget=forms.Textarea(attrs={"rows": 2}),
            )

    def answer(self) -> dict[str, Any] | None:
        data = self.cleaned_data
        chosen = data.get("options") or []
        option_ids = [chosen] if isinstance(chosen, str) else list(chosen)
        answer: dict[str, Any] = {"questionId": str(self.question.get("questionId"))}
        if option_ids:
            answer["optionIds"] = option_ids
        if (data.get("text") or "").strip():
            answer["text"] = data["text"]
        return answer if len(answer) > 1 else None


#: The decision's radio buttons, as posted (the form's prefix is "interaction").
DECISION_FIELD = "interaction-decision"


def _answered(data: Mapping[str, Any]) -> bool:
    """Whether a posted question form holds an answer: an option chosen or a text written."""
    return any(str(data.get(name) or "").strip() for name in data if name.startswith("q-"))


@register_decision_form(Review.Kind.QUESTION)
class QuestionDecisionForm(InteractionDecisionForm):
    template_name = "admin/nitro_assistants/review/decide_question.html"
    decisions = DECISIONS_BY_KIND["question"]

    def __init__(self, review: Review, data: Mapping[str, Any] | None = None) -> None:
        if data is not None and not data.get(DECISION_FIELD) and _answered(data):
            # Choosing an option (or writing an answer) means Answer: no second step to say so.
            data = _posting(data, **{DECISION_FIELD: "answer"})
        super().__init__(review, data)
        questions = [q for q in self.interaction.get("questions") or [] if isinstance(q, dict)]
        question_forms = [
            QuestionForm(question, data=data, prefix=f"q-{index}")
            for index, question in enumerate(questions)
        ]
        # Each question's options, readable (their descriptions as Markdown) beside its fields.
        for item, shown in zip(question_forms, show_questions(questions), strict=True):
            item.shown = shown
        self.items = [*question_forms]

    def decision(self) -> dict[str, Any]:
        if self.form.cleaned_data["decision"] != "answer":
            return self.body()
        answers = [
            answer
            for item in self.items
            if isinstance(item, QuestionForm) and (answer := item.answer()) is not None
        ]
        return self.body(answers=answers)


@register_decision_form(Review.Kind.BLUEPRINT)
class BlueprintDecisionForm(InteractionDecisionForm):
    template_name = "admin/nitro_assistants/review/decide_blueprint.html"
    decisions = DECISIONS_BY_KIND["blueprint"]

    @property
    def sections(self) -> list[dict[str, Any]]:
        """The blueprint's sections, readable."""
        return show_blueprint(self.interaction.get("blueprint"))

    def decision(self) -> dict[str, Any]:
        return self.body()


def _widget_field(spec: dict[str, Any], label: str) -> forms.Field:
    """A form field for a plan step's field without options, after its widget (the values it
    gives are the types rules.widget_problem accepts)."""
    widget = str(spec.get("widget") or "text").lower()
    help_text = str(spec.get("help") or "")
    if widget in NUMBER_WIDGETS:
        return forms.FloatField(label=label, required=False, help_text=help_text)
    if widget in BOOLEAN_WIDGETS:
        return forms.TypedChoiceField(
            label=label,
            choices=[("", "—"), ("true", _("yes")), ("false", _("no"))],
            coerce=lambda v: v == "true",
            empty_value=None,
            required=False,
            help_text=help_text,
        )
    textarea = forms.Textarea(attrs={"rows": 3}) if widget == "textarea" else None
    return forms.CharField(label=label, required=False, help_text=help_text, widget=textarea)


class StepForm(forms.Form):
    """One plan step: whether it runs (optional steps), its editable fields, a comment."""

    def __init__(self, step: dict[str, Any], **kwargs: Any) -> None:
        self.step = step
        self.shown: dict[str, Any] = {}
        self.input: dict[str, Any] = dict(step.get("input") or {})
        self.optional = bool(step.get("optional")) and step.get("enabled") is not False
        self.declared = [
            f for f in step.get("fields") or [] if isinstance(f, dict) and f.get("name")
        ]
        kwargs["initial"] = {
            "run": True,
            **{
                f"field__{f['name']}": self._shown(self.input.get(f["name"])) for f in self.declared
            },
        }
        super().__init__(**kwargs)
        if self.optional:
            self.fields["run"] = forms.BooleanField(label=_("Run this step"), required=False)
        for spec in self.declared:
            label = str(spec.get("label") or spec["name"])
            options = spec.get("options")
            values = option_values(options)
            if isinstance(options, list) and values is not None:
                labels = [
                    o.get("label", v) if isinstance(o, dict) else o
                    for o, v in zip(options, values, strict=True)
                ]
                self.fields[f"field__{spec['name']}"] = forms.TypedChoiceField(
                    label=label,
                    choices=[
                        (self._shown(v), str(lab)) for v, lab in zip(values, labels, strict=True)
                    ],
                    coerce=lambda shown, values=values: next(
                        (v for v in values if self._shown(v) == shown), shown
                    ),
                    required=False,
                    help_text=str(spec.get("help") or ""),
                )
            else:
                self.fields[f"field__{spec['name']}"] = _widget_field(spec, label)
        self.fields["comment"] = forms.CharField(
            label=_("Comment on this step"),
            required=False,
            max_length=MAX_NOTE,
            widget=forms.Textarea(attrs={"rows": 1}),
        )

    @staticmethod
    def _shown(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return "" if value is None else str(value)

    @property
    def field_rows(self) -> list[forms.BoundField]:
        return [self[name] for name in self.fields if name.startswith("field__")]

    def edits(self) -> dict[str, Any]:
        changed = {}
        for spec in self.declared:
            name = spec["name"]
            value = self.cleaned_data.get(f"field__{name}")
            original = self.input.get(name)
            if isinstance(value, float) and value.is_integer() and not isinstance(original, float):
                value = int(value)  # a number field shows 15, not 15.0
            if value != original and self._shown(value) != self._shown(original):
                changed[name] = value
        return changed


@register_decision_form(Review.Kind.PLAN)
class PlanDecisionForm(InteractionDecisionForm):
    template_name = "admin/nitro_assistants/review/decide_plan.html"
    decisions = DECISIONS_BY_KIND["plan"]

    def __init__(self, review: Review, data: Mapping[str, Any] | None = None) -> None:
        self.review = review  # approve_label reads it before the base class sets it
        if self._approving(data):
            # "Approve plan": the decision Approve, with the steps and fields as they stand.
            assert data is not None
            data = _posting(data, **{DECISION_FIELD: "approve"})
        super().__init__(review, data)
        step_forms = [
            StepForm(step, data=data, prefix=f"step-{index}")
            for index, step in enumerate(plan_steps(self.interaction.get("plan")))
        ]
        # Each step's operation, input and warnings, readable, above its fields.
        readable = show_plan(self.interaction.get("plan"))
        for item, shown in zip(step_forms, readable["steps"], strict=True):
            item.shown = shown
        self.items = [*step_forms]
        self.prerequisites = readable["prerequisites"]

    @property
    def approve_label(self) -> str | None:
        """One click approves the plan (the key ``a`` too), unless it cannot be approved as it
        is (problems found in it)."""
        if "approve" not in self.decisions or self.review.payload.get("problems"):
            return None
        return str(_("Approve plan"))

    @property
    def steps(self) -> list[StepForm]:
        return [item for item in self.items if isinstance(item, StepForm)]

    def decision(self) -> dict[str, Any]:
        choice = self.form.cleaned_data["decision"]
        if choice == "approve":
            disabled = [
                str(s.step.get("stepId"))
                for s in self.steps
                if s.optional and not s.cleaned_data.get("run")
            ]
            edits = {
                str(s.step.get("stepId")): changed
                for s in self.steps
                if str(s.step.get("stepId")) not in disabled and (changed := s.edits())
            }
            return self.body(disabledSteps=disabled, edits=edits)
        if choice == "request_revision":
            comments = [
                {"text": s.cleaned_data["comment"].strip(), "stepId": str(s.step.get("stepId"))}
                for s in self.steps
                if (s.cleaned_data.get("comment") or "").strip()
            ]
            return self.body(comments=comments)
        return self.body()
