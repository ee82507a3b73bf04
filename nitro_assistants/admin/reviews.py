"""The review queue, the review screen per kind, and the decision log (bulk decisions are in
:mod:`nitro_assistants.admin.bulk`).

Every decision made here goes through :func:`nitro_assistants.services.decide`; this module only
parses, authorizes and reports.
"""

from __future__ import annotations

import datetime
from typing import Any
from urllib.parse import urlsplit

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, get_script_prefix, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from nitro_assistants import redacting, rules, services
from nitro_assistants.admin import content, metrics
from nitro_assistants.admin.bulk import BulkDecisionsMixin
from nitro_assistants.admin.conversation import held_conversation, held_summary, pretty_json
from nitro_assistants.admin.datasets import DatasetExportMixin
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
    ReviewDecisionForm,
    StampForm,
    ToolCallsDecisionForm,
    decision_form_for,
)
from nitro_assistants.admin.inbox import AssignedFilter, ClaimFilter, InboxMixin
from nitro_assistants.admin.live import screen_title
from nitro_assistants.admin.options import ReadOnlyAdmin, can_decide, object_or_404
from nitro_assistants.admin.policies import (
    GovernanceColumns,
    OverdueFilter,
    governance_context,
    recorded_message,
)
from nitro_assistants.admin.search import (
    may_search_content,
    review_matches,
    whole_thread_id,
)
from nitro_assistants.admin.threads import thread_identity
from nitro_assistants.exceptions import (
    InteractionConflictError,
    InteractionForbiddenError,
    NitroAssistantsError,
    PolicyForbiddenError,
    ReviewExpiredError,
    ThreadResumptionError,
)
from nitro_assistants.grant_rules import GrantError, GrantForbiddenError
from nitro_assistants.models import Approval, Decision, Delivery, Event, Review
from nitro_assistants.models.reviews import pending_first
from nitro_assistants.previews import Part
from nitro_assistants.services import grants, previews

#: The session's list of review pks its person revealed (each reveal audited).
REVEALED_SESSION_KEY = "nitro_assistants_revealed"


def _thread_redacted(review: Review) -> bool:
    """Whether the review's (shown) conversation carries a redaction's mark."""
    return redacting.holds_redaction(review.thread.values or {})


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


def _linkable(link: str) -> str:
    """An operation's link, if it is one a browser should follow (http(s) or a path on this
    site); anything else (``javascript:``...) is shown as text, not as a link."""
    scheme = urlsplit(link).scheme.lower()
    return link if scheme in ("http", "https") or (not scheme and link.startswith("/")) else ""


@admin.register(Review)
class ReviewAdmin(
    BulkDecisionsMixin, DatasetExportMixin, GovernanceColumns, InboxMixin, ReadOnlyAdmin
):
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
    # approve_selected and reject_selected: BulkDecisionsMixin (admin/bulk.py)
    # export_dataset: DatasetExportMixin (admin/datasets.py)
    actions = [
        "approve_selected",
        "reject_selected",
        export_audit_jsonl,
        export_audit_csv,
        "export_dataset",
    ]
    change_list_template = "admin/nitro_assistants/review/change_list.html"

    def __init__(self, model: type[Review], admin_site: admin.AdminSite) -> None:
        super().__init__(model, admin_site)
        self._prefixes: dict[str, tuple[str, str]] = {}

    # -- permissions ------------------------------------------------------------------------

    def has_decide_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Who may decide: on the review screen and in the bulk actions alike."""
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
        if not may_search_content(term, request.user):
            messages.warning(
                request,
                _("Redacted values are not searched: search by thread id instead."),
            )
            return queryset.none(), False
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
                "<path:object_id>/reveal/",
                self.admin_site.admin_view(self.reveal_view),
                name="{}_{}_reveal".format(*info),
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
                # Built on what the screen showed (redacted or revealed), so an approval
                # compares the same values back and an edit merges only what was changed.
                form = decision_form_for(self.shown(request, review), request.POST)
                if form.is_valid():
                    asked = timezone.now()  # an approval older than this is a repeat
                    given = form.grant() if isinstance(form, ToolCallsDecisionForm) else None
                    try:
                        # By pk, with the revision and digest the form was rendered from: the
                        # service refuses the decision when the review changed since.
                        stamped = stamp.shown()
                        if review.kind not in rules.REVIEW_KINDS:
                            stamped.pop("shown", None)  # held calls and replies only
                        body = {**form.decision(), **stamped}
                        recorded: Decision | Approval
                        if given is not None:  # also "approve calls like this": one transaction
                            recorded = grants.decide_with_grant(
                                review.pk, request.user, body, given, via="admin"
                            )
                        else:
                            recorded = services.decide(review.pk, request.user, body, via="admin")
                    except ReviewExpiredError as exc:  # said plainly, not as a stale form
                        messages.error(request, str(exc))
                        stale, status = True, 409
                    except GrantError as exc:  # on the grant's field at fault; nothing stored
                        assert isinstance(form, ToolCallsDecisionForm)
                        form.grant_form.add_service_error(exc.field, str(exc))
                        status = 400
                    except GrantForbiddenError as exc:  # no grant_approval: said on the form
                        assert isinstance(form, ToolCallsDecisionForm)
                        form.grant_form.add_service_error("grant.scope", str(exc))
                        status = 403
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
                elif review.status == Review.Status.EXPIRED:
                    messages.error(request, str(rules.expired_error(f"review #{review.pk}")))
                    stale, status = True, 409
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
        # Read before the copy for showing is made, so it shares the handling read with it.
        must_show = previews.required_parts(review) if pending else []
        shown = self.shown(request, review)
        if pending and form is None and review.kind in DECISION_FORMS:
            form = decision_form_for(shown)
        context = self.review_context(request, shown, form, decide_allowed, stale, must_show)
        return TemplateResponse(
            request, "admin/nitro_assistants/review/review.html", context, status=status
        )

    @staticmethod
    def revealed(request: HttpRequest, review: Review) -> bool:
        """Whether this person revealed this review (in this session, on the record)."""
        return review.pk in request.session.get(REVEALED_SESSION_KEY, [])

    def shown(self, request: HttpRequest, review: Review) -> Review:
        """``review`` as this person reads it: redacted, unless they revealed it."""
        if self.revealed(request, review) and redacting.may_reveal(request.user):
            return review
        return redacting.shown_review(review)

    def reveal_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Show one review's redacted values to one person: POST only, with the
        ``reveal_redacted`` permission, recorded in the thread's audit chain."""
        if request.method != "POST" or not self.has_view_permission(request):
            raise PermissionDenied
        review = object_or_404(self._reviews(), object_id)
        if not self.has_view_permission(request, review):
            raise PermissionDenied
        try:
            services.reveal(review, request.user)
        except InteractionForbiddenError:
            raise PermissionDenied from None
        revealed = [pk for pk in request.session.get(REVEALED_SESSION_KEY, []) if pk != review.pk]
        # The latest few only: a reveal is for the review at hand, not a standing pass.
        request.session[REVEALED_SESSION_KEY] = [*revealed[-19:], review.pk]
        messages.warning(
            request, _("Review #%(pk)s is shown unredacted; this was recorded.") % {"pk": review.pk}
        )
        return HttpResponseRedirect(self.review_url(review))

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
        must_show: list[Part] | None = None,
    ) -> dict[str, Any]:
        must_show = must_show or []
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
        if decision is not None:
            decision = redacting.shown_decision(decision)
        required = tuple(part.path for part in must_show)
        conversation = held_conversation(review, decision, required=required)
        if isinstance(form, ToolCallsDecisionForm):
            for call_form in form.calls:  # a call that cannot be edited: its arguments as rows
                call_form.required = required
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
            # Without the script, the parts a rule names are drawn open: the form says so.
            "stamp": StampForm.for_review(
                review, [fold for part in must_show for fold in part.folds]
            ),
            "must_show": must_show,
            "revealed": self.revealed(request, review) and redacting.may_reveal(request.user),
            "can_decide": decide_allowed and pending and form is not None,
            "can_dismiss": decide_allowed
            and rules.may_move(review.kind, review.status, rules.DISMISSED),
            "stuck_error": review.payload.get("error")
            if review.kind in rules.DIALECT_KINDS and review.status == Review.Status.FAILED
            else None,
            "decide_allowed": decide_allowed,
            # The grant's fields, for those who may give one (grant_approval).
            "grant_allowed": decide_allowed
            and bool(request.user.has_perm(grants.GRANT_PERMISSION)),
            "stale": stale,
            "decision": decision,
            # The grant that decided it, on its own page (what it covers, its uses left).
            "grant_url": reverse(
                f"{self.admin_site.name}:nitro_assistants_grant_change", args=[decision.grant_id]
            )
            if decision is not None and decision.grant_id
            else "",
            # The grants a person gave with this approval ("approve calls like this").
            "grants_given": [
                (pk, reverse(f"{self.admin_site.name}:nitro_assistants_grant_change", args=[pk]))
                for pk in review.grants_given.order_by("pk").values_list("pk", flat=True)
            ]
            if decision is not None and decision.decided_by_id
            else [],
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
            # Something on the screen is redacted, and this person may reveal it.
            "redacted": redacting.holds_redaction(review.payload) or _thread_redacted(review),
            "may_reveal": redacting.may_reveal(request.user),
            "reveal_url": reverse(
                f"{self.admin_site.name}:nitro_assistants_review_reveal", args=[review.pk]
            ),
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
