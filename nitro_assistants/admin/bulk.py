"""Bulk decisions from the review queue: approve or reject the ticked reviews, after a
confirmation page, each one through :func:`nitro_assistants.services.decide`.

:class:`BulkDecisionsMixin` is mixed into :class:`~nitro_assistants.admin.reviews.ReviewAdmin`.
Every ticked row carries the revision and digest the queue showed beside its checkbox, so a review
that changed since the page was drawn is refused and reported, one by one, never decided blind.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from nitro_assistants import redacting, rules, services
from nitro_assistants.admin.conversation import held_summary
from nitro_assistants.admin.forms import RejectReasonForm
from nitro_assistants.admin.policies import quorum_message
from nitro_assistants.exceptions import ThreadResumptionError
from nitro_assistants.models import Approval, Review

#: A bulk confirmation page (approve, reject) lists at most this many of the reviews it decides.
CONFIRMATION_PAGE_LISTS = 100


def approve_all(review: Review) -> dict[str, Any]:
    """The decision "approve everything this review holds"; ``ThreadResumptionError`` when a
    call does not allow it or the kind has no plain approval."""
    if review.kind not in rules.REVIEW_KINDS:
        raise ThreadResumptionError(
            _("A %(kind)s review is decided on its own screen.")
            % {"kind": review.get_kind_display()}
        )
    return rules.approve_everything(review.kind, review.tool_calls)


def approval_refusal(review: Review) -> str:
    """Why approving ``review`` in bulk will be refused ("" when it should go through), shown on
    the confirmation page before anything is decided; ``services.decide`` has the last word."""
    if review.status != Review.Status.PENDING:
        return _("it is %(status)s") % {"status": review.get_status_display()}
    try:
        decision = approve_all(review)
    except ThreadResumptionError as exc:
        return str(exc)
    blocked = [
        str(call.get("name") or call.get("id"))
        for call in review.tool_calls
        if "approve" not in (call.get("allowed_decisions") or ["approve"])
    ]
    if decision.get("tool_calls") is not None and blocked:
        return _("%(names)s cannot be approved") % {"names": ", ".join(blocked)}
    if review.kind == Review.Kind.REPLY and "approve" not in (
        (review.reply or {}).get("allowed_decisions") or ["approve"]
    ):
        return _("the reply cannot be approved")
    return ""


def reject_all(review: Review, reason: str) -> dict[str, Any]:
    if review.kind not in rules.REVIEW_KINDS:
        raise ThreadResumptionError(
            _("A %(kind)s review is decided on its own screen.")
            % {"kind": review.get_kind_display()}
        )
    return rules.reject_everything(review.kind, review.tool_calls, reason)


#: The queue posts, beside each ticked row, the revision and digest it showed (``<rev>:<digest>``).
SHOWN_PREFIX = "nitro-shown-"


def shown_stamp(request: HttpRequest, pk: int) -> dict[str, Any]:
    """The revision and digest the queue showed for review ``pk``, or ``{}`` if it showed none."""
    revision, _sep, digest = request.POST.get(f"{SHOWN_PREFIX}{pk}", "").partition(":")
    if not revision.isdigit() or not digest:
        return {}
    return {"revision": int(revision), "digest": digest}


def shown_fields(request: HttpRequest) -> list[tuple[str, str]]:
    """The posted stamps, for a confirmation page to carry forward."""
    return [(k, str(request.POST.get(k, ""))) for k in request.POST if k.startswith(SHOWN_PREFIX)]


class BulkDecisionsMixin:
    """The queue's "Approve selected reviews…" and "Reject selected reviews…" actions (list them
    in ``actions``) and the checkbox that carries what each row showed. The admin it is mixed
    into grants them with ``has_decide_permission``."""

    admin_site: admin.AdminSite
    opts: Any

    def action_checkbox(self, obj: Review) -> SafeString:
        # The same input Django renders, written directly: rendering a CheckboxInput through
        # the form renderer per row was the single largest cost of the queue page.
        return format_html(
            '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">'
            '<input type="hidden" name="{}{}" value="{}:{}">',
            helpers.ACTION_CHECKBOX_NAME,
            obj.pk,
            _("Select this object for an action - %(name)s") % {"name": f"review #{obj.pk}"},
            SHOWN_PREFIX,
            obj.pk,
            obj.revision,
            obj.digest,
        )

    def _decide_each(
        self,
        request: HttpRequest,
        queryset: QuerySet[Review],
        build: Any,
        verb: str,
    ) -> None:
        applied = refused = waiting = 0
        for review in self._selected(request, queryset):
            try:
                # The revision and digest of the row as the queue showed it, when it did (a
                # "select all" takes rows nobody saw: they are decided as they are now).
                shown = shown_stamp(request, review.pk)
                recorded = services.decide(
                    review.pk if shown else review,
                    request.user,
                    {**build(review), **shown},
                    via="admin",
                )
            except ThreadResumptionError as exc:
                refused += 1
                messages.warning(
                    request,
                    _("Review #%(pk)s refused: %(reason)s") % {"pk": review.pk, "reason": exc},
                )
            else:
                if isinstance(recorded, Approval):  # a quorum: counted, not applied yet
                    waiting += 1
                else:
                    applied += 1
        if waiting:
            messages.info(request, quorum_message(waiting))
        if applied:
            messages.success(
                request,
                ngettext("%(count)d review %(verb)s.", "%(count)d reviews %(verb)s.", applied)
                % {"count": applied, "verb": verb},
            )
        if refused:
            messages.error(
                request,
                ngettext("%(count)d review refused.", "%(count)d reviews refused.", refused)
                % {"count": refused},
            )

    def _selected(self, request: HttpRequest, queryset: QuerySet[Review]) -> QuerySet[Review]:
        """The rows ticked, whatever they are now. The changelist's queryset is filtered (the
        queue shows pending reviews), so a row decided by someone else since the page was drawn
        would silently drop out of it; it must be refused and reported instead."""
        if request.POST.get("select_across") == "1":
            return queryset.order_by("requested_at", "pk")
        ticked = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        return (
            Review.objects.filter(pk__in=[pk for pk in ticked if pk.isdigit()])
            .select_related("thread")
            .defer("thread__values", "thread__context")
            .order_by("requested_at", "pk")
        )

    @admin.action(description=gettext_lazy("Approve selected reviews…"), permissions=["decide"])
    def approve_selected(
        self, request: HttpRequest, queryset: QuerySet[Review]
    ) -> TemplateResponse | None:
        """Approve every ticked review, after a confirmation page that lists what each one
        approves (as bulk reject asks its reason on one): approving runs tools and sends replies,
        so it is never one stray click on the queue."""
        if request.POST.get("post") == "yes":
            self._decide_each(request, queryset, approve_all, _("approved"))
            return None
        context = self._confirmation_context(request, queryset, "approve_selected")
        context["title"] = _("Approve selected reviews")
        context["reviews"] = [
            (review, summary, approval_refusal(review)) for review, summary in context["reviews"]
        ]
        return TemplateResponse(
            request, "admin/nitro_assistants/review/approve_selected.html", context
        )

    @admin.action(description=gettext_lazy("Reject selected reviews…"), permissions=["decide"])
    def reject_selected(
        self, request: HttpRequest, queryset: QuerySet[Review]
    ) -> TemplateResponse | None:
        form = RejectReasonForm(request.POST if "post" in request.POST else None)
        if form.is_bound and form.is_valid():
            reason = form.cleaned_data["reason"]
            self._decide_each(request, queryset, lambda r: reject_all(r, reason), _("rejected"))
            return None
        context = self._confirmation_context(request, queryset, "reject_selected")
        context.update({"title": _("Reject selected reviews"), "form": form})
        return TemplateResponse(
            request, "admin/nitro_assistants/review/reject_selected.html", context
        )

    def _confirmation_context(
        self, request: HttpRequest, queryset: QuerySet[Review], action: str
    ) -> dict[str, Any]:
        """What a bulk action's confirmation page shows: the ticked reviews (the first
        ``CONFIRMATION_PAGE_LISTS``), how many in all, and the selection to post back."""
        selected = self._selected(request, queryset)
        shown = list(selected[:CONFIRMATION_PAGE_LISTS])
        across = request.POST.get("select_across") == "1"
        count = selected.count() if across else len(shown)
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            # Named by who each is about (its thread's subject): redacted as on every page.
            "reviews": [(redacting.shown_review(review), held_summary(review)) for review in shown],
            "count": count,
            "more": count - len(shown),
            "select_across": across,
            "ticked": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "shown": shown_fields(request),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "action": action,
            "queue_url": reverse(f"{self.admin_site.name}:nitro_assistants_review_changelist"),
        }
