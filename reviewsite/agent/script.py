"""What the demo's customers say, and what the demo assistant's scripted model does with it.

The scripted model (:class:`~nitro_assistants.agent.testing.ScriptedChatModel`) acts on commands
written in the customer's message (``reply: ...``, ``ask: {...}``). The demo shows real
conversations instead: :data:`SCRIPT` maps each seeded customer message to the command the model
is given in its place, so the admin shows what the customer said, not the command. The seed
(``seed_demo``) sends these messages; any other message goes to the model as it is.

No Django and no LangChain here: the Assistants server (graph.py) and the site both import it.
"""

from __future__ import annotations

import json

QUESTION = {
    "kind": "question",
    "title": "Which day suits the customer?",
    "summary": "The customer asked to move their cleaning but named no day.",
    "interaction_id": "demo-day-question",
    "content": [
        {
            "questionId": "day",
            "prompt": "Which day should I offer?",
            "input": "single_select",
            "options": [
                {"optionId": "tue", "label": "Tuesday", "description": "10:00 is free"},
                {"optionId": "fri", "label": "Friday", "description": "15:30 is free"},
            ],
            "allowOther": True,
        }
    ],
}
PLAN = {
    "kind": "plan",
    "title": "Move the appointment and tell the technician",
    "summary": "Two changes in the CRM.",
    "interaction_id": "demo-plan",
    "content": {
        "steps": [
            {
                "stepId": "reschedule",
                "title": "Reschedule appointment 42",
                "action": "crm.reschedule",
                "input": {"appointment_id": 42, "day": "Tuesday", "time": "10:00"},
                "fields": [{"name": "day", "label": "Day", "widget": "text", "required": True}],
            },
            {
                "stepId": "notify",
                "title": "Notify the technician",
                "action": "crm.notify",
                "optional": True,
                "input": {"appointment_id": 42},
                "dependsOn": ["reschedule"],
            },
        ]
    },
}

#: A held tool call: the model asks to reschedule appointment 42 (approve it: the thread moves
#: on to a held reply).
MOVE = "Can I move my appointment to Tuesday?"
#: A held reply.
CONFIRM = "Yes, Monday at 9 works for me."
#: A question for the reviewer.
ASK_DAY = "I need to move my cleaning. What days do you have?"
#: A plan; approving it runs the example site's operations (reviewsite/operations.py).
ASK_PLAN = "Please move me to Tuesday at 10 and let the technician know."
#: A reply the seed approves, and the demo's SMS gateway delivers.
DELIVERED = "Does Wednesday at 2pm still work?"
#: A reply the seed approves, and the gateway refuses (it blocks links): a failed delivery.
FAILED = "Can you text me the link to my booking?"
#: A refund the "Small refunds go through" rule approves at once: the refund runs, and the
#: thread waits on the reply telling the customer.
SMALL_REFUND = "The technician was an hour late. Can I get the $20 call-out fee back?"
#: A refund "Large refunds need two people in Finance" holds for two approvals.
LARGE_REFUND = "Your technician flooded my kitchen. Please refund the $480 I paid."
#: A cancellation, whose rule's deadline passes during the seed: the sweep escalates it.
CANCEL = "Please cancel my appointment, I'm moving away."
#: A deposit refund, whose rule expires it unanswered during the seed: the assistant is told.
DEPOSIT_REFUND = "I cancelled last week's booking. Please refund my $75 deposit."
#: A move the admin approves with a grant ("moves to Thursday or Friday at 10:00, 3 times").
MOVE_THURSDAY = "Monday is bad for me now. Could you move me to Thursday morning?"
#: A move inside that grant, from another customer: the grant approves it, nobody is asked.
MOVE_FRIDAY = "Something came up on Monday. Is Friday at 10 possible instead?"


def _call(name: str, **args: object) -> str:
    return "tools: " + json.dumps([{"name": name, "args": args}])


SCRIPT = {
    MOVE: MOVE,  # the scripted model reschedules on "move ... to <day>" itself
    CONFIRM: "reply: Thanks for confirming! See you Monday at 9am.",
    ASK_DAY: "ask: " + json.dumps(QUESTION),
    ASK_PLAN: "ask: " + json.dumps(PLAN),
    DELIVERED: "reply: Yes, you're all set for Wednesday at 2pm.",
    FAILED: "reply: Here is your booking: https://bookings.example.com/42",
    SMALL_REFUND: _call("refund", appointment_id=42, amount=20, reason="technician late"),
    LARGE_REFUND: _call("refund", appointment_id=42, amount=480, reason="water damage"),
    CANCEL: _call("cancel_appointment", appointment_id=42),
    DEPOSIT_REFUND: _call("refund", appointment_id=42, amount=75, reason="deposit"),
    MOVE_THURSDAY: _call("reschedule_appointment", appointment_id=42, day="Thursday", time="10:00"),
    MOVE_FRIDAY: _call("reschedule_appointment", appointment_id=42, day="Friday", time="10:00"),
}
