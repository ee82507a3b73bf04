"""Rules tried before they act, in the admin: each shadow rule's agreement with what people
decided (a column of the rule list, a line of its form, and a page of its verdicts review by
review), and the replay of a draft rule set over the last decided reviews. Nothing here writes:
the figures are read by :mod:`nitro_assistants.services.rule_trials`."""

from __future__ import annotations

import itertools
import json
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from nitro_assistants import policy_rules
from nitro_assistants.models import Policy
from nitro_assistants.services import rule_trials

#: Reviews the agreement page lists at most (the latest first); the figures count them all.
AGREEMENT_ROWS = 500
#: Reviews a replay in the admin reads at most, and the rows it lists.
REPLAY_MAX, REPLAY_DEFAULT, REPLAY_ROWS = 10_000, 1000, 500
#: The attribute the rule list keeps each shadow rule's agreement in.
AGREEMENT_ATTR = "nitro_agreement"


def agreement_text(found: rule_trials.Agreement) -> str:
    """``80% · 8 of 10`` (and ``· 3 not by people``), or ``no decision yet``."""
    if found.rate is None:
        text = _("no decision yet")
    else:
        text = _("%(rate)s · %(agreed)d of %(counted)d") % {
            "rate": f"{found.rate:.0%}",
            "agreed": found.agreed,
            "counted": found.counted,
        }
    if found.not_people:
        text += " · " + _("%(n)d not by people") % {"n": found.not_people}
    return text


def _label(handling: dict[str, Any]) -> str:
    action = str(handling.get("action") or policy_rules.REVIEW)
    if action == policy_rules.REVIEW:
        approvals = int(handling.get("approvals") or 1)
        group = handling.get("group") or ""
        if approvals > 1 or group:
            action += f" · {approvals}" + (f" · {group}" if group else "")
    return action


class ReplayForm(forms.Form):
    """The draft of a replay: the rules that act (ticked), or a rule set's JSON pasted."""

    rules = forms.ModelMultipleChoiceField(
        queryset=Policy.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label=gettext_lazy("Rules that act"),
        help_text=gettext_lazy("Each acts whatever its mode, enabled or not."),
    )
    rules_json = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 8, "cols": 80, "class": "vLargeTextField"}),
        label=gettext_lazy("Or a rule set (JSON)"),
        help_text=gettext_lazy(
            "A list of rules with a rule's fields (group by name, deadlines in seconds): used "
            "instead of the ticked rules. manage.py nitro_assistants_replay --dump prints the "
            "current rules so."
        ),
    )
    last = forms.IntegerField(
        min_value=1,
        max_value=REPLAY_MAX,
        initial=REPLAY_DEFAULT,
        label=gettext_lazy("Last decided reviews"),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field: Any = self.fields["rules"]
        field.queryset = Policy.objects.order_by("position", "pk")
        field.label_from_instance = lambda rule: (
            f"{rule.name} ({rule.get_mode_display()}"
            + ("" if rule.enabled else ", " + str(_("disabled")))
            + ")"
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        text = str(data.get("rules_json") or "").strip()
        try:
            if text:
                try:
                    parsed = json.loads(text)
                except ValueError as exc:
                    self.add_error("rules_json", _("This is not JSON: %(error)s") % {"error": exc})
                    return data
                data["rule_set"] = rule_trials.rules_from_json(parsed)
            else:
                data["rule_set"] = rule_trials.picked_rules(
                    rule.pk for rule in data.get("rules") or []
                )
        except policy_rules.PolicyError as exc:
            self.add_error("rules_json" if text else "rules", str(exc))
        return data


class RuleTrialsAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The policy rules' admin, with the agreement of shadow rules and the replay."""

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path(
                "replay/",
                self.admin_site.admin_view(self.replay_view),
                name="{}_{}_replay".format(*info),
            ),
            path(
                "<path:object_id>/agreement/",
                self.admin_site.admin_view(self.agreement_view),
                name="{}_{}_agreement".format(*info),
            ),
            *super().get_urls(),
        ]

    def _agreement_url(self, obj: Policy) -> str:
        return reverse(f"{self.admin_site.name}:nitro_assistants_policy_agreement", args=[obj.pk])

    @admin.display(description=gettext_lazy("action"), ordering="action")
    def does(self, obj: Policy) -> str:
        """The rule's action; under it, for a shadow rule, ``shadow · 80% · 8 of 10`` linking to
        its verdicts (in the action's column: a column more and the list overflows 1280 px)."""
        if obj.mode != Policy.Mode.SHADOW:
            return obj.get_action_display()
        return format_html(
            '{}<span class="nitro-name nitro-muted nitro-shadow">{} · {}</span>',
            obj.get_action_display(),
            _("shadow"),
            self.agreement(obj),
        )

    @admin.display(description=gettext_lazy("agreement"))
    def agreement(self, obj: Policy) -> str:
        """A shadow rule's agreement with people, linking to its verdicts; ``—`` otherwise."""
        if obj.pk is None or obj.mode != Policy.Mode.SHADOW:
            return "—"
        found = getattr(obj, AGREEMENT_ATTR, None)
        if found is None:
            found = rule_trials.shadow_agreement([obj])[obj.pk]
        return format_html(
            '<a href="{}" class="nitro-agreement">{}</a>',
            self._agreement_url(obj),
            agreement_text(found),
        )

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra_context = {
            **(extra_context or {}),
            "replay_url": reverse(f"{self.admin_site.name}:nitro_assistants_policy_replay"),
        }
        response = super().changelist_view(request, extra_context)
        changelist = getattr(response, "context_data", {}).get("cl")
        if changelist is not None:
            # The page's shadow rules' agreement in one streamed read, not one per row.
            page = list(changelist.result_list)
            shadow = [rule for rule in page if rule.mode == Policy.Mode.SHADOW]
            found = rule_trials.shadow_agreement(shadow)
            for rule in shadow:
                setattr(rule, AGREEMENT_ATTR, found[rule.pk])
        return response

    def agreement_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """A shadow rule's verdicts, review by review: what it would have done, what people
        decided, whether they agree (``?disagreed=1``: the disagreements only)."""
        obj = self.get_object(request, object_id)
        if obj is None:
            raise Http404(_("No such rule."))
        if not self.has_view_or_change_permission(request, obj):
            raise PermissionDenied
        only_disagreed = request.GET.get("disagreed") == "1"
        counts = rule_trials.Agreement(obj.pk)
        rows: list[dict[str, Any]] = []
        screen = reverse(f"{self.admin_site.name}:nitro_assistants_review_changelist")
        for _rule_id, verdict in rule_trials.verdicts([obj]):
            if verdict.agrees is None:
                counts.not_people += 1
            elif verdict.agrees:
                counts.agreed += 1
            else:
                counts.disagreed += 1
            if len(rows) < AGREEMENT_ROWS and (not only_disagreed or verdict.agrees is False):
                decided = verdict.decided
                rows.append(
                    {
                        "review": decided.review_id,
                        "url": f"{screen}{decided.review_id}/review/",
                        "what": decided.what,
                        "would": _label(verdict.verdict),
                        "version": verdict.verdict.get("rule_version"),
                        "decided": decided.decided or _("not by people"),
                        "by": decided.by,
                        "at": decided.decided_at,
                        "agrees": verdict.agrees,
                    }
                )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": obj,
            "title": _("Agreement of shadow rule %(name)s") % {"name": obj.name},
            "counts": counts,
            "summary": agreement_text(counts),
            "rows": rows,
            "only_disagreed": only_disagreed,
            "limit": AGREEMENT_ROWS,
            "enforced": obj.mode != Policy.Mode.SHADOW,
        }
        return TemplateResponse(request, "admin/nitro_assistants/policy/agreement.html", context)

    def replay_view(self, request: HttpRequest) -> HttpResponse:
        """A draft rule set over the last decided reviews: what would change, review by
        review, and the agreement rates. Nothing is written (a POST only to carry the JSON)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        result: dict[str, Any] | None = None
        if request.method == "POST":
            form = ReplayForm(request.POST)
            if str(request.POST.get("rules_json") or "").strip() and not (
                self.has_add_permission(request) or self.has_change_permission(request)
            ):
                # A pasted rule set is code the matcher runs (regular expressions included)
                # over thousands of reviews: it takes someone who may write rules.
                form.add_error(
                    "rules_json",
                    _("Pasting a rule set needs the permission to add or change policy rules."),
                )
            if form.is_valid():
                result = self._replayed(form.cleaned_data["rule_set"], form.cleaned_data["last"])
        else:
            initial = Policy.objects.filter(enabled=True).values_list("pk", flat=True)
            form = ReplayForm(initial={"rules": list(initial), "last": REPLAY_DEFAULT})
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("Replay rules over decided reviews"),
            "form": form,
            "result": result,
            "rows_max": REPLAY_ROWS,
        }
        return TemplateResponse(request, "admin/nitro_assistants/policy/replay.html", context)

    def _replayed(self, rule_set: policy_rules.RuleSet, last: int) -> dict[str, Any]:
        replay = rule_trials.Replay(rule_set, last)
        screen = reverse(f"{self.admin_site.name}:nitro_assistants_review_changelist")
        changed = (row for row in replay if row.changed)
        rows = [
            {
                "review": row.decided.review_id,
                "url": f"{screen}{row.decided.review_id}/review/",
                "what": row.decided.what,
                "decided": row.decided.decided or _("not by people"),
                "by": row.decided.by,
                "then": _label(row.then),
                "then_rule": row.then.get("rule_name") or "",
                "draft": _label(row.draft),
                "draft_rule": row.draft.get("rule_name") or "",
                "agreed_then": row.agreed_then,
                "agreed_draft": row.agreed_draft,
            }
            for row in itertools.islice(changed, REPLAY_ROWS)
        ]
        for _row in changed:  # read to the end: the counts cover every review
            pass
        summary = replay.summary
        return {
            "rows": rows,
            "summary": summary,
            "rate_then": None if summary.rate_then is None else f"{summary.rate_then:.1%}",
            "rate_draft": None if summary.rate_draft is None else f"{summary.rate_draft:.1%}",
            "rules": len(rule_set),
            "more": summary.changed > len(rows),
        }


__all__ = ["AGREEMENT_ATTR", "ReplayForm", "RuleTrialsAdmin", "agreement_text"]
