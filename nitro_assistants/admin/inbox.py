"""The review queue as a support team's inbox: who has which review (claims), whom it is for
(assignments), "next review", and the live endpoint the queue and the review screen poll.

:class:`InboxMixin` is mixed into :class:`~nitro_assistants.admin.reviews.ReviewAdmin`; every
change it makes goes through :mod:`nitro_assistants.services.claims`.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseNotModified,
    HttpResponseRedirect,
    JsonResponse,
)
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from nitro_assistants.admin import live
from nitro_assistants.admin.options import object_or_404
from nitro_assistants.conf import app_settings
from nitro_assistants.models import Claim, Review
from nitro_assistants.services import claims

ASSIGN_PERMISSION = "nitro_assistants.assign_review"
#: The query string of the queue a review was opened from, carried to "next review".
FILTERS_PARAM = "_changelist_filters"
#: The review just decided, whose outcome the next review's screen follows live.
DECIDED_PARAM = "decided"


def as_pk(value: str) -> int | None:
    """A primary key from a query parameter: ASCII digits that fit a bigint, else None."""
    if value.isascii() and value.isdigit() and len(value) <= 18:
        return int(value)
    return None


def claim_label(name: str, since: datetime.datetime | None, now: datetime.datetime) -> str:
    """ "Jane · 2 min"."""
    minutes = max(int((now - since).total_seconds() // 60), 0) if since else 0
    return _("%(name)s · %(n)d min") % {"name": name, "n": minutes}


class ClaimFilter(admin.SimpleListFilter):
    """Mine, unclaimed, claimed by others (live claims only)."""

    title = gettext_lazy("claim")
    parameter_name = "claim"
    MINE, FREE, OTHERS = "mine", "unclaimed", "others"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [
            (self.MINE, _("Claimed by me")),
            (self.FREE, _("Unclaimed")),
            (self.OTHERS, _("Claimed by others")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        live_claim = claims.active_claims()
        mine = Q(claim__user_id=request.user.pk)
        if self.value() == self.MINE:
            return queryset.filter(live_claim & mine)
        if self.value() == self.FREE:
            return queryset.exclude(live_claim)
        if self.value() == self.OTHERS:
            return queryset.filter(live_claim).exclude(mine)
        return queryset


class AssignedFilter(admin.SimpleListFilter):
    """Assigned to me or my groups; the default for a reviewer who has pending assignments."""

    title = gettext_lazy("assigned")
    parameter_name = "assigned"
    MINE, ANYONE = "me", "any"

    def __init__(self, request: HttpRequest, params: Any, model: Any, model_admin: Any) -> None:
        super().__init__(request, params, model, model_admin)
        self.request = request
        self.default = (
            self.ANYONE
            if self.value() is not None
            else (
                self.MINE
                if Review.objects.filter(
                    claims.assigned_to(request.user), status=Review.Status.PENDING
                ).exists()
                else self.ANYONE
            )
        )

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [(self.MINE, _("To me or my groups")), (self.ANYONE, _("All"))]

    def selected(self) -> str:
        return str(self.value() or self.default)

    def has_output(self) -> bool:
        return True

    def choices(self, changelist: Any) -> Any:
        selected = self.selected()
        for value, label in self.lookup_choices:
            yield {
                "selected": selected == value,
                "query_string": changelist.get_query_string({self.parameter_name: value}),
                "display": label,
            }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.selected() == self.MINE:
            return queryset.filter(claims.assigned_to(request.user))
        return queryset


class AssignForm(forms.Form):
    """Assign a review to one person or one group (or to nobody)."""

    user: forms.ModelChoiceField = forms.ModelChoiceField(  # type: ignore[type-arg]
        queryset=None, required=False, label=gettext_lazy("person")
    )
    group = forms.ModelChoiceField(
        queryset=Group.objects.order_by("name"), required=False, label=gettext_lazy("group")
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        users = get_user_model().objects.filter(is_staff=True, is_active=True)
        self.fields["user"].queryset = users.order_by("username")  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("user") and data.get("group"):
            raise forms.ValidationError(_("Assign to a person or a group, not both."))
        return data

    def assignee(self) -> Any:
        return self.cleaned_data.get("user") or self.cleaned_data.get("group")


class InboxMixin:
    """Claims, assignments, next review and the live endpoint of the review queue."""

    admin_site: admin.AdminSite
    opts: Any

    # -- the queue's columns ----------------------------------------------------------------

    def inbox_queryset(self, queryset: QuerySet[Review]) -> QuerySet[Review]:
        """The claim and assignment of every row in the same statement as the rows."""
        return queryset.select_related("claim__user", "assignment__user", "assignment__group")

    @admin.display(description=gettext_lazy("who"))
    def claimed(self, obj: Review) -> str:
        """Who has the review now ("Jane · 2 min") and, below, whom it is for: one column, as
        the queue has little width to spare beside the two sidebars."""
        return format_html("{}{}", self._claim_html(obj), self._assigned_html(obj))

    def _claim_html(self, obj: Review) -> str:
        now = timezone.now()
        held: Claim | None = getattr(obj, "claim", None)
        state = live.claim_of(held, obj) if held is not None else None
        if state is None:
            return format_html('<span class="nitro-claim" data-review="{}">—</span>', obj.pk)
        return format_html(
            '<span class="nitro-claim nitro-claimed" data-review="{}" data-user="{}" '
            'data-since="{}" data-expires="{}" title="{}">{}</span>',
            obj.pk,
            state["user"],
            state["since"] or "",
            state["expires"],
            state["name"],
            claim_label(state["short"], held.claimed_at if held else None, now),
        )

    def _assigned_html(self, obj: Review) -> str:
        assignment = getattr(obj, "assignment", None)
        name = ""
        if assignment is not None:
            who = assignment.group.name if assignment.group_id else assignment.user
            name = (
                who
                if isinstance(who, str)
                else live.display_name(who.first_name, who.last_name, who.get_username())
            )
        if not name:  # an empty line the live queue fills when the review is assigned
            return format_html(
                '<span class="nitro-assigned" data-review="{}" hidden></span>', obj.pk
            )
        return format_html(
            '<span class="nitro-assigned" data-review="{}" title="{}">{}</span>',
            obj.pk,
            _("assigned to"),
            _("for %(who)s") % {"who": name},
        )

    def inbox_changelist_context(self, request: HttpRequest) -> dict[str, Any]:
        query = request.GET.urlencode()
        return {
            "next_url": self._inbox_url("next") + (f"?{query}" if query else ""),
            "live_url": self._inbox_url("live"),
            "poll_seconds": app_settings.LIVE_POLL_SECONDS,
        }

    # -- URLs -------------------------------------------------------------------------------

    def _inbox_url(self, name: str, *args: Any) -> str:
        info = self.opts.app_label, self.opts.model_name
        return reverse(f"{self.admin_site.name}:{info[0]}_{info[1]}_{name}", args=args)

    def inbox_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        wrap = self.admin_site.admin_view
        return [
            path("live/", wrap(self.live_view), name="{}_{}_live".format(*info)),
            path("next/", wrap(self.next_view), name="{}_{}_next".format(*info)),
            path(
                "<path:object_id>/claim/",
                wrap(require_POST(self.claim_view)),
                name="{}_{}_claim".format(*info),
            ),
            path(
                "<path:object_id>/assign/",
                wrap(require_POST(self.assign_view)),
                name="{}_{}_assign".format(*info),
            ),
        ]

    # -- the review screen ------------------------------------------------------------------

    def claim_on_open(self, request: HttpRequest, review: Review, decide_allowed: bool) -> None:
        """Opening a pending review to decide it claims it (or renews the claim)."""
        if request.method == "GET" and decide_allowed and review.status == Review.Status.PENDING:
            claims.claim_review(review, request.user)

    def inbox_context(self, request: HttpRequest, review: Review) -> dict[str, Any]:
        now = timezone.now()
        held = Claim.objects.filter(review_id=review.pk).select_related("user").first()
        pending = review.status == Review.Status.PENDING
        live_claim = held if held is not None and pending and held.active(now) else None
        holder = (
            live.display_name(
                live_claim.user.first_name,
                live_claim.user.last_name,
                live_claim.user.get_username(),
            )
            if live_claim
            else ""
        )
        filters = request.GET.get(FILTERS_PARAM, "")
        decided_pk = as_pk(request.GET.get(DECIDED_PARAM, ""))
        if decided_pk == review.pk:
            decided_pk = None
        assignment = getattr(review, "assignment", None)
        may_assign = bool(request.user.has_perm(ASSIGN_PERMISSION)) and pending
        return {
            "claim": live_claim,
            "claim_mine": bool(live_claim and live_claim.user_id == request.user.pk),
            "claim_holder": holder,
            "claim_minutes": claim_label(holder, live_claim.claimed_at, now) if live_claim else "",
            "claim_url": self._inbox_url("claim", review.pk),
            "assign_url": self._inbox_url("assign", review.pk),
            "assign_form": AssignForm(
                initial={
                    "user": assignment.user_id if assignment else None,
                    "group": assignment.group_id if assignment else None,
                }
            )
            if may_assign
            else None,
            "assignment": assignment,
            "live_url": self._inbox_url("live") + f"?review={review.pk}",
            "next_url": self._inbox_url("next")
            + (f"?{filters}" if filters else f"?{urlencode({'after': review.pk})}"),
            "poll_seconds": app_settings.LIVE_POLL_SECONDS,
            "lease_seconds": int(claims.lease().total_seconds()),
            "decided_pk": decided_pk,
            "decided_url": self._review_screen_url(Review(pk=decided_pk)) if decided_pk else "",
            "decided_live_url": f"{self._inbox_url('live')}?review={decided_pk}"
            if decided_pk
            else "",
        }

    def after_decision_url(self, request: HttpRequest, review: Review) -> str:
        """Where a decision made on the review screen leads: the next review
        (``NEXT_AFTER_DECISION``, in the queue's filters the screen was opened with), or back to
        the decided review, whose outcome then arrives live."""
        filters = request.GET.get(FILTERS_PARAM, "")
        if app_settings.NEXT_AFTER_DECISION:
            params = f"{filters}&" if filters else ""
            return f"{self._inbox_url('next')}?{params}{urlencode({'after': review.pk, DECIDED_PARAM: review.pk})}"
        return self._review_screen_url(review) + self.filters_suffix(request)

    def filters_suffix(self, request: HttpRequest) -> str:
        """The queue's filters a review screen was opened with, to keep on its next URL."""
        filters = request.GET.get(FILTERS_PARAM, "")
        return "?" + urlencode({FILTERS_PARAM: filters}) if filters else ""

    # -- views ------------------------------------------------------------------------------

    def live_view(self, request: HttpRequest) -> HttpResponse:
        """What changed since the page's last poll: 304 when nothing did. ``?ids=1,2,3``: the
        queue's rows; ``?review=<pk>``: one review screen; neither: just the pending count.

        With the change token (a shared cache), a poll presenting the ETag it was given for the
        current token is answered 304 before anything else: no statement of its own, not even
        the permission check (the ETag proves it passed one while the token stood, and a 304
        tells nothing new). The token is read before the data, so a write committed in between
        makes the next poll a 200 again."""
        review_param = request.GET.get("review", "")
        review_pk = as_pk(review_param)
        ids = [pk for v in request.GET.get("ids", "").split(",") if (pk := as_pk(v)) is not None]
        scope = f"review={review_pk}" if review_pk else ",".join(map(str, ids[: live.MAX_ROWS]))
        presented = {t.strip() for t in request.headers.get("If-None-Match", "").split(",")}
        token = live.change_token()
        tag = live.token_etag(request.user, token, scope) if token is not None else ""
        if tag and tag in presented and not (review_param and review_pk is None):
            return self._live_response(HttpResponseNotModified(), tag)
        if not self.has_view_permission(request):  # type: ignore[attr-defined]
            raise PermissionDenied
        if review_param and review_pk is None:
            return JsonResponse({"error": _("review must be a review id")}, status=400)
        mark = live.marker(request.user)
        tag = tag or live.etag(request.user, mark, scope)
        if tag in presented:
            response: HttpResponse = HttpResponseNotModified()
        else:
            body: dict[str, Any] = {
                "pending": mark[3],
                "newest": mark[2],
                "now": timezone.now().isoformat(),
                "me": request.user.pk,
            }
            if review_pk:
                body["review"] = live.review_state(review_pk, self._review_screen_url)
            elif ids:
                body["rows"] = live.queue_rows(ids)
            response = JsonResponse(body)
        return self._live_response(response, tag)

    def _live_response(self, response: HttpResponse, tag: str) -> HttpResponse:
        response["ETag"] = tag
        response["Cache-Control"] = "private, no-cache"
        return response

    def _review_screen_url(self, review: Review) -> str:
        return self._inbox_url("review", review.pk)

    def next_view(self, request: HttpRequest) -> HttpResponse:
        """Claim the next review the user may decide and open it: in the queue's order and
        filters when it comes from the queue (its query string), oldest first otherwise."""
        if not self.has_view_permission(request):  # type: ignore[attr-defined]
            raise PermissionDenied
        params = request.GET.copy()
        after_pk = params.pop("after", [""])[-1]
        decided = params.pop(DECIDED_PARAM, [""])[-1]
        after_id = as_pk(after_pk)
        after = Review.objects.filter(pk=after_id).first() if after_id is not None else None
        candidates: QuerySet[Review] | None = None
        if params:
            # The changelist reads its filters and ordering from GET: the queue's, on a copy.
            queue_request = copy.copy(request)
            queue_request.GET = params  # type: ignore[assignment]
            try:
                changelist = self.get_changelist_instance(queue_request)  # type: ignore[attr-defined]
                candidates = changelist.get_queryset(queue_request)
            except IncorrectLookupParameters:
                candidates = None
        found = claims.next_review(request.user, candidates, after=after)
        queue = self._inbox_url("changelist")
        query = params.urlencode()
        if found is None:
            messages.info(request, _("No more reviews are waiting for you."))
            return HttpResponseRedirect(queue + (f"?{query}" if query else ""))
        target = self._review_screen_url(found)
        carried = {
            **({DECIDED_PARAM: decided} if as_pk(decided) else {}),
            **({FILTERS_PARAM: query} if query else {}),
        }
        if carried:
            target += "?" + urlencode(carried)
        return HttpResponseRedirect(target)

    def claim_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """``action``: ``renew`` (the open screen, every third of the lease), ``take_over``
        (an explicit action, recorded) or ``release`` (the screen was closed)."""
        if not self.has_view_permission(request):  # type: ignore[attr-defined]
            raise PermissionDenied
        review = object_or_404(Review.objects.select_related("thread"), object_id)
        if not self.has_decide_permission(request, review):  # type: ignore[attr-defined]
            raise PermissionDenied
        action = request.POST.get("action", "renew")
        if action == "release":
            claims.release_claim(review, request.user)
            held = None
        elif action in ("renew", "take_over"):
            held = claims.claim_review(review, request.user, take_over=action == "take_over")
        else:
            return JsonResponse({"error": _("Unknown action %(a)r") % {"a": action}}, status=400)
        if (
            request.headers.get("Accept", "").startswith("application/json")
            or action != "take_over"
        ):
            state = live.claim_of(held, review) if held is not None and held.pk else None
            return JsonResponse({"claim": state, "me": request.user.pk})
        messages.success(request, _("You have taken over review #%(pk)s.") % {"pk": review.pk})
        return HttpResponseRedirect(self._review_screen_url(review))

    def assign_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if not request.user.has_perm(ASSIGN_PERMISSION):
            raise PermissionDenied
        review = object_or_404(Review.objects.select_related("thread"), object_id)
        form = AssignForm(request.POST)
        if not form.is_valid():
            for error in form.errors.get("__all__", []) or [_("Choose a person or a group.")]:
                messages.error(request, str(error))
        else:
            to = form.assignee()
            claims.assign_review(review, to, by=request.user)
            if to is None:
                messages.success(
                    request, _("Review #%(pk)s is assigned to nobody.") % {"pk": review.pk}
                )
            else:
                messages.success(
                    request,
                    _("Review #%(pk)s assigned to %(who)s.") % {"pk": review.pk, "who": to},
                )
        return HttpResponseRedirect(self._review_screen_url(review))
