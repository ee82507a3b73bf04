"""Headless check of a running demo: log in, see the seeded reviews in the admin, decide one."""

from __future__ import annotations

import re
from typing import Any

import requests
from django.core.management.base import BaseCommand, CommandError

from nitro_assistants.models import Delivery, Review


class Command(BaseCommand):
    help = "Check a running demo site end to end (used by `make demo CHECK=1` and the tests)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--url", required=True)
        parser.add_argument("--username", required=True)
        parser.add_argument("--password", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        base = options["url"].rstrip("/")
        web = requests.Session()
        login = web.get(f"{base}/admin/login/", timeout=30)
        token = web.cookies.get("csrftoken") or ""
        answer = web.post(
            f"{base}/admin/login/?next=/admin/",
            data={
                "csrfmiddlewaretoken": token,
                "username": options["username"],
                "password": options["password"],
            },
            headers={"Referer": login.url},
            timeout=30,
        )
        if answer.url.rstrip("/").endswith("/admin/login") or "logout" not in answer.text:
            raise CommandError("could not log in to the admin")

        pending = list(Review.objects.filter(status=Review.Status.PENDING).order_by("pk"))
        kinds = {review.kind for review in pending}
        if not {"tool_calls", "reply"} <= kinds:
            raise CommandError(f"the seed should leave tool-call and reply reviews; found {kinds}")
        queue = web.get(f"{base}/admin/nitro_assistants/review/", timeout=30)
        if queue.status_code != 200:
            raise CommandError(f"the review queue answered {queue.status_code}")
        listed = {int(pk) for pk in re.findall(r"/review/(\d+)/", queue.text)}
        missing = [review.pk for review in pending if review.pk not in listed]
        if missing:
            raise CommandError(f"the review queue does not show reviews {missing}")

        # Decide the held tool call through the admin's review screen, as a reviewer would.
        review = next(r for r in pending if r.kind == "tool_calls")
        screen = f"{base}/admin/nitro_assistants/review/{review.pk}/review/"
        page = web.get(screen, timeout=30)
        hidden = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page.text))
        missing_fields = {"csrfmiddlewaretoken", "revision", "digest"} - set(hidden)
        if page.status_code != 200 or missing_fields:
            raise CommandError(f"the review screen is missing {sorted(missing_fields)}")
        form = {**hidden, **{f"call-{i}-action": "approve" for i in range(len(review.tool_calls))}}
        decided = web.post(screen, data=form, headers={"Referer": screen}, timeout=120)
        if decided.status_code >= 400:
            raise CommandError(f"the review screen refused the decision ({decided.status_code})")
        review.refresh_from_db()
        follow_up = Review.objects.filter(
            thread=review.thread, status=Review.Status.PENDING
        ).first()
        if review.status != Review.Status.APPLIED or follow_up is None or follow_up.kind != "reply":
            raise CommandError(
                f"deciding review {review.pk} did not move the thread on to its reply "
                f"(status {review.status})"
            )
        delivered = Delivery.objects.filter(status=Delivery.Status.DELIVERED).count()
        failed = Delivery.objects.filter(status=Delivery.Status.FAILED).count()
        if not delivered or not failed:
            raise CommandError(
                f"expected a delivered and a failed reply; got {delivered}, {failed}"
            )
        self.stdout.write(
            f"demo check passed: {len(pending)} seeded reviews listed, review {review.pk} approved, "
            f"thread now waits on its reply; deliveries: {delivered} delivered, {failed} failed"
        )
