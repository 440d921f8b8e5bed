"""OpenTelemetry spans per decision: one ``safecert.shield.decision`` span per audit-log line,
with the same facts, collected by the SDK's in-memory exporter."""

from __future__ import annotations

import json

import pytest

from safecert.shield import audit as audit_mod
from safecert.shield.adapters import ShieldBlocked, guarded
from tests.shield.payments_support import CERT, payments_phi

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)


def lookup_invoice(invoice: str) -> dict:
    return {"invoice": invoice, "found": True}


def pay(invoice: str, amount: float) -> dict:
    return {"invoice": invoice, "amount": amount, "status": "paid"}


def test_one_span_per_decision_matching_the_audit_log(tmp_path, monkeypatch):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(audit_mod, "_TRACER", [provider.get_tracer("test")])
    phi = payments_phi()
    audit = tmp_path / "audit.jsonl"
    tools = guarded([lookup_invoice, pay], CERT, phi.phi, action_map=phi.action, audit_log=audit)
    with pytest.raises(ShieldBlocked):
        tools.pay(invoice="INV-001", amount=5000)  # pay_large unapproved: blocked
    tools.lookup_invoice(invoice="INV-001")
    tools.pay(invoice="INV-001", amount=50)
    tools.halt()
    spans = exporter.get_finished_spans()
    lines = [json.loads(x) for x in audit.read_text().splitlines()]
    decisions = [x for x in lines if "allowed" in x]
    assert (
        [s.name for s in spans]
        == ["safecert.shield.decision"] * len(decisions)
        == ["safecert.shield.decision"] * 4
    )
    for span, line in zip(spans, decisions, strict=True):
        a = span.attributes
        assert a["safecert.allowed"] == line["allowed"]
        assert a["safecert.tool"] == line["tool"]
        assert a.get("safecert.action") == line["action"]
        assert a.get("safecert.state") == line["state"]
        assert a["safecert.session"] == line["session"]
    assert [s.attributes["safecert.allowed"] for s in spans] == [False, True, True, True]
    assert "forbidden" in spans[0].attributes["safecert.reason"]
