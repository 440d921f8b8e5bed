"""Generate the example's transcripts: a careless payments agent, 4,000 conversations.

The agent calls the real tool functions of ``tools_server.py`` and writes each conversation in the
OpenAI chat-completions format (assistant ``tool_calls``, ``tool`` results) — the kind of transcript
any tool-calling deployment already keeps. ``safecert shield ingest`` turns them into step logs.
Run from this folder: ``python generate.py`` (seeded; same output every time).
"""

from __future__ import annotations

import json
import random

import tools_server as tools

CALLS = {
    "lookup_invoice": tools.lookup_invoice,
    "request_approval": tools.request_approval,
    "pay": tools.pay,
}


def conversation(rng: random.Random, k: int) -> dict:
    invoice = f"INV-{rng.randrange(100):03d}"
    amount = tools.INVOICES[invoice]["amount"]
    messages: list[dict] = [{"role": "user", "content": f"Please settle {invoice}."}]
    for step in range(rng.randint(1, 6)):
        name = rng.choices(["lookup_invoice", "request_approval", "pay"], weights=[3, 3, 4])[0]
        args = {"invoice": invoice} if name != "pay" else {"invoice": invoice, "amount": amount}
        call_id = f"call_{k}_{step}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                ],
            }
        )
        messages.append(
            {"role": "tool", "tool_call_id": call_id, "content": json.dumps(CALLS[name](**args))}
        )
    messages.append({"role": "assistant", "content": "Done."})
    return {"id": f"chat{k}", "messages": messages}


if __name__ == "__main__":
    rng = random.Random(7)
    tools._rng.seed(7)
    with open("chats.jsonl", "w", encoding="utf-8") as fh:
        for k in range(4000):
            fh.write(json.dumps(conversation(rng, k)) + "\n")
