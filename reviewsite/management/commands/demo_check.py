"""Check a running demo as a person would see it: in a real browser (Playwright driving Debian's
chromium), log in, open every admin page the demo links, and on each one require a 200, the
admin's stylesheet applied, every static file loaded and no script error; then decide the held
tool call and approve the plan through their review screens and see what came of them; and see
the example policy rules at work (docs/governance.md): the small refund decided by its rule, the
large one waiting for two approvals in Finance (approved by the admin, then by the Finance
reviewer), the cancellation escalated and flagged overdue, and the deposit refund expired; and
the scoped approval grant the admin gave: listed with its uses, and the move it approved saying so.

The database is read only before the browser starts and after it closes (Playwright's sync API
runs an event loop in this thread, where Django refuses ORM calls); in between, the check waits
on what the pages show.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from playwright.sync_api import Page, Response, sync_playwright

from nitro_assistants.models import (
    Decision,
    Delivery,
    Grant,
    Review,
    ReviewHandling,
    StepResult,
    Thread,
)
from reviewsite import outbox
from reviewsite.management.commands.seed_demo import seeded_pending
from reviewsite.models import Appointment

CHROMIUM = "/usr/bin/chromium"

# Unstyled, a page's header has a transparent background; the admin's base.css paints it.
STYLED = """() => {
  const sheets = [...document.styleSheets].filter(s => s.href && /\\/admin\\/css\\/base[.\\w]*\\.css$/.test(s.href));
  // A sheet that did not load has no readable rules (reading them throws).
  const count = s => { try { return s.cssRules.length; } catch (e) { return 0; } };
  const rules = sheets.reduce((n, s) => n + count(s), 0);
  const header = document.querySelector("#header");
  return {rules, header: header ? getComputedStyle(header).backgroundColor : null};
}"""
UNSTYLED = {None, "rgba(0, 0, 0, 0)", "transparent"}


class Command(BaseCommand):
    help = (
        "Check a running demo site in a real browser (used by `make demo CHECK=1` and the tests)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--url", required=True)
        parser.add_argument("--username", required=True)
        parser.add_argument("--password", required=True)
        parser.add_argument(
            "--second-username",
            default="finance",
            help="The seeded Finance reviewer (same password): the large refund's second approver.",
        )
        parser.add_argument("--screenshots", default="", help="Directory to save each page to.")
        parser.add_argument(
            "--timeout",
            type=float,
            default=60.0,
            help="Seconds to wait for a decision's outcome (with a broker, from the worker).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.base = options["url"].rstrip("/")
        self.timeout = options["timeout"]
        self.shots = Path(options["screenshots"]) if options["screenshots"] else None
        if self.shots:
            self.shots.mkdir(parents=True, exist_ok=True)

        governed = self.governed()
        grant, granted = self.granted()
        pending = {
            r.kind: r
            for r in Review.objects.filter(status=Review.Status.PENDING).exclude(
                thread__in=[r.thread_id for r in governed.values()]
                + [grant.review.thread_id, granted.thread_id]
            )
        }
        if set(pending) != {"tool_calls", "reply", "question", "plan"}:
            raise CommandError(f"the seed should leave one review of each kind; found {pending}")
        # Every review the seed left waiting (it printed their count): the queue lists each one.
        seeded = [review.pk for review in seeded_pending()]
        reviews = list(Review.objects.order_by("pk").values_list("pk", flat=True))
        threads = list(Thread.objects.order_by("pk").values_list("pk", flat=True))
        deliveries = dict(Delivery.objects.values_list("status", "pk"))
        if {"delivered", "failed"} - set(deliveries):
            raise CommandError(f"expected a delivered and a failed reply; got {deliveries}")
        tool_call, plan = pending["tool_calls"], pending["plan"]

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
            )
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.set_default_timeout(30_000)
                self.watch(page)
                self.log_in(page, options["username"], options["password"])
                visited = self.visit_every_page(page, seeded, reviews, threads)
                follow_up = self.decide_tool_call(page, tool_call.pk)
                steps = self.approve_plan(page, plan.pk)
                self.check_governance(page, governed)
                self.check_shadow(page)
                self.check_grant(page, grant, granted)
                self.approve_quorum(
                    page,
                    governed["quorum"].pk,
                    (options["username"], options["second_username"]),
                    options["password"],
                )
                page.context.clear_cookies()  # the quorum's second reviewer was last
                self.log_in(page, options["username"], options["password"])
                self.check_stop(page)
            finally:
                browser.close()

        tool_call.refresh_from_db()
        plan.refresh_from_db()
        quorum = Decision.objects.filter(review=governed["quorum"]).first()
        if (
            quorum is None
            or "admin" not in quorum.note
            or options["second_username"] not in (quorum.note)
        ):
            raise CommandError(f"the large refund was not approved by both: {quorum}")
        results = {s.step_id: s for s in StepResult.objects.filter(review=plan)}
        moved = Appointment.objects.get(pk=42)
        texted = [m for m in outbox.sent() if "is now on Tuesday" in str(m.get("content"))]
        if tool_call.status != Review.Status.APPLIED:
            raise CommandError(f"review {tool_call.pk} is {tool_call.status}, not applied")
        if [r.status for r in results.values()] != ["completed", "completed"]:
            raise CommandError(f"the plan's steps did not complete: {results}")
        if moved.day != "Tuesday" or not texted:
            raise CommandError(
                f"the plan's operations did not act: appointment on {moved.day}, "
                f"{len(texted)} message(s) to the technician"
            )
        self.stdout.write(
            f"demo check passed: the {len(seeded)} seeded pending reviews listed, {visited} pages "
            f"rendered with the admin's stylesheet; review {tool_call.pk} approved, thread now waits on "
            f"{follow_up}; plan {plan.pk} approved, steps: {steps}; deliveries: "
            f"{Delivery.objects.filter(status='delivered').count()} delivered, "
            f"{Delivery.objects.filter(status='failed').count()} failed; governance: "
            f"review {governed['auto'].pk} approved by its rule, review {governed['quorum'].pk} "
            f"approved by two ({quorum.note}), review {governed['escalated'].pk} escalated, "
            f"review {governed['expired'].pk} expired unanswered; grant #{grant.pk} given with "
            f"review {grant.review_id}, approved review {granted.pk}"
        )

    def granted(self) -> tuple[Grant, Review]:
        """The seeded grant and the review it approved (the seed waited for it)."""
        # The last one given (a database seeded again keeps the earlier ones, revoked).
        grant = Grant.objects.select_related("review", "granted_by").order_by("pk").last()
        granted = Review.objects.filter(decision__grant=grant).first() if grant else None
        if grant is None or granted is None:
            raise CommandError(f"the seed should leave a grant and a review it approved: {grant}")
        return grant, granted

    def check_grant(self, page: Page, grant: Grant, granted: Review) -> None:
        """The grant on the Grant list (its tool, one use of three, its granter, live) and its
        page; the review it approved names it and its granter in its decision."""
        # Wider, as for the queue: at 1400 px the list's last column (state) is at the edge.
        page.set_viewport_size({"width": 1900, "height": 900})
        self.open(page, "/admin/nitro_assistants/grant/", "grants")
        page.set_viewport_size({"width": 1400, "height": 900})
        row = page.locator("#result_list tbody tr").filter(
            has=page.locator(f'a[href*="/grant/{grant.pk}/"]')
        )
        text = " ".join(" ".join(row.all_inner_texts()).split())
        granter = grant.granted_by.get_username() if grant.granted_by else ""
        for expected in (grant.tool, "1 / 3", granter, "live"):
            if expected not in text:
                raise CommandError(f"the Grant list's row of grant {grant.pk} reads {text!r}")
        path = f"/admin/nitro_assistants/review/{granted.pk}/review/"
        self.open(page, path, "review-granted")
        decision = " ".join(page.locator(".nitro-decision .nitro-facts").all_inner_texts())
        decision = " ".join(decision.split())
        for expected in (
            "a grant (nobody was asked)",
            f"#{grant.pk}, given by {granter}",
            f"Approved by grant #{grant.pk}",
        ):
            if expected not in decision:
                raise CommandError(f"review {granted.pk}'s decision reads {decision!r}")
        # Its link leads to the grant's page: what it covers, the uses it has left.
        with page.expect_navigation() as navigation:
            page.locator("#nitro-grant a").click()
        response = navigation.value
        self.check_page(page, response.status if response else 0, page.url, "grant")
        if f"/grant/{grant.pk}/change/" not in page.url:
            raise CommandError(f"review {granted.pk}'s grant link leads to {page.url}")

    def check_stop(self, page: Page) -> None:
        """The stop button: a stop of one tool added in the admin shows its banner on every
        page; resumed fully, the banner goes."""
        self.open(page, "/admin/nitro_assistants/stop/add/", "stop_add")
        page.select_option("#id_scope", "tool")
        page.fill("#id_tool", "demo_check_tool")
        page.fill("#id_reason", "the demo check stops a tool")
        with page.expect_navigation():
            page.click("input[name=_save]")
        for path, name in (
            ("/admin/", "stop_banner_index"),
            ("/admin/nitro_assistants/review/", "stop_banner_queue"),
        ):
            self.open(page, path, name)
            banner = page.locator(".nitro-stop-banner")
            if not banner.count() or "the demo check stops a tool" not in banner.inner_text():
                raise CommandError(f"{path} shows no stop banner while a stop is in force")
        self.open(page, "/admin/nitro_assistants/stop/", "stops")
        page.locator("#result_list tbody input[name=_selected_action]").first.check()
        page.select_option("select[name=action]", "resume_all")
        with page.expect_navigation():
            page.click("button[name=index]")
        self.open(page, "/admin/", "stop_resumed")
        if page.locator(".nitro-stop-banner").count():
            raise CommandError("the stop banner stays after the stop was resumed")

    def governed(self) -> dict[str, Review]:
        """The seeded reviews the example rules handled: ``auto`` (approved by its rule),
        ``quorum`` (waiting for two approvals in Finance), ``escalated`` (its deadline passed)."""
        auto = Review.objects.filter(decision__reviewer_id__startswith="policy:").first()
        quorum = Review.objects.filter(
            status=Review.Status.PENDING, handling__group__name="Finance"
        ).first()
        escalated = Review.objects.filter(
            status=Review.Status.PENDING, handling__escalated_at__isnull=False
        ).first()
        expired = Review.objects.filter(status=Review.Status.EXPIRED).first()
        found = {"auto": auto, "quorum": quorum, "escalated": escalated, "expired": expired}
        if None in found.values():
            raise CommandError(f"the seed should leave one review per governed case: {found}")
        handled = {h.review_id: h for h in ReviewHandling.objects.filter(review__in=found.values())}
        if auto is None or auto.status != Review.Status.APPLIED or auto.pk not in handled:
            raise CommandError(f"the small refund is not applied by its rule: {auto}")
        return {k: v for k, v in found.items() if v is not None}

    # -- the browser ---------------------------------------------------------------------------

    def watch(self, page: Page) -> None:
        """Collect what a person would notice: a script error, a static file that did not load,
        any response of the site's that is a server error."""
        self.problems: list[str] = []

        def on_response(response: Response) -> None:
            if not response.url.startswith(self.base):
                return
            if response.status >= 500 or ("/static/" in response.url and response.status >= 400):
                self.problems.append(f"{response.status} {response.url}")

        page.on("response", on_response)
        page.on("pageerror", lambda error: self.problems.append(f"script error: {error}"))

        def on_failed(request: Any) -> None:
            # ERR_ABORTED is the browser cancelling a request itself (the page navigated away
            # while the live poll or a claim renewal was in flight), not the site failing.
            failure = str(request.failure or "")
            if request.url.startswith(self.base) and "ERR_ABORTED" not in failure:
                self.problems.append(f"{request.url}: {failure}")

        page.on("requestfailed", on_failed)

    def open(self, page: Page, path: str, name: str) -> None:
        """Open ``path``; it must answer 200 with the admin's stylesheet applied and nothing
        broken on the way."""
        response = page.goto(self.base + path, wait_until="load")
        self.check_page(page, response.status if response else 0, path, name)

    def check_page(self, page: Page, status: int, path: str, name: str) -> None:
        if self.shots:
            page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)
        if status != 200:
            raise CommandError(f"{path} answered {status}")
        if self.problems:
            raise CommandError(f"{path}: " + "; ".join(self.problems))
        styled = page.evaluate(STYLED)
        if not styled["rules"] or styled["header"] in UNSTYLED:
            raise CommandError(f"{path} shows without the admin's stylesheet ({styled})")

    def log_in(self, page: Page, username: str, password: str) -> None:
        self.open(page, "/admin/login/", "login")
        page.fill("#id_username", username)
        page.fill("#id_password", password)
        with page.expect_navigation():
            page.click("input[type=submit]")
        if "/admin/login/" in page.url or not page.locator("#logout-form").count():
            raise CommandError("could not log in to the admin")

    def visit_every_page(
        self, page: Page, seeded: list[int], reviews: list[int], threads: list[int]
    ) -> int:
        pages = [
            ("/admin/", "index"),
            ("/admin/nitro_assistants/review/", "queue"),
            ("/admin/nitro_assistants/review/?status=all", "queue-all"),
            *((f"/admin/nitro_assistants/review/{pk}/review/", f"review-{pk}") for pk in reviews),
            ("/admin/nitro_assistants/thread/", "threads"),
            *((f"/admin/nitro_assistants/thread/{pk}/change/", f"thread-{pk}") for pk in threads),
            ("/admin/nitro_assistants/delivery/", "deliveries"),
            ("/admin/nitro_assistants/event/", "events"),
            ("/admin/nitro_assistants/review/metrics/", "metrics"),
            ("/admin/reviewsite/appointment/", "appointments"),
            ("/outbox/", "outbox"),
        ]
        for path, name in pages:
            self.open(page, path, name)
            if name == "queue":
                listed = {int(pk) for pk in re.findall(r"/review/(\d+)/", page.content())}
                missing = [pk for pk in seeded if pk not in listed]
                if missing:
                    raise CommandError(f"the review queue does not show reviews {missing}")
            if name == "deliveries":
                shown = {t.strip() for t in page.locator("td.field-status").all_inner_texts()}
                if not {"delivered", "failed"} <= shown:
                    raise CommandError(f"the deliveries page shows {shown}, not both outcomes")
        return len(pages)

    def wait_for(self, page: Page, path: str, what: str, shown: Callable[[], bool]) -> None:
        """Reload ``path`` until ``shown()`` (with a broker, the worker applies decisions)."""
        deadline = time.monotonic() + self.timeout
        while True:
            response = page.goto(self.base + path, wait_until="load")
            if shown():
                self.check_page(page, response.status if response else 0, path, what)
                return
            if time.monotonic() > deadline:
                self.check_page(page, response.status if response else 0, path, what)
                raise CommandError(f"{path} does not show {what} after {self.timeout:.0f}s")
            time.sleep(0.5)

    def follow(self, page: Page, path: str, link: str, name: str) -> None:
        """From ``path``, follow the step result link that reads ``link``."""
        self.open(page, path, f"{name}-from")
        with page.expect_navigation() as navigation:
            page.locator(".nitro-step-results a", has_text=link).first.click()
        response = navigation.value
        self.check_page(page, response.status if response else 0, page.url, name)

    def decide_tool_call(self, page: Page, pk: int) -> str:
        """Approve every held call on the review screen; the thread moves on to its reply."""
        path = f"/admin/nitro_assistants/review/{pk}/review/"
        self.open(page, path, f"review-{pk}-before")
        for radio in page.locator('input[type=radio][name$="-action"][value="approve"]').all():
            radio.check()
        with page.expect_navigation():
            page.click("input[name=_decide]")
        if "Decision recorded" not in page.content():
            raise CommandError(f"the review screen did not record the decision on review {pk}")
        now = page.locator(".nitro-now a")
        self.wait_for(
            page,
            path,
            "tool-call-decided",
            lambda: "reply #" in " ".join(now.all_inner_texts()).lower(),
        )
        return now.inner_text()

    def row(self, page: Page, pk: int) -> Any:
        return page.locator("#result_list tbody tr").filter(
            has=page.locator(f'a[href*="/review/{pk}/"]')
        )

    def check_governance(self, page: Page, governed: dict[str, Review]) -> None:
        """What the queue and the screens show of the example rules: the quorum's count and
        group, the escalated review overdue with Managers, the small refund decided by its
        rule (its thread's events name it)."""
        # At 1400 px the queue's last columns (approvals, due) are past the right edge (the
        # table scrolls sideways): a wider window, so that the screenshot shows them.
        page.set_viewport_size({"width": 1900, "height": 900})
        self.open(page, "/admin/nitro_assistants/review/", "queue-governance")
        page.set_viewport_size({"width": 1400, "height": 900})
        quorum = " ".join(self.row(page, governed["quorum"].pk).all_inner_texts())
        if "0 of 2 approvals · waiting for someone in Finance" not in quorum:
            raise CommandError(f"the queue's large refund row reads {quorum!r}")
        escalated = self.row(page, governed["escalated"].pk)
        due = " ".join(escalated.locator("td.field-due").all_inner_texts())
        approvals = " ".join(escalated.locator("td.field-approvals").all_inner_texts())
        if "overdue" not in due or "Managers" not in approvals:
            raise CommandError(f"the escalated cancellation reads {due!r}, {approvals!r}")
        # The deposit refund expired unanswered: the queue's expired filter lists it with its
        # badge, and the assistant was told (its thread shows the rejection's reason).
        expired = governed["expired"]
        self.open(page, "/admin/nitro_assistants/review/?status=expired", "queue-expired")
        badge = " ".join(self.row(page, expired.pk).locator("td.field-due").all_inner_texts())
        if "expired" not in badge:
            raise CommandError(f"the expired deposit refund's row reads {badge!r}")
        self.open(
            page, f"/admin/nitro_assistants/thread/{expired.thread_id}/change/", "thread-expired"
        )
        if "Expired unanswered" not in page.content():
            raise CommandError(f"thread {expired.thread_id} does not show the expiry's reason")
        auto = governed["auto"]
        self.open(page, f"/admin/nitro_assistants/review/{auto.pk}/review/", "review-auto")
        if "Small refunds go through" not in page.content():
            raise CommandError(f"review {auto.pk}'s screen does not name the rule that decided it")
        self.open(page, f"/admin/nitro_assistants/thread/{auto.thread_id}/change/", "thread-auto")
        text = page.content()
        if "review_auto_decided" not in text or "Small refunds go through" not in text:
            raise CommandError(f"thread {auto.thread_id}'s events do not name the rule")

    def check_shadow(self, page: Page) -> None:
        """The shadow rule's agreement on the rule list (the seed's two approved replies: it
        would have approved them), its page of verdicts, and a replay of the enabled rules (the
        shadow one acting) over the decided reviews."""
        self.open(page, "/admin/nitro_assistants/policy/", "rules-shadow")
        row = page.locator("#result_list tbody tr", has_text="Replies go through (trial)")
        agreement = " ".join(row.locator("td.field-does").all_inner_texts())
        if "100% · 2 of 2" not in agreement:
            raise CommandError(f"the shadow rule's agreement reads {agreement!r}")
        with page.expect_navigation():
            row.locator("a.nitro-agreement").click()
        self.check_page(page, 200, page.url, "rule-agreement")
        listed = page.locator("#nitro-agreement-rows tbody tr").count()
        if listed != 2:
            raise CommandError(f"the shadow rule's page lists {listed} verdicts, not 2")
        self.open(page, "/admin/nitro_assistants/policy/replay/", "rules-replay")
        with page.expect_navigation():
            page.click("input[name=_replay]")
        self.check_page(page, 200, page.url, "rules-replayed")
        changed = page.locator("#nitro-replay-changed").inner_text().strip()
        if not changed.isdigit() or int(changed) < 2:
            raise CommandError(f"the replay says {changed!r} reviews would change, not 2 or more")

    def approve_quorum(self, page: Page, pk: int, users: tuple[str, str], password: str) -> None:
        """The admin approves the large refund: it stays pending, 1 of 2; the Finance reviewer
        approves it too, and it is applied (the refund runs)."""
        path = f"/admin/nitro_assistants/review/{pk}/review/"
        first, second = users
        for who, name in ((first, "quorum-first"), (second, "quorum-second")):
            if who == second:
                page.context.clear_cookies()
                self.log_in(page, second, password)
            self.open(page, path, f"{name}-before")
            for radio in page.locator('input[type=radio][name$="-action"][value="approve"]').all():
                radio.check()
            with page.expect_navigation():
                page.click("input[name=_decide]")
            self.check_page(page, 200, path, name)
            said = page.content()
            if who == first and "1 of 2 approvals" not in said:
                raise CommandError(f"the first approval of review {pk} did not count 1 of 2")
        self.wait_for(
            page,
            "/admin/nitro_assistants/review/?status=all",
            "quorum-applied",
            lambda: "applied" in " ".join(self.row(page, pk).all_inner_texts()),
        )

    def approve_plan(self, page: Page, pk: int) -> str:
        """Approve the plan as seeded; its steps run the demo's operations, and the review screen
        shows each one's result."""
        path = f"/admin/nitro_assistants/review/{pk}/review/"
        self.open(page, path, f"review-{pk}-before")
        page.check('input[name="interaction-decision"][value="approve"]')
        with page.expect_navigation():
            page.click("input[name=_decide]")
        if "Decision recorded" not in page.content():
            raise CommandError(f"the review screen did not record the decision on review {pk}")
        steps = page.locator(".nitro-step-results tbody tr")
        done = page.locator(
            ".nitro-step-results tbody tr:is(.nitro-step-completed, .nitro-step-failed, "
            ".nitro-step-skipped)"
        )
        # The steps run, and the assistant gets the approval and drafts its reply to the
        # customer: with a broker these are separate tasks, finishing in either order.
        reply = page.locator(".nitro-now")
        self.wait_for(
            page,
            path,
            "plan-approved",
            lambda: (
                done.count() == 2
                and "booked for Tuesday at 10:00" in " ".join(reply.all_inner_texts())
            ),
        )
        rows = [" ".join(r.split()) for r in steps.all_inner_texts()]
        if page.locator(".nitro-step-results tr.nitro-step-completed").count() != 2:
            raise CommandError(f"the plan's steps did not all complete: {rows}")
        for expected in ("from Monday to Tuesday", "Texted Sam Ortiz"):
            if not any(expected in r for r in rows):
                raise CommandError(f"no step result says {expected!r}: {rows}")
        # Where the steps' links lead: the moved appointment, the technician's text.
        self.follow(page, path, "appointment 42", "appointment-moved")
        if page.input_value("#id_day") != "Tuesday":
            raise CommandError(f"{page.url} shows the appointment on {page.input_value('#id_day')}")
        self.follow(page, path, "/outbox/", "outbox-after-plan")
        if "appointment is now on Tuesday at 10:00" not in page.content():
            raise CommandError("the outbox does not show the technician's text")
        return "; ".join(rows)
