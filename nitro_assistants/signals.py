"""Signals nitro_assistants sends. A public contract: each is sent once per event, after the
transaction that recorded it commits, with ``sender`` set to the model class named below.
"""

from __future__ import annotations

from django.dispatch import Signal

#: A thread paused for review: its run stopped on tool calls, a reply draft or an interaction.
#: sender: Review. provides args: review (Review), thread (Thread), run (Run | None)
review_requested = Signal()

#: A reviewer decided; the decision is stored and its resume enqueued (not yet applied).
#: sender: Review. provides args: review (Review), decision (Decision), user (User | None; for a
#: policy rule's or a deadline's decision, a ``services.policy_enforcement.PolicyActor`` naming the rule)
review_decided = Signal()

#: A pending or decided review can no longer be applied: a new customer message replaced it, or the
#: thread moved on elsewhere. sender: Review. provides args: review (Review), reason (str)
review_superseded = Signal()

#: A review expired unanswered: its rule's deadline (``on_deadline`` ``expire``) or the pause's
#: own ``expiresAt`` passed. Its decision (by ``expiry``) tells the assistant nobody answered;
#: its resume is enqueued. sender: Review. provides args: review (Review), decision (Decision),
#: expired_at (datetime)
review_expired = Signal()

#: A review failed: the assistant could not be told of its decision (refused, retries
#: exhausted), or the graph is stuck on its pause. Not sent for a plan whose steps failed
#: (``plan_finished``). sender: Review. provides args: review (Review), error (str)
review_failed = Signal()

#: A run or resume failed for good (graph error, refused request, retries exhausted).
#: sender: Run. provides args: run (Run), thread (Thread), error (str)
run_failed = Signal()

#: A reply was delivered by the assistant's delivery tool.
#: sender: Delivery. provides args: delivery (Delivery), thread (Thread)
delivery_delivered = Signal()

#: A reply's delivery failed after the platform's retries.
#: sender: Delivery. provides args: delivery (Delivery), thread (Thread), error (str)
delivery_failed = Signal()

#: A reply is still ``pending`` delivery ``DELIVERY_PENDING_AFTER`` seconds after it was first seen.
#: sender: Delivery. provides args: delivery (Delivery), thread (Thread),
#: pending_for (float, seconds)
delivery_pending = Signal()

#: An approved plan finished running its steps: every step completed (``status`` "completed"),
#: or one failed or was skipped (``status`` "failed").
#: sender: Review. provides args: review (Review), status (str)
plan_finished = Signal()

#: The audit trail's hash chain has a broken link: an event was changed, deleted, moved or
#: inserted by hand (``nitro_assistants.verify_audit``, ``nitro_assistants_audit verify``).
#: sender: Event. provides args: verification (Verification: events, chains, breaks), broken
#: (Break: chain, pk, problem, expected, found; the first one)
audit_broken = Signal()

#: What ran on the server after a decision is not what the reviewer decided (a call run with other
#: args, or that failed, a rejected call that ran, a reply delivered with other content); the
#: decision record says so. sender: Decision. provides args: decision (Decision), record (dict),
#: mismatches (list[str]), mismatch_kinds (list[dict]: kind, message, and the call's id, name,
#: error or args diff when about a call)
execution_mismatched = Signal()

#: A policy rule or a passed deadline decided a review, no person involved (sent beside
#: ``review_decided``). ``by`` is "policy" (an auto_approve/auto_reject rule, or an edit that moved
#: the call under one) or "deadline"; ``rule`` is the rule's handling as it was (name, version...).
#: sender: Review. provides args: review (Review), decision (Decision), by (str), rule (dict)
review_auto_decided = Signal()

#: A review's deadline passed and its rule escalated it to another group (priority raised).
#: sender: Review. provides args: review (Review), group (Group), rule (dict)
review_escalated = Signal()

#: Staff stopped assistants (all, one assistant, one tool or one thread; services/stops.py): new
#: runs in its scope are refused, running ones cancelled, pending reviews frozen.
#: sender: Stop. provides args: stop (Stop), cancelled (list[str]: remote run ids), failures
#: (list[dict]: run, error; the cancels the server refused or did not answer)
stopped = Signal()

#: A stop was resumed: ``stage`` is "reviews" (its pending reviews may be decided again; new
#: runs still refused) or "all" (the stop is over). sender: Stop. provides args: stop (Stop),
#: stage (str)
resumed = Signal()
