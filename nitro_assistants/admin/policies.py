"""Policy rules in the admin (staff with the ``add/change/delete_policy`` permissions edit them),
with a dry run of a rule being edited against the last reviews before it is saved; and the
review queue's governance columns (approvals, deadline) and filter (overdue)."""

from __future__ import annotations

import datetime
import json
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.options import IS_POPUP_VAR, TO_FIELD_VAR
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.duration import duration_string
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from nitro_assistants import policy_rules, rules
from nitro_assistants.admin.forms import StorableJSONField
from nitro_assistants.admin.options import refuse_bad_selection
from nitro_assistants.admin.rule_trials import RuleTrialsAdmin
from nitro_assistants.models import Approval, Decision, Policy, Review, ReviewHandling
from nitro_assistants.services.policy_enforcement import (
    approval_count,
    lapsed_approvals,
    waiting_for,
)

#: How many of the latest tool-call and reply reviews a dry run looks at (``?last=`` changes it).
DRY_RUN_DEFAULT, DRY_RUN_MAX = 200, 2000


#: How the condition builder names each of ``policy_rules.OPERATORS``.
OPERATOR_LABELS: dict[str, Any] = {
    "eq": gettext_lazy("equals"),
    "ne": gettext_lazy("does not equal"),
    "lt": gettext_lazy("is less than"),
    "lte": gettext_lazy("is at most"),
    "gt": gettext_lazy("is more than"),
    "gte": gettext_lazy("is at least"),
    "in": gettext_lazy("is one of (a JSON list)"),
    "contains": gettext_lazy("contains"),
    "matches": gettext_lazy("matches (regular expression)"),
}


class ConditionsWidget(forms.Textarea):
    """The conditions' JSON, with a path / operator / value builder under it (``conditions.js``)
    that writes the same JSON into it: the JSON stays there, and what the server validates."""

    template_name = "admin/nitro_assistants/policy/conditions_widget.html"

    class Media:
        js = ["nitro_assistants/conditions.js"]

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        context["operators_json"] = json.dumps(
            [[op, f"{op}: {OPERATOR_LABELS.get(op, op)}"] for op in policy_rules.OPERATORS]
        )
        return context


class PolicyForm(forms.ModelForm):  # type: ignore[type-arg]
    """Refuses a rule the matcher could not use, with the error on the field at fault."""

    # Storable: NaN, Infinity (or 1e999) in a condition's value is a field error, not a 500
    # from jsonb.
    conditions = StorableJSONField(
        required=False,
        initial=list,
        widget=ConditionsWidget(attrs={"rows": 6, "cols": 80, "class": "vLargeTextField"}),
        help_text=Policy._meta.get_field("conditions").help_text,
    )
    must_show = StorableJSONField(
        label=gettext_lazy("Must show"),
        required=False,
        initial=list,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80, "class": "vLargeTextField"}),
        help_text=Policy._meta.get_field("must_show").help_text,
    )

    class Meta:
        model = Policy
        fields = [
            "name",
            "position",
            "enabled",
            "mode",
            "assistant",
            "kind",
            "tool",
            "conditions",
            "action",
            "must_show",
            "reason",
            "approvals",
            "group",
            "priority",
            "deadline",
            "on_deadline",
            "escalate_to",
            "escalation_deadline",
            "on_escalation_deadline",
            "allow_grants",
            "grant_max_uses",
            "grant_max_duration",
        ]

    def clean_must_show(self) -> Any:
        value = self.cleaned_data.get("must_show")
        return [] if value in (None, "") else value

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        rule = Policy(**{k: v for k, v in data.items() if k in _FIELDS})
        rule.conditions = data.get("conditions") or []
        rule.must_show = data.get("must_show") or []
        try:
            rule.compiled()
        except policy_rules.PolicyError as exc:
            field = exc.field if exc.field in self.fields else None
            self.add_error(field, str(exc))
        return data


_FIELDS = {f.name for f in Policy._meta.get_fields() if getattr(f, "concrete", False)}


def would_match(rule: policy_rules.Rule, review: Review) -> bool:
    """Whether ``rule`` alone (whatever comes before it) matches any of ``review``'s calls."""
    assistant = review.thread.assistant_key
    if review.kind == rules.REPLY:
        content = str((review.reply or {}).get("content") or "")
        return rule.matches(assistant, review.kind, "", {"content": content})
    return any(
        rule.matches(assistant, review.kind, str(call.get("name") or ""), call.get("args") or {})
        for call in review.tool_calls
    )


@admin.register(Policy)
class PolicyAdmin(RuleTrialsAdmin):
    form = PolicyForm
    list_display = [
        "name",
        "position",
        "enabled",
        "does",
        # Two facts to a column: with eleven the list was wider than a 1400 px window.
        "matches",
        "who_approves",
        "when_due",
        "version",
    ]
    list_select_related = ["group"]
    list_editable = ["position", "enabled"]
    list_filter = ["enabled", "mode", "action", "kind"]
    search_fields = ["name", "tool", "assistant"]
    ordering = ["position", "pk"]
    readonly_fields = ["version", "updated_at", "agreement"]
    fieldsets = [
        (None, {"fields": ["name", "position", "enabled", "mode"]}),
        (gettext_lazy("What it matches"), {"fields": ["assistant", "kind", "tool", "conditions"]}),
        (
            gettext_lazy("What it does"),
            {"fields": ["action", "reason", "approvals", "group", "priority", "must_show"]},
        ),
        (
            gettext_lazy("Deadline"),
            {
                "fields": [
                    "deadline",
                    "on_deadline",
                    "escalate_to",
                    "escalation_deadline",
                    "on_escalation_deadline",
                ]
            },
        ),
        (
            gettext_lazy("Grants"),
            {"fields": ["allow_grants", "grant_max_uses", "grant_max_duration"]},
        ),
        (None, {"fields": ["version", "updated_at", "agreement"]}),
    ]
    change_form_template = "admin/nitro_assistants/policy/change_form.html"

    class Media:
        # The list's too, not only the form's: its columns are sized there.
        css = {"all": ["nitro_assistants/admin.css"]}

    @admin.display(description=gettext_lazy("tool, assistant"), ordering="tool")
    def matches(self, obj: Policy) -> str:
        """The tool (any, or replies), the assistant under it: each name on a line of its own."""
        tool = obj.tool or (_("replies") if obj.kind == rules.REPLY else _("any"))
        if not obj.assistant:
            return format_html('<span class="nitro-name">{}</span>', tool)
        return format_html(
            '<span class="nitro-name">{}</span><span class="nitro-name nitro-muted">{}</span>',
            tool,
            obj.assistant,
        )

    @admin.display(description=gettext_lazy("approvals"), ordering="approvals")
    def who_approves(self, obj: Policy) -> str:
        """How many must approve, and of which group: ``2 · Finance``."""
        if obj.action != Policy.Action.REVIEW:
            return "—"
        return f"{obj.approvals} · {obj.group.name}" if obj.group else str(obj.approvals)

    @admin.display(description=gettext_lazy("deadline"), ordering="deadline")
    def when_due(self, obj: Policy) -> str:
        """The deadline and what it does: ``2:00:00 → escalate``."""
        if obj.deadline is None:
            return "—"
        return f"{duration_string(obj.deadline)} → {obj.get_on_deadline_display()}"

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if self.has_view_or_change_permission(request):
            refuse_bad_selection(request, self.model)  # a ticked id that is no rule: 400
        return super().changelist_view(request, extra_context)

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if request.method == "POST" and "_dry_run" in request.POST:
            return self.dry_run_view(request, object_id, form_url)
        return super().changeform_view(request, object_id, form_url, extra_context)

    def dry_run_view(
        self, request: HttpRequest, object_id: str | None, form_url: str
    ) -> HttpResponse:
        """The posted rule, not saved, against the last reviews: which it would have matched."""
        obj = self.get_object(request, object_id) if object_id else None
        if object_id and obj is None:
            raise Http404(_("No such record."))
        allowed = (
            self.has_change_permission(request, obj) if obj else self.has_add_permission(request)
        )
        if not allowed:
            raise PermissionDenied
        form_class = self.get_form(request, obj, change=obj is not None)
        form = form_class(request.POST, request.FILES, instance=obj)
        matched: list[dict[str, Any]] | None = None
        last = _last(request)
        looked_at = 0
        if form.is_valid():
            rule = form.save(commit=False).compiled()
            reviews = list(
                Review.objects.filter(kind__in=rules.REVIEW_KINDS)
                .select_related("thread", "handling")
                .defer("thread__values", "thread__context")
                .order_by("-pk")[:last]
            )
            looked_at = len(reviews)
            screen = reverse(f"{self.admin_site.name}:nitro_assistants_review_changelist")
            matched = [
                _described(review, f"{screen}{review.pk}/review/")
                for review in reviews
                if would_match(rule, review)
            ]
        fieldsets: Any = list(self.get_fieldsets(request, obj))
        admin_form = helpers.AdminForm(
            form,
            fieldsets,
            self.get_prepopulated_fields(request, obj),
            self.get_readonly_fields(request, obj),
            model_admin=self,
        )
        context = {
            **self.admin_site.each_context(request),
            "title": (_("Change %s") if obj else _("Add %s")) % self.opts.verbose_name,
            "subtitle": str(obj) if obj else None,
            "adminform": admin_form,
            "object_id": object_id,
            "original": obj,
            "is_popup": IS_POPUP_VAR in request.POST or IS_POPUP_VAR in request.GET,
            "to_field": request.POST.get(TO_FIELD_VAR, request.GET.get(TO_FIELD_VAR)),
            "media": self.media + admin_form.media,
            "inline_admin_formsets": [],
            "errors": helpers.AdminErrorList(form, []),
            "preserved_filters": self.get_preserved_filters(request),
            "dry_run": {"matched": matched, "looked_at": looked_at, "last": last},
        }
        return self.render_change_form(
            request, context, add=obj is None, change=obj is not None, obj=obj, form_url=form_url
        )


def _last(request: HttpRequest) -> int:
    raw = str(request.POST.get("_dry_run_last") or request.GET.get("last") or "")
    return min(int(raw), DRY_RUN_MAX) if raw.isdigit() and int(raw) > 0 else DRY_RUN_DEFAULT


def _described(review: Review, url: str) -> dict[str, Any]:
    try:
        handled = review.handling.rule.get("rule_name") or ""
    except ReviewHandling.DoesNotExist:
        handled = ""
    if review.kind == rules.REPLY:
        what = str((review.reply or {}).get("content") or "")[:120]
    else:
        what = "; ".join(
            f"{call.get('name')}({json.dumps(call.get('args') or {}, ensure_ascii=False)[:100]})"
            for call in review.tool_calls
        )
    return {
        "review": review,
        "what": what,
        "handled_by": handled,
        "url": url,
    }


# -- the review queue: approvals and deadlines -------------------------------------------------


class OverdueFilter(admin.SimpleListFilter):
    """Reviews by deadline: overdue, due within the hour, with a deadline, with none."""

    title = gettext_lazy("deadline")
    parameter_name = "deadline"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [
            ("overdue", gettext_lazy("overdue")),
            ("soon", gettext_lazy("due within 1 hour")),
            ("any", gettext_lazy("has a deadline")),
            ("none", gettext_lazy("no deadline")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        now = timezone.now()
        value = self.value()
        if value == "overdue":
            return queryset.filter(handling__due_at__lte=now)
        if value == "soon":
            return queryset.filter(
                handling__due_at__gt=now, handling__due_at__lte=now + datetime.timedelta(hours=1)
            )
        if value == "any":
            return queryset.filter(handling__due_at__isnull=False)
        if value == "none":
            return queryset.filter(handling__due_at__isnull=True)
        return queryset


class GovernanceColumns:
    """Columns of the review queue for reviews a policy rule handles (one query for the page:
    the handling is joined, the approvals counted in a subquery)."""

    governance_list_display = ("approvals", "due")

    @staticmethod
    def with_governance(queryset: QuerySet[Review]) -> QuerySet[Review]:
        return queryset.select_related("handling", "handling__group").annotate(
            approvals_counted=approval_count()
        )

    @staticmethod
    def _handling(obj: Review) -> ReviewHandling | None:
        try:
            return obj.handling
        except ReviewHandling.DoesNotExist:
            return None

    @admin.display(description=gettext_lazy("approvals"), ordering="-handling__priority")
    def approvals(self, obj: Review) -> str:
        row = self._handling(obj)
        if row is None or row.action != policy_rules.REVIEW:
            return "—"
        if row.approvals_required <= 1 and row.group_id is None:
            return "—"
        count = getattr(obj, "approvals_counted", None) or 0
        if obj.status != Review.Status.PENDING:
            return f"{count} of {row.approvals_required}"
        return policy_rules.progress(
            count, row.approvals_required, row.group.name if row.group else ""
        )

    @admin.display(description=gettext_lazy("due"), ordering="handling__due_at")
    def due(self, obj: Review) -> str:
        if obj.status == Review.Status.EXPIRED:
            return format_html(
                '<span class="nitro-badge nitro-bad nitro-expired" title="{}">{}</span>',
                obj.expires_at.isoformat() if obj.expires_at else "",
                _("expired"),
            )
        row = self._handling(obj)
        due_at = row.due_at if row is not None else None
        # The pause's own expiry (or the rule's, when it expires it) when it comes first.
        expires = obj.expires_at is not None and (due_at is None or obj.expires_at <= due_at)
        if expires:
            due_at = obj.expires_at
        if due_at is None:
            return "—"
        left = due_at - timezone.now()
        if obj.status != Review.Status.PENDING:
            return format_html('<span title="{}">{}</span>', due_at.isoformat(), "—")
        if left.total_seconds() <= 0:
            return format_html(
                '<span class="nitro-badge nitro-bad nitro-overdue" title="{}">{}</span>',
                due_at.isoformat(),
                _("overdue"),
            )
        hours = int(left.total_seconds() // 3600)
        minutes = int(left.total_seconds() % 3600 // 60)
        if expires:
            text = _("expires in %(h)d h %(m)d min") % {"h": hours, "m": minutes}
        else:
            text = _("in %(h)d h %(m)d min") % {"h": hours, "m": minutes}
        return format_html('<span title="{}">{}</span>', due_at.isoformat(), text)


def governance_context(review: Review) -> dict[str, Any]:
    """What the review screen shows of the policy handling ``review``."""
    try:
        row = review.handling
    except ReviewHandling.DoesNotExist:
        return {"governance": None}
    handling = row.handling
    return {
        "governance": {
            "rule": handling.rule_name,
            "version": handling.rule_version,
            "action": handling.action,
            "progress": waiting_for(review),
            "due_at": row.due_at,
            "overdue": bool(
                row.due_at and row.due_at <= timezone.now() and review.status == "pending"
            ),
            "stage": row.get_stage_display(),
            "priority": row.priority,
            "approvals": [
                {"user": a.user.get_username(), "at": a.at, "revision": a.revision}
                for a in review.approvals.select_related("user").order_by("at", "pk")
            ],
            # Approvals of this content that no longer count, and why (deactivated, out of
            # the group), so nobody takes them for ones still standing.
            "lapsed": [
                {"user": a.user.get_username(), "why": why} for a, why in lapsed_approvals(review)
            ],
            "unsure": handling.unsure,
            # What shadow rules would have done (they never act): their verdicts, in brief.
            "shadow": [
                {
                    "rule": verdict.get("rule_name") or verdict.get("rule_id"),
                    "version": verdict.get("rule_version"),
                    "action": verdict.get("action"),
                    "approvals": verdict.get("approvals"),
                    "group": verdict.get("group") or "",
                }
                for verdict in (row.rule or {}).get("shadow", {}).values()
                if isinstance(verdict, dict)
            ],
        }
    }


def recorded_message(
    review: Review, recorded: Decision | Approval, asked: datetime.datetime | None = None
) -> str:
    """What the reviewer is told once their decision is in: recorded, or their approval counted
    and who else is awaited. ``asked`` is when the request began: an approval made before it is
    the reviewer's earlier one (``services.decide`` returns it again rather than counting them
    twice), so they are told they had already approved."""
    if isinstance(recorded, Approval):
        review.refresh_from_db(fields=["revision", "digest"])
        progress = waiting_for(review)
        if asked is not None and recorded.at < asked:
            return _(
                "You had already approved review #%(pk)s (%(when)s); it is not counted twice: "
                "%(progress)s."
            ) % {
                "pk": review.pk,
                "when": date_format(timezone.localtime(recorded.at), "DATETIME_FORMAT"),
                "progress": progress,
            }
        return _("Your approval of review #%(pk)s is recorded: %(progress)s.") % {
            "pk": review.pk,
            "progress": progress,
        }
    return _("Decision recorded on review #%(pk)s.") % {"pk": review.pk}


def quorum_message(count: int) -> str:
    """A bulk action's report of approvals that count toward a quorum without completing it."""
    return ngettext(
        "%(count)d approval counted on a review that needs more before it is applied.",
        "%(count)d approvals counted on reviews that need more before they are applied.",
        count,
    ) % {"count": count}
