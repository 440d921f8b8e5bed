"""A careless payments agent, talking MCP to ``safecert shield serve`` (which it starts).

It settles an invoice the careless way — tries a large payment first, pays, then pays again — and
prints what the shield let through. Run from this folder: ``python agent.py [INVOICE]``.
Swap the script for an LLM: any MCP client pointed at the same command gets the same guard.
"""

from __future__ import annotations

import json
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

GATEWAY = [
    "-c", "import sys; from safecert.cli.main import main; sys.exit(main())",
    "shield", "serve", "--certificate", "cert/certificate.json",
    "--upstream", "python tools_server.py", "--abstraction", "phi:phi", "--action-map", "phi:action",
    "--steps-log", "deployed.jsonl", "--audit-log", "audit.jsonl",
]  # fmt: skip


async def main(invoice: str) -> None:
    params = StdioServerParameters(command=sys.executable, args=GATEWAY)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = [t.name for t in (await session.list_tools()).tools]
        print(f"tools behind the shield: {', '.join(tools)}")
        found = await session.call_tool("lookup_invoice", {"invoice": invoice})
        amount = json.loads("".join(getattr(c, "text", "") for c in found.content))["amount"]
        plan = [
            ("pay", {"invoice": invoice, "amount": 5000}),  # over 1,000 without approval
            ("pay", {"invoice": invoice, "amount": amount}),
            ("pay", {"invoice": invoice, "amount": amount}),  # a duplicate payment
            ("halt", {}),
        ]
        for name, args in plan:
            res = await session.call_tool(name, args)
            text = "".join(getattr(c, "text", "") for c in res.content).replace("\n", " ")
            print(f"{name}({args}) -> {'BLOCKED' if res.is_error else 'ok'}: {text[:120]}")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else "INV-001")
