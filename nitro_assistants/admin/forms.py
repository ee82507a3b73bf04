"""Decision forms, one class per review kind, found through :data:`DECISION_FORMS`.

A decision form reads one POST and turns it into the ``decision`` mapping that
:func:`nitro_assistants.services.decide` takes. Typed interactions (question, blueprint, plan)
register theirs with :func:`register_decision_form` and get the same stale check, permission
check and audit trail from the review screen.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar, cast

from django import forms
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput
from django.http import QueryDict
from django.utils.translation import gettext_lazy as _

from nitro_assistants import rules
from nitro_assistants.admin.content import Row, key_values
from nitro_assistants.models import Grant, Review
from nitro_assistants.validators import find_unstorable, validate_storable

ACTION_LABELS = {
    "approve": _("Approve"),
    "edit": _("Edit"),
    "reject": _("Reject"),
    "respond": _("Respond"),
}


class StampForm(forms.Form):
    """What the decision form was rendered from. A different value means the form is stale."""

    interrupt_id = forms.CharField(widget=forms.HiddenInput, required=False)
    revision = forms.IntegerField(widget=forms.HiddenInput, min_value=1)
    digest = forms.CharField(widget=forms.HiddenInput, max_length=128)
    #: The collapsed values the reviewer opened (a JSON list of their paths): the review
    #: screen's script keeps it; drawn without the script, it lists the parts a rule names,
    #: which are then drawn open (docs/redaction.md, "Complete previews").
    opened = forms.CharField(widget=forms.HiddenInput, required=False, max_length=100_000)

    @classmethod
    def for_review(cls, review: Review, drawn_open: list[str] | None = None) -> StampForm:
        return cls(
            initial={
                "interrupt_id": review.interrupt_id or "",
                "revision": review.revision,
                "digest": review.digest,
                "opened": json.dumps(drawn_open or []),
            }
        )

    def shown(self) -> dict[str, Any]:
        """The ``revision`` and ``digest`` the form was rendered from, for
        :func:`nitro_assistants.services.decide` to check against the review as it is now, and
        what was opened (``shown``: a malformed list goes on as it is, for the service to
        refuse on its field)."""
        data = self.cleaned_data
        shown = {"revision": data["revision"], "digest": data["digest"]}
        if data.get("interrupt_id"):
            shown["interrupt_id"] = data["interrupt_id"]
        if data.get("opened"):
            try:
                shown["shown"] = json.loads(data["opened"])
            except ValueError:
                shown["shown"] = data["opened"]
        return shown

    def rendered_from(self, review: Review) -> bool:
        """Whether the form was rendered from ``review`` as it is now. When it was not (an edit
        made the review's next revision meanwhile), what the decision form would call the
        reviewer's change is the content that moved under the form: a stale form, not a
        mistake of theirs. (Only :func:`services.decide` decides what is stale; this says how
        to read a form it never gets to see.)"""
        shown = self.shown()
        current = review.interrupt_id or ""
        return bool(
            shown["revision"] == review.revision
            and shown["digest"] == review.digest
            and shown.get("interrupt_id", current) == current
        )


class ReviewDecisionForm(abc.ABC):
    """Base of the per-kind decision forms: ``is_valid()``, then ``decision()``."""

    template_name: ClassVar[str] = ""
    #: The name of the submit button that approves everything held in one click (PROTOCOL's
    #: most common decision); a form that offers it returns its label from ``approve_label``.
    APPROVE_BUTTON: ClassVar[str] = "_approve"

    def __init__(self, review: Review, data: Mapping[str, Any] | None = None) -> None:
        self.review = review
        self.data = data

    @property
    def approve_label(self) -> str | None:
        """The label of the one-click approve button, or None when this form has none (a kind
        without a plain approval, or an item that does not allow it)."""
        return None

    def _approving(self, data: Mapping[str, Any] | None) -> bool:
        return data is not None and self.APPROVE_BUTTON in data and self.approve_label is not None

    @property
    def is_bound(self) -> bool:
        return self.data is not None

    @abc.abstractmethod
    def is_valid(self) -> bool: ...

    @abc.abstractmethod
    def decision(self) -> dict[str, Any]:
        """The ``decision`` for :func:`nitro_assistants.services.decide` (after ``is_valid``)."""

    @abc.abstractmethod
    def add_error(self, message: str) -> None: ...


def _posting(data: Mapping[str, Any], **values: str) -> Mapping[str, Any]:
    """``data`` as posted, with ``values`` in place of what was posted under those names."""
    copy: Any = data.copy() if isinstance(data, QueryDict) else dict(data)
    for name, value in values.items():
        copy[name] = value
    return cast(Mapping[str, Any], copy)


DECISION_FORMS: dict[str, type[ReviewDecisionForm]] = {}
F = TypeVar("F", bound=type[ReviewDecisionForm])


def register_decision_form(kind: str) -> Callable[[F], F]:
    """Class decorator: ``kind``'s reviews are decided with this form."""

    def register(form_class: F) -> F:
        DECISION_FORMS[kind] = form_class
        return form_class

    return register


class StorableJSONField(forms.JSONField):
    """A JSON field that refuses what PostgreSQL cannot store, which JSON's ``\\u`` escapes can
    spell (``\\u0000``, ``\\ud800``), and shows such a value back escaped: a lone surrogate
    written into the page as it is would make the error page itself fail to encode."""

    default_validators = [validate_storable]

    def prepare_value(self, value: Any) -> Any:
        if not isinstance(value, InvalidJSONInput) and find_unstorable(value) is not None:
            return json.dumps(value, ensure_ascii=True, cls=self.encoder)
        return super().prepare_value(value)


class BlankableJSONField(StorableJSONField):
    """An optional JSON field whose empty value shows as a blank box, not ``null``."""

    def prepare_value(self, value: Any) -> Any:
        return "" if value is None else super().prepare_value(value)


def _argument_field(name: str, value: Any) -> forms.Field:
    """A form field typed after the model's value, so an edit keeps each argument's type."""
    label = name
    if isinstance(value, bool):
        return forms.TypedChoiceField(
            label=label,
            choices=[("true", "true"), ("false", "false")],
            coerce=lambda v: v == "true",
            empty_value=None,
            required=False,
        )
    if isinstance(value, int):
        return forms.IntegerField(label=label, required=False)
    if isinstance(value, float):
        return forms.FloatField(label=label, required=False)
    if isinstance(value, str):
        widget = forms.Textarea(attrs={"rows": 3}) if "\n" in value or len(value) > 80 else None
        return forms.CharField(label=label, required=False, strip=False, widget=widget)
    return StorableJSONField(
        label=label,
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "class": "nitro-json"}),
    )


def _as_posted(text: str, original: str) -> str:
    """``text`` from a textarea as the model would have written it: browsers send every line
    break of a textarea as CRLF, so an untouched ``a\\nb`` comes back ``a\\r\\nb``."""
    return text if "\r" in original else text.replace("\r\n", "\n")


def _quoted(names: list[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


def _argument_initial(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value  # JSON fields dump their own initial value


class ToolCallForm(forms.Form):
    """One held call: an action among its ``allowed_decisions``; per-argument fields for an edit;
    a reason for a reject; the tool's result for a respond."""

    action = forms.ChoiceField(label=_("Decision"), widget=forms.RadioSelect)
    message = forms.CharField(
        label=_("Reason or response"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        max_length=4000,
    )

    def __init__(
        self, call: dict[str, Any], *args: Any, index: int | None = None, **kwargs: Any
    ) -> None:
        self.call = call
        #: Where the call is among the review's (its arguments' paths), and the paths a rule
        #: says must be shown (drawn open; the review screen sets them).
        self.path = f"tool_calls.{index}.args" if index is not None else ""
        self.required: tuple[str, ...] = ()
        self.model_args: dict[str, Any] = dict(call.get("args") or {})
        self.allowed = [
            a
            for a in (call.get("allowed_decisions") or rules.TOOL_CALL_ACTIONS)
            if a in rules.TOOL_CALL_ACTIONS
        ]
        kwargs["initial"] = {f"arg__{k}": _argument_initial(v) for k, v in self.model_args.items()}
        super().__init__(*args, **kwargs)
        action = self.fields["action"]
        assert isinstance(action, forms.ChoiceField)
        action.choices = [(a, ACTION_LABELS[a]) for a in self.allowed]
        if "edit" in self.allowed:
            for name, value in self.model_args.items():
                self.fields[f"arg__{name}"] = _argument_field(name, value)

    @property
    def argument_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.fields if name.startswith("arg__")]

    @property
    def argument_rows(self) -> list[Row]:
        """The arguments as the model proposed them, for reading (a call that cannot be edited
        has no fields to show them in)."""
        return key_values(self.model_args, 0, self.path, self.required)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        action = cleaned.get("action")
        message = (cleaned.get("message") or "").strip()
        if action == "reject" and not message:
            self.add_error("message", _("Say why the call is rejected."))
        if action == "respond" and not message:
            self.add_error("message", _("Write the result the assistant should see instead."))
        if action in ("approve", "edit") and message:
            # Only reject and respond send a message: anything else would drop it unseen.
            self.add_error(
                "message",
                _(
                    "A reason or response is sent only with Reject or Respond: clear it to "
                    "%(action)s the call."
                )
                % {"action": ACTION_LABELS[action].lower()},
            )
        if action == "edit":
            cleaned["edited_args"] = self._edited_args()
        if action == "approve":
            self._refuse_changed_args()
        return cleaned

    def _posted(self, field_name: str) -> bool:
        return self.data is not None and self.add_prefix(field_name) in self.data

    def _refuse_changed_args(self) -> None:
        """Approve runs the call with the assistant's arguments. An argument changed on the form
        would be dropped without a word, so the form is refused, naming what changed: the
        reviewer chooses Edit to send it, or puts it back. (Not turned into an edit: the
        reviewer said Approve, and a stray keystroke must not run a call the assistant never
        proposed.)"""
        if "edit" not in self.allowed:
            # The form draws no argument fields then: arguments posted anyway cannot be applied.
            prefix = self.add_prefix("arg__")
            posted = sorted(
                key.removeprefix(prefix) for key in (self.data or {}) if key.startswith(prefix)
            )
            if posted:
                raise ValidationError(
                    _(
                        "This call cannot be edited (it allows %(allowed)s), so %(names)s cannot "
                        "be changed: approve it as proposed, or reject it."
                    )
                    % {"allowed": ", ".join(self.allowed), "names": _quoted(posted)}
                )
            return
        changed = [
            name
            for name, original in self.model_args.items()
            if self._posted(f"arg__{name}")
            and f"arg__{name}" not in self.errors
            and not self._same(self.cleaned_data.get(f"arg__{name}"), original)
        ]
        if changed:
            raise ValidationError(
                _(
                    "You changed %(names)s but chose Approve, which runs the call with the "
                    "assistant's arguments. Choose Edit to send your change, or put it back to "
                    "approve the call as proposed."
                )
                % {"names": _quoted(changed)}
            )

    @staticmethod
    def _same(value: Any, original: Any) -> bool:
        if isinstance(original, str) and isinstance(value, str):
            return _as_posted(value, original) == original
        return bool(value == original and type(value) is type(original))

    def _edited_args(self) -> dict[str, Any]:
        edited: dict[str, Any] = {}
        for name, original in self.model_args.items():
            key = f"arg__{name}"
            if key in self.errors:
                continue
            value = self.cleaned_data.get(key)
            if isinstance(original, str):
                value = _as_posted(value, original) if isinstance(value, str) else ""
                if not value.strip() and original.strip():
                    self.add_error(key, _("This argument needs a value."))
                    continue
            elif value is None and original is not None:
                self.add_error(key, _("This argument needs a value."))
                continue
            elif isinstance(original, dict) and not isinstance(value, dict):
                self.add_error(key, _("Enter a JSON object, as the assistant gave."))
                continue
            elif isinstance(original, list) and not isinstance(value, list):
                self.add_error(key, _("Enter a JSON list, as the assistant gave."))
                continue
            if value != original:
                edited[name] = value
        if not edited and not self.errors:
            raise ValidationError(_("Nothing was changed: edit an argument, or approve the call."))
        return edited

    def answer(self) -> dict[str, Any]:
        data = self.cleaned_data
        answer: dict[str, Any] = {"id": self.call["id"], "action": data["action"]}
        if data["action"] == "edit":
            answer["args"] = data["edited_args"]
        if data["action"] in ("reject", "respond"):
            answer["message"] = data["message"].strip()
        return answer


class GrantForm(forms.Form):
    """The optional grant given with an approval (prefix ``grant``): "approve calls like this"
    for a scope, a duration or a number of uses, with arguments narrowed as JSON. Blank scope:
    no grant. What it may say is checked by :func:`nitro_assistants.services.grants.give`, whose
    errors come back on the field at fault (:meth:`add_service_error`)."""

    scope = forms.ChoiceField(
        label=_("Also approve calls like this for"),
        required=False,
        choices=[("", _("(no grant)")), *Grant.Scope.choices],
    )
    uses = forms.IntegerField(label=_("uses"), required=False, min_value=1)
    duration = forms.DurationField(
        label=_("for how long"), required=False, help_text=_("e.g. 04:00:00")
    )
    args = BlankableJSONField(
        label=_("narrowed arguments"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "class": "nitro-json"}),
        help_text=_(
            'Each argument is pinned to the value approved unless narrowed here: {"amount": '
            '{"max": 50}} (a number up to the one approved), {"currency": {"in": ["USD", '
            '"EUR"]}} (texts, the one approved among them).'
        ),
    )

    def grant(self) -> dict[str, Any] | None:
        """The decide body's ``grant``, or None when none is given."""
        data = self.cleaned_data
        if not data.get("scope"):
            return None
        duration = data.get("duration")
        return {
            "scope": data["scope"],
            "uses": data.get("uses"),
            "duration": int(duration.total_seconds()) if duration is not None else None,
            "args": data.get("args") or {},
        }

    def add_service_error(self, field: str, message: str) -> None:
        """A :class:`~nitro_assistants.grant_rules.GrantError` on the field it names."""
        name = field.removeprefix("grant.").split(".")[0]
        self.add_error(name if name in self.fields and name != "call" else None, message)


@register_decision_form(Review.Kind.TOOL_CALLS)
class ToolCallsDecisionForm(ReviewDecisionForm):
    """One :class:`ToolCallForm` per held call (prefix ``call-<n>``), decided together."""

    template_name = "admin/nitro_assistants/review/decide_tool_calls.html"

    def __init__(self, review: Review, data: Mapping[str, Any] | None = None) -> None:
        super().__init__(review, data)
        self.non_field_errors: list[str] = []
        if self._approving(data):
            assert data is not None
            actions = {f"call-{i}-action": "approve" for i in range(len(review.tool_calls))}
            data = _posting(data, **actions)
        self.calls = [
            ToolCallForm(call, data=data, prefix=f"call-{index}", index=index)
            for index, call in enumerate(review.tool_calls)
        ]
        self.grant_form = GrantForm(data=data, prefix="grant")

    @property
    def approve_label(self) -> str | None:
        calls = self.review.tool_calls
        allowed = [call.get("allowed_decisions") or ["approve"] for call in calls]
        if not calls or not all("approve" in decisions for decisions in allowed):
            return None
        return str(_("Approve") if len(calls) == 1 else _("Approve all"))

    def is_valid(self) -> bool:
        valid = all([form.is_valid() for form in self.calls])
        return self.grant_form.is_valid() and valid and not self.non_field_errors

    def grant(self) -> dict[str, Any] | None:
        """The grant given with the decision (the form valid), or None."""
        return self.grant_form.grant()

    def add_error(self, message: str) -> None:
        self.non_field_errors.append(message)

    def decision(self) -> dict[str, Any]:
        answers = [form.answer() for form in self.calls]
        notes = [a["message"] for a in answers if a.get("message") and a["action"] == "reject"]
        return {"tool_calls": answers, "note": "\n".join(notes)}


class ReplyForm(forms.Form):
    action = forms.ChoiceField(label=_("Decision"), widget=forms.RadioSelect)
    content = forms.CharField(
        label=_("Reply"),
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 6}),
    )
    message = forms.CharField(
        label=_("Reason"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        max_length=4000,
    )

    def __init__(self, draft: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        self.draft = str(draft.get("content") or "")
        allowed = draft.get("allowed_decisions") or rules.REPLY_ACTIONS
        self.allowed = [a for a in allowed if a in rules.REPLY_ACTIONS]
        kwargs["initial"] = {"content": self.draft}
        super().__init__(*args, **kwargs)
        action = self.fields["action"]
        assert isinstance(action, forms.ChoiceField)
        action.choices = [(a, ACTION_LABELS[a]) for a in self.allowed]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        action = cleaned.get("action")
        content = _as_posted(cleaned.get("content") or "", self.draft)
        cleaned["content"] = content
        message = (cleaned.get("message") or "").strip()
        if action == "edit":
            if not content.strip():
                self.add_error("content", _("The edited reply cannot be empty."))
            elif content == self.draft:
                self.add_error("content", _("Nothing was changed: edit the text, or approve it."))
        if action == "reject" and not message:
            self.add_error("message", _("Say why the reply is rejected."))
        if action in ("approve", "edit") and message:
            self.add_error(
                "message",
                _("A reason is recorded only with Reject: clear it to %(action)s the reply.")
                % {"action": ACTION_LABELS[action].lower()},
            )
        posted = self.data is not None and self.add_prefix("content") in self.data
        if (
            action == "approve"
            and posted
            and "content" not in self.errors
            and content != self.draft
        ):
            # Approve sends the draft as it is: the changed text would be dropped without a word.
            message_text: Any
            if "edit" in self.allowed:
                message_text = _(
                    "You changed the reply but chose Approve, which sends the draft as it is. "
                    "Choose Edit to send your text, or put it back to send the draft."
                )
            else:
                message_text = _(
                    "This reply cannot be edited (it allows %(allowed)s): approve the draft as "
                    "it is, or reject it."
                ) % {"allowed": ", ".join(self.allowed)}
            self.add_error("content", message_text)
        return cleaned


@register_decision_form(Review.Kind.REPLY)
class ReplyDecisionForm(ReviewDecisionForm):
    template_name = "admin/nitro_assistants/review/decide_reply.html"

    def __init__(self, review: Review, data: Mapping[str, Any] | None = None) -> None:
        super().__init__(review, data)
        self.non_field_errors: list[str] = []
        if self._approving(data):
            assert data is not None
            data = _posting(data, **{"reply-action": "approve"})
        self.form = ReplyForm(review.reply or {}, data=data, prefix="reply")

    @property
    def approve_label(self) -> str | None:
        allowed = (self.review.reply or {}).get("allowed_decisions") or ["approve"]
        return str(_("Send as drafted")) if "approve" in allowed else None

    def is_valid(self) -> bool:
        return self.form.is_valid() and not self.non_field_errors

    def add_error(self, message: str) -> None:
        self.non_field_errors.append(message)

    def decision(self) -> dict[str, Any]:
        data = self.form.cleaned_data
        reply: dict[str, Any] = {"action": data["action"]}
        note = ""
        if data["action"] == "edit":
            reply["content"] = data["content"]
        if data["action"] == "reject":
            reply["message"] = note = data["message"].strip()
        return {"reply": reply, "note": note}


class RejectReasonForm(forms.Form):
    """The intermediate page of the bulk reject: one reason for every selected review."""

    reason = forms.CharField(
        label=_("Reason"), widget=forms.Textarea(attrs={"rows": 3}), max_length=4000
    )

    def clean_reason(self) -> str:
        reason = str(self.cleaned_data["reason"]).strip()
        if not reason:
            raise ValidationError(_("Say why these are rejected."))
        return reason


def decision_form_for(review: Review, data: Mapping[str, Any] | None = None) -> ReviewDecisionForm:
    """The registered decision form of ``review``'s kind; ``KeyError`` when there is none."""
    return DECISION_FORMS[review.kind](review, data)
