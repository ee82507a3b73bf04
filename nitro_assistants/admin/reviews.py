"""The review queue, the review screen per kind, bulk decisions, and the decision log.

Every decision made here goes through :func:`nitro_assistants.services.decide`; this module only
parses, authorizes and reports.
"""

from __future__ import annotations

import datetime
from typing import Any
from urllib.parse import urlsplit

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, get_script_prefix, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from nitro_assistants import rules, services
from nitro_assistants.admin import content, metrics
from nitro_assistants.admin.conversation import held_conversation, held_summary, pretty_json
from nitro_assistants.admin.evidence import export_audit_csv, export_audit_jsonl
from nitro_assistants.admin.filters import (
    AgeFilter,
    AssistantFilter,
    DeliveryStateFilter,
    QueueStatusFilter,
)
from nitro_assistants.admin.forms import (
    ACTION_LABELS,
    DECISION_FORMS,
    RejectReasonForm,
    ReviewDecisionForm,
    StampForm,
    decision_form_for,
)
from nitro_assistants.admin.inbox import AssignedFilter, ClaimFilter, InboxMixin
from nitro_assistants.admin.live import screen_title
from nitro_assistants.admin.options import ReadOnlyAdmin, can_decide, object_or_404
from nitro_assistants.admin.policies import (
    GovernanceColumns,
    OverdueFilter,
    governance_context,
    quorum_message,
    recorded_message,
)
from nitro_assistants.admin.search import review_matches, whole_thread_id
from nitro_assistants.admin.threads import thread_identity
from nitro_assistants.exceptions import (
    InteractionConflictError,
    InteractionForbiddenError,
    NitroAssistantsError,
    PolicyForbiddenError,
    ThreadResumptionError,
)
from nitro_assistants.models import Approval, Decision, Delivery, Event, Review
from nitro_assistants.models.reviews import pending_first

#: A bulk confirmation page (approve, reject) lists at most this many of the reviews it decides.
CONFIRMATION_PAGE_LISTS = 100


def latest_delivery_state() -> Subquery:
    """The status of the thread's most recent delivery, as one correlated subquery."""
    return Subquery(
        Delivery.objects.filter(thread_id=OuterRef("thread_id"))
        .order_by("-first_seen_at", "-pk")
        .values("status")[:1]
    )


def review_title(review: Review) -> str:
    """What the review screen is (:func:`nitro_assistants.admin.live.screen_title`)."""
    return screen_title(
        review.pk, review.get_kind_display(), review.status, review.get_status_display()
    )


def short_age(age: datetime.timedelta) -> str:
    """``42 s``, ``12 min``, ``5 h``, ``3 d``: one unit, the largest that fits."""
    seconds = max(int(age.total_seconds()), 0)
    if seconds < 60:
        return _("%(n)d s") % {"n": seconds}
    if seconds < 3600:
        return _("%(n)d min") % {"n": seconds // 60}
    if seconds < 86400:
        return _("%(n)d h") % {"n": seconds // 3600}
    return _("%(n)d d") % {"n": seconds // 86400}


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


def _linkable(link: str) -> str:
    """An operation's link, if it is one a browser should follow (http(s) or a path on this
    site); anything else (``javascript:``...) is shown as text, not as a link."""
    scheme = urlsplit(link).scheme.lower()
    return link if scheme in ("http", "https") or (not scheme and link.startswith("/")) else ""


@admin.register(Review)
class ReviewAdmin(GovernanceColumns, InboxMixin, ReadOnlyAdmin):
    """The review queue: pending reviews oldest first; each opens its review screen."""

    list_display = [
        "held",
        "thread_link",
        "assistant",
        "kind",
        "age",
        "status",
        "delivery",
        "claimed",  # who has it, whom it is for (admin/inbox.py)
        *GovernanceColumns.governance_list_display,
    ]
    list_display_links = None  # the held item links to its review screen, not a change form
    list_filter = [
        QueueStatusFilter,
        "kind",
        AssistantFilter,
        AgeFilter,
        DeliveryStateFilter,
        # claims and assignments (admin/inbox.py)
        AssignedFilter,
        ClaimFilter,
        OverdueFilter,
    ]
    search_fields = ["thread__thread_id", "thread__subject", "payload"]
    search_help_text = gettext_lazy(
        "Who it is about, text of the conversation, a tool name, text of the call or reply, "
        "or the start of a thread id."
    )
    list_per_page = 50
    show_full_result_count = False
    actions = ["approve_selected", "reject_selected", export_audit_jsonl, export_audit_csv]
    change_list_template = "admin/nitro_assistants/review/change_list.html"

    def __init__(self, model: type[Review], admin_site: admin.AdminSite) -> None:
        super().__init__(model, admin_site)
        self._prefixes: dict[str, tuple[str, str]] = {}

    # -- permissions ------------------------------------------------------------------------

    def has_decide_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_decide(request)

    # -- the queue --------------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Review]:
        queryset: QuerySet[Review] = super().get_queryset(request)
        return self.with_governance(
            self.inbox_queryset(
                queryset.select_related("thread")
                .defer("thread__values", "thread__context")
                .annotate(delivery_state=latest_delivery_state())
            )
        )

    def get_ordering(self, request: HttpRequest) -> list[Any]:
        if request.GET.get(QueueStatusFilter.parameter_name, Review.Status.PENDING) != "all":
            return ["requested_at", "pk"]  # one status: the queue index serves it
        return [pending_first().asc(), "requested_at", "pk"]  # nitro_review_pending_first_idx

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Review], search_term: str
    ) -> tuple[QuerySet[Review], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        thread_id = whole_thread_id(term)
        if thread_id is not None:
            return queryset.filter(thread__thread_id=thread_id), False
        return queryset.filter(review_matches(term)), False

    def _url_prefixes(self) -> tuple[str, str]:
        """The review and thread changelist URLs, reversed once (per script prefix): the queue
        builds two links per row, and ``reverse()`` per row was a tenth of the page's time."""
        key = get_script_prefix()
        cached = self._prefixes.get(key)
        if cached is None:
            site = self.admin_site.name
            cached = (
                reverse(f"{site}:nitro_assistants_review_changelist"),
                reverse(f"{site}:nitro_assistants_thread_changelist"),
            )
            self._prefixes = {key: cached}
        return cached

    def review_url(self, review: Review) -> str:
        """The review screen of ``review`` (``<pk>/review/``, from :meth:`get_urls`)."""
        return f"{self._url_prefixes()[0]}{review.pk}/review/"

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

    @admin.display(description=gettext_lazy("about"), ordering="thread__subject")
    def thread_link(self, obj: Review) -> str:
        """Who and what the conversation is about, linking to the thread; its short id beside."""
        return thread_identity(obj.thread, f"{self._url_prefixes()[1]}{obj.thread_id}/change/")

    @admin.display(description=gettext_lazy("assistant"), ordering="thread__assistant_key")
    def assistant(self, obj: Review) -> str:
        return obj.thread.assistant_key

    @admin.display(description=gettext_lazy("what is held"))
    def held(self, obj: Review) -> str:
        return format_html(
            '<a class="nitro-held" href="{}">{}</a>', self.review_url(obj), held_summary(obj) or "—"
        )

    @admin.display(description=gettext_lazy("age"), ordering="requested_at")
    def age(self, obj: Review) -> str:
        return short_age(timezone.now() - obj.requested_at)

    @admin.display(description=gettext_lazy("delivery"), ordering="delivery_state")
    def delivery(self, obj: Review) -> str:
        return str(getattr(obj, "delivery_state", None) or "—")

    def list_title(self, request: HttpRequest) -> str:
        status = request.GET.get(QueueStatusFilter.parameter_name, Review.Status.PENDING)
        return _("Reviews waiting") if status == Review.Status.PENDING else _("Reviews")

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra_context = {
            **(extra_context or {}),
            "metrics_url": reverse(f"{self.admin_site.name}:nitro_assistants_review_metrics"),
            **self.inbox_changelist_context(request),
        }
        return super().changelist_view(request, extra_context)

    # -- extra views ------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            *self.inbox_urls(),
            path(
                "metrics/",
                self.admin_site.admin_view(self.metrics_view),
                name="{}_{}_metrics".format(*info),
            ),
            path(
                "<path:object_id>/review/",
                self.admin_site.admin_view(self.review_view),
                name="{}_{}_review".format(*info),
            ),
            *super().get_urls(),
        ]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # Staff who may not look at reviews learn nothing, not even whether the id exists.
        if request.method == "POST" or not self.has_view_permission(request):
            raise PermissionDenied  # decisions are posted to the review screen, not here
        review = object_or_404(Review.objects.all(), object_id)
        if not self.has_view_permission(request, review):
            raise PermissionDenied
        return HttpResponseRedirect(self.review_url(review))

    def _reviews(self) -> QuerySet[Review]:
        return Review.objects.select_related("thread", "decision", "decision__decided_by")

    def review_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """One review: the conversation up to what is held and, while pending, its decision
        form. A decided or superseded review is shown read-only, with who, what, when and why."""
        if not self.has_view_permission(request):
            raise PermissionDenied  # before the lookup: nothing said about the id
        # A POST (a decision, a dismissal) needs the review's own row: services.decide reads it
        # again, with its thread, under its lock, and a decision is on the way to the worker
        # as soon as that commits (bench/decision_latency.py). Only a refused one renders the
        # screen, which then reads the thread and any decision as it needs them.
        found = Review.objects.all() if request.method == "POST" else self._reviews()
        review = object_or_404(found, object_id)
        if not self.has_view_permission(request, review):
            raise PermissionDenied
        decide_allowed = self.has_decide_permission(request, review)
        self.claim_on_open(request, review, decide_allowed)
        form: ReviewDecisionForm | None = None
        stale = False
        status = 200
        if request.method == "POST" and "_dismiss" in request.POST:
            if not decide_allowed:
                raise PermissionDenied
            return self._dismiss(request, review)
        if request.method == "POST":
            if not decide_allowed:
                raise PermissionDenied
            stamp = StampForm(request.POST)
            if not stamp.is_valid():  # not rendered from any review: nothing it shows is known
                stale, status = True, 409
            elif review.kind not in DECISION_FORMS:
                messages.error(
                    request,
                    _("A %(kind)s review cannot be decided here yet.")
                    % {"kind": review.get_kind_display()},
                )
                status = 400
            else:
                form = decision_form_for(review, request.POST)
                if form.is_valid():
                    asked = timezone.now()  # an approval older than this is a repeat
                    try:
                        # By pk, with the revision and digest the form was rendered from: the
                        # service refuses the decision when the review changed since.
                        recorded = services.decide(
                            review.pk,
                            request.user,
                            {**form.decision(), **stamp.shown()},
                            via="admin",
                        )
                    except InteractionConflictError:
                        stale, status = True, 409
                    except PolicyForbiddenError as exc:  # the rule's group, one's own run
                        form.add_error(str(exc))
                        status = 403
                    except InteractionForbiddenError:
                        raise PermissionDenied from None
                    except ThreadResumptionError as exc:
                        form.add_error(str(exc))
                        status = 400
                    else:
                        messages.success(request, recorded_message(review, recorded, asked))
                        return HttpResponseRedirect(self.after_decision_url(request, review))
                elif review.status != Review.Status.PENDING or not stamp.rendered_from(review):
                    # Checked against the review as it is now, the fields of a form rendered
                    # from an earlier revision (a quorum edit since) read as changes the
                    # reviewer made: the form is stale, as services.decide would say of it.
                    stale, status = True, 409
                else:
                    status = 400
            if stale:
                form = None
                review = object_or_404(self._reviews(), object_id)
        pending = review.status == Review.Status.PENDING
        if pending and form is None and review.kind in DECISION_FORMS:
            form = decision_form_for(review)
        context = self.review_context(request, review, form, decide_allowed, stale)
        return TemplateResponse(
            request, "admin/nitro_assistants/review/review.html", context, status=status
        )

    def _dismiss(self, request: HttpRequest, review: Review) -> HttpResponse:
        """End the pause without answering it (Agent Inbox's "ignore thread")."""
        try:
            services.dismiss(review.pk, request.user, via="admin")
        except InteractionForbiddenError:
            raise PermissionDenied from None
        except NitroAssistantsError as exc:  # no longer pending, moved past, server refused
            messages.error(request, str(exc))
        else:
            messages.success(
                request, _("The pause of review #%(pk)s was dismissed.") % {"pk": review.pk}
            )
        return HttpResponseRedirect(self.review_url(review))

    def review_context(
        self,
        request: HttpRequest,
        review: Review,
        form: ReviewDecisionForm | None,
        decide_allowed: bool,
        stale: bool,
    ) -> dict[str, Any]:
        try:
            decision: Decision | None = review.decision
        except Decision.DoesNotExist:
            decision = None
        superseded = None
        if review.status == Review.Status.SUPERSEDED:
            superseded = (
                Event.objects.filter(review=review, verb="review_superseded")
                .select_related("actor")
                .order_by("-at")
                .first()
            )
        current = (
            Review.objects.filter(thread_id=review.thread_id, status=Review.Status.PENDING)
            .exclude(pk=review.pk)
            .first()
        )
        pending = review.status == Review.Status.PENDING
        conversation = held_conversation(review, decision)
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": review_title(review),
            # Who and what it is about: under the title, and first in the browser tab's title.
            "subtitle": review.thread.subject or review.thread.short_id,
            "review": review,
            "thread": review.thread,
            "thread_url": reverse(
                f"{self.admin_site.name}:nitro_assistants_thread_change", args=[review.thread_id]
            ),
            "conversation": conversation,
            "form": form,
            "form_template": form.template_name if form else "",
            "stamp": StampForm.for_review(review),
            "can_decide": decide_allowed and pending and form is not None,
            "can_dismiss": decide_allowed
            and rules.may_move(review.kind, review.status, rules.DISMISSED),
            "stuck_error": review.payload.get("error")
            if review.kind in rules.DIALECT_KINDS and review.status == Review.Status.FAILED
            else None,
            "decide_allowed": decide_allowed,
            "stale": stale,
            "decision": decision,
            "superseded": superseded,
            # What an approved plan's steps did, as they run (their operations' results).
            "step_results": [
                {"step": step, "href": _linkable(step.link)} for step in review.step_results.all()
            ]
            if review.kind == Review.Kind.PLAN
            else [],
            "current": current,
            "current_summary": held_summary(current) if current else "",
            "current_url": self.review_url(current) if current else "",
            "payload_json": pretty_json(review.payload),
            "action_labels": ACTION_LABELS,
            "reply": review.reply or {},
            "queue_url": reverse(f"{self.admin_site.name}:nitro_assistants_review_changelist"),
            **self.inbox_context(request, review),
            **governance_context(review),
            **self.readable_context(review, decision),
            "held_in_conversation": any(message.held for message in conversation),
        }

    def readable_context(self, review: Review, decision: Decision | None) -> dict[str, Any]:
        """What the review screen's body reads: what is held, and what was decided, drawn for
        people (:mod:`nitro_assistants.admin.content`) rather than as JSON."""
        interaction = review.kind in (
            Review.Kind.QUESTION,
            Review.Kind.BLUEPRINT,
            Review.Kind.PLAN,
        )
        return {
            "calls_shown": content.show_calls(review),
            "interaction_shown": content.show_interaction(review, decision)
            if interaction
            else None,
            "decided_items": content.decided_items(decision, review) if decision else [],
            "answer_json": pretty_json(decision.answer) if decision and decision.answer else "",
            "edited_as": self._edited_as(review),
        }

    def _edited_as(self, review: Review) -> dict[str, Any] | None:
        """The revision a reviewer's edits made of ``review`` (which they superseded), to link
        to from it: that is where the decision and what ran are."""
        if review.status != Review.Status.SUPERSEDED or not review.interaction_id:
            return None
        edited = (
            Review.objects.filter(
                thread_id=review.thread_id,
                interaction_id=review.interaction_id,
                revision__gt=review.revision,
                origin="user",
            )
            .order_by("revision")
            .only("pk", "revision", "status")
            .first()
        )
        if edited is None:
            return None
        return {"review": edited, "url": self.review_url(edited)}

    def metrics_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("Review metrics"),
            "metrics": metrics.collect(),
            "queue_url": reverse(f"{self.admin_site.name}:nitro_assistants_review_changelist"),
        }
        return TemplateResponse(request, "admin/nitro_assistants/review/metrics.html", context)

    # -- bulk actions -----------------------------------------------------------------------

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
            "reviews": [(review, held_summary(review)) for review in shown],
            "count": count,
            "more": count - len(shown),
            "select_across": across,
            "ticked": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "shown": shown_fields(request),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "action": action,
            "queue_url": reverse(f"{self.admin_site.name}:nitro_assistants_review_changelist"),
        }


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    list_display = [
        "pk",
        "review",
        "reviewer_id",
        "channel",
        "shown_actions",
        "outcome",
        "decided_at",
    ]
    list_filter = ["outcome", "channel"]
    list_select_related = ["review"]
    search_fields = ["reviewer_id", "note"]

    @admin.display(description=gettext_lazy("actions"))
    def shown_actions(self, obj: Decision) -> str:
        return ", ".join(obj.actions)
