"""The day replayed: conversations started as an SMS gateway starts them, and simulated reviewers
who decide through the JSON API (most), walk away from a claimed review (the admin's review
screen claims it), approve a few at once (the admin's bulk action), or leave a cancellation past
its rule's deadline. Needs Django set up (the driver's process, on the cluster's database).
"""

from __future__ import annotations

import heapq
import random
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import requests

from reviewsite.agent import script

ASSISTANT = "virtual-confirmation"
#: What the customers write, and how often: a move (a held call, then a held reply), a
#: confirmation (a held reply), a small refund (approved by its rule at once), a large one (two
#: approvals in Finance), a cancellation (two dispatchers, a deadline that escalates).
MIX = (
    (script.MOVE, 45),
    (script.CONFIRM, 20),
    (script.SMALL_REFUND, 10),
    (script.LARGE_REFUND, 12),
    (script.CANCEL, 13),
)
#: Reviews per conversation of that mix, measured (docs/scale.md): starts per second are the
#: reviews per second asked for over this.
REVIEWS_PER_CONVERSATION = 1.9
#: Reviews a day at the base rate (issue 39): 100,000 a day.
BASE_PER_DAY = 100_000
CANCEL_DEADLINE_SECONDS = 20
PASSWORD = "cluster-reviewer"


def seed(reviewers: int) -> list[tuple[str, str]]:
    """The example site's rules, with the cancellation's deadline short enough to pass during
    the run; ``reviewers`` staff in every group the rules name, each with an API key. Returns
    (username, key) pairs."""
    import datetime

    from django.contrib.auth.models import Group, Permission, User

    from nitro_assistants.models import Policy
    from nitro_assistants.services.api_keys import create_api_key
    from reviewsite.management.commands.seed_demo import example_rules

    example_rules()
    Policy.objects.filter(tool="cancel_*").update(
        deadline=datetime.timedelta(seconds=CANCEL_DEADLINE_SECONDS)
    )
    admin, _ = User.objects.get_or_create(username="cluster-admin")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    perms = list(Permission.objects.filter(content_type__app_label="nitro_assistants"))
    groups = list(Group.objects.filter(name__in=["Dispatch", "Managers", "Finance"]))
    keys = []
    for n in range(reviewers):
        user, _ = User.objects.get_or_create(username=f"reviewer{n:02d}")
        user.is_staff = True
        user.set_password(PASSWORD)
        user.save()
        user.user_permissions.set(perms)
        user.groups.set(groups)
        _, secret = create_api_key(user, "cluster", actor=admin)
        keys.append((user.username, secret))
    return keys


def start_conversation(rng: random.Random, n: int) -> str:
    """One customer's message, through ``services.start_run`` (no site user: the gateway's)."""
    from nitro_assistants import services

    texts, weights = zip(*MIX, strict=True)
    text = rng.choices(texts, weights)[0]
    run = services.start_run(
        ASSISTANT,
        [{"role": "user", "content": text}],
        metadata={"customer": f"Customer {n}", "phone": f"+1555{n:07d}"},
    )
    return str(run.pk)


def human_delay(rng: random.Random) -> float:
    """How long a reviewer takes to read and decide: log-normal, median 3 s, capped at 40 s."""
    return min(40.0, rng.lognormvariate(1.1, 0.8))


@dataclass
class Post:
    review: int
    at: float  # wall clock, when the POST was sent
    status: int
    pending: bool  # still pending after it (a quorum's first approval)
    how: str  # "api" or "bulk"


@dataclass
class Reviewers:
    """Reviewers deciding through the site on ``base`` (``http://web:8000``)."""

    base: str
    keys: list[tuple[str, str]]
    seed: int = 39
    threads: int = 32
    abandon: float = 0.08
    bulk: float = 0.12
    posts: list[Post] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    abandoned: int = 0
    bulked: int = 0
    _queue: list[tuple[float, int, int]] = field(default_factory=list)
    _taken: dict[int, float] = field(default_factory=dict)
    _sessions: dict[int, str] = field(default_factory=dict)
    #: Logged-in admin sessions (and their CSRF token) not in use, by username.
    _admins: dict[str, list[tuple[requests.Session, str]]] = field(default_factory=dict)
    #: Who approved, by review id and by conversation (session id).
    _approvers: dict[int | str, set[str]] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _due: threading.Condition = field(init=False)
    _stop: threading.Event = field(default_factory=threading.Event)
    _pool: list[threading.Thread] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._due = threading.Condition(self._lock)

    def start(self) -> Reviewers:
        self.rng = random.Random(self.seed)
        self._pool = [threading.Thread(target=self._poll, daemon=True)]
        self._pool += [
            threading.Thread(target=self._work, args=(i,), daemon=True) for i in range(self.threads)
        ]
        for thread in self._pool:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._pool:
            thread.join(timeout=60)

    def _error(self, what: str) -> None:
        with self._lock:
            self.errors[what] = self.errors.get(what, 0) + 1

    def _api(self, session: requests.Session, key: str, method: str, path: str, **kw: Any) -> Any:
        return session.request(
            method,
            f"{self.base}/nitro/api/{path}",
            headers={"Authorization": f"Bearer {key}"},
            timeout=15,
            **kw,
        )

    def _poll(self) -> None:
        """The queue as the team sees it: each pending review is picked up by someone after
        a human delay (one poll a second, a page of 100 at a time)."""
        session = requests.Session()
        _username, key = self.keys[0]
        while not self._stop.is_set():
            after = 0
            for _page in range(5):
                try:
                    answer = self._api(
                        session, key, "GET", f"reviews?status=pending&limit=100&after={after}"
                    )
                except requests.RequestException:
                    self._error("list: no answer")
                    break
                if answer.status_code != 200:
                    self._error(f"list: {answer.status_code}")
                    break
                body = answer.json()
                now = time.time()
                with self._lock:
                    for item in body["items"]:
                        self._sessions[item["id"]] = item["sessionId"]
                        if item["id"] not in self._taken or now - self._taken[item["id"]] > 60:
                            self._taken[item["id"]] = now
                            due = now + human_delay(self.rng)
                            self._push((due, item["id"], 0))
                if not body.get("next"):
                    break
                after = body["items"][-1]["id"]
            self._stop.wait(1.0)

    def _next(self) -> tuple[float, int, int] | None:
        """The next review due, waiting for it (at most 0.5 s): the reviewers sleep until
        something is due rather than poll, so that the load spends little of the cores it
        shares with the hosts."""
        with self._due:
            if self._queue and self._queue[0][0] <= time.time():
                return heapq.heappop(self._queue)
            wait = self._queue[0][0] - time.time() if self._queue else 0.5
            self._due.wait(min(0.5, max(0.001, wait)))
            if self._queue and self._queue[0][0] <= time.time():
                return heapq.heappop(self._queue)
        return None

    def _push(self, item: tuple[float, int, int]) -> None:
        with self._due:
            heapq.heappush(self._queue, item)
            self._due.notify()

    def _work(self, n: int) -> None:
        session = requests.Session()
        rng = random.Random(self.seed * 100 + n)
        while not self._stop.is_set():
            item = self._next()
            if item is None:
                continue
            _due, review, tries = item
            roll = rng.random()
            try:
                if roll < self.abandon and tries == 0:
                    self._abandon(session, rng, review)
                elif roll < self.abandon + self.bulk:
                    self._bulk(rng, review)
                else:
                    self._decide(session, rng, review)
            except requests.RequestException as exc:
                self._error(f"request: {type(exc).__name__}")
                self._retry(review, tries)

    def _retry(self, review: int, tries: int) -> None:
        if tries < 5:
            with self._lock:
                self._push((time.time() + 2.0, review, tries + 1))

    def _reviewer(self, rng: random.Random, review: int, session: str) -> tuple[str, str]:
        """Someone who has not approved this review yet (a quorum counts each person once), nor
        anything else in its conversation: whoever approved a held call requested the run that
        paused on the reply, and a rule that asks for two approvals refuses that person
        ("You started this conversation")."""
        with self._lock:
            done = self._approvers.get(review, set()) | self._approvers.get(session, set())
            free = [k for k in self.keys[1:] if k[0] not in done]
        return rng.choice(free or self.keys[1:])

    def _decide(self, session: requests.Session, rng: random.Random, review: int) -> None:
        with self._lock:
            conversation = self._sessions.get(review, "")
        username, key = self._reviewer(rng, review, conversation)
        shown = self._api(session, key, "GET", f"reviews/{review}")
        if shown.status_code != 200:
            self._error(f"read: {shown.status_code}")
            return
        body = shown.json()
        if body["status"] != "pending":
            return
        if body["kind"] == "tool_calls":
            decision = {
                "tool_calls": [{"id": c["id"], "action": "approve"} for c in body["tool_calls"]]
            }
        elif body["kind"] == "reply":
            decision = {"reply": {"action": "approve"}}
        else:
            self._error(f"kind {body['kind']}")
            return
        decision |= {"revision": body["revision"], "digest": body["digest"]}
        at = time.time()
        answer = self._api(session, key, "POST", f"reviews/{review}/decide", json=decision)
        pending = answer.status_code == 200 and answer.json().get("status") == "pending"
        with self._lock:
            self.posts.append(Post(review, at, answer.status_code, pending, "api"))
            if answer.status_code == 200:
                self._approvers.setdefault(review, set()).add(username)
                self._approvers.setdefault(body["sessionId"], set()).add(username)
        if answer.status_code == 429:
            self._retry(review, 0)
        elif answer.status_code not in (200, 409):
            self._error(f"decide: {answer.status_code} {answer.text[:120]}")
        if pending:  # a quorum: someone else approves too, a little later
            with self._lock:
                self._push((time.time() + human_delay(rng), review, 0))

    def _login(self, rng: random.Random) -> tuple[str, requests.Session, str]:
        """A reviewer's admin session: logged in once and kept, as a person keeps a tab open
        (each login hashes the password: hundreds of milliseconds of the web host's CPU)."""
        username, _key = rng.choice(self.keys[1:])
        with self._lock:
            kept = self._admins.get(username)
            if kept:
                session, csrf = kept.pop()
                return username, session, csrf
        session = requests.Session()
        page = session.get(f"{self.base}/admin/login/", timeout=15)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        session.post(
            f"{self.base}/admin/login/",
            data={
                "username": username,
                "password": PASSWORD,
                "csrfmiddlewaretoken": token.group(1) if token else "",
                "next": "/admin/",
            },
            headers={"Referer": f"{self.base}/admin/login/"},
            timeout=15,
        )
        return username, session, session.cookies.get("csrftoken", "")

    def _keep(self, username: str, session: requests.Session, csrf: str, page: Any) -> bool:
        """Keep the session for the next time unless the page was the login form (the session
        was lost, with the cache it lives in); returns whether it was still logged in."""
        if "/admin/login/" in page.url:
            return False
        with self._lock:
            self._admins.setdefault(username, []).append((session, csrf))
        return True

    def _abandon(self, session: requests.Session, rng: random.Random, review: int) -> None:
        """Open the review screen (which claims it), read a while, close the tab: the claim
        lapses and the review goes back to the queue for someone else."""
        username, admin, csrf = self._login(rng)
        page = admin.get(f"{self.base}/admin/nitro_assistants/review/{review}/change/", timeout=15)
        if page.status_code != 200:
            self._error(f"review screen: {page.status_code}")
        elif not self._keep(username, admin, csrf, page):
            self._error("review screen: logged out")
        with self._lock:
            self.abandoned += 1
        self._retry(review, 0)

    def _bulk(self, rng: random.Random, review: int) -> None:
        """Tick this review and up to four more that are due, and approve them all from the
        queue (the admin's bulk action, with its confirmation)."""
        ticked = [review]
        with self._lock:
            while len(ticked) < 5 and self._queue and self._queue[0][0] <= time.time() + 5:
                ticked.append(heapq.heappop(self._queue)[1])
        username, admin, csrf = self._login(rng)
        at = time.time()
        answer = admin.post(
            f"{self.base}/admin/nitro_assistants/review/",
            data={
                "action": "approve_selected",
                "index": "0",
                "_selected_action": [str(pk) for pk in ticked],
                "post": "yes",
                "csrfmiddlewaretoken": csrf,
            },
            headers={"Referer": f"{self.base}/admin/nitro_assistants/review/"},
            timeout=30,
        )
        if answer.status_code == 200 and not self._keep(username, admin, csrf, answer):
            self._error("bulk: logged out")  # not approved: back to the queue
            for pk in ticked:
                self._retry(pk, 0)
            return
        with self._lock:
            self.bulked += len(ticked)
            for pk in ticked:
                self.posts.append(Post(pk, at, answer.status_code, False, "bulk"))
                if answer.status_code == 200:  # the action skips what this person may not approve
                    self._approvers.setdefault(pk, set()).add(username)
                    if pk in self._sessions:
                        self._approvers.setdefault(self._sessions[pk], set()).add(username)
        if answer.status_code != 200:
            self._error(f"bulk: {answer.status_code}")
            for pk in ticked:  # whatever it did not approve is still in the queue
                self._retry(pk, 0)
