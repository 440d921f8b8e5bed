"""OpenTelemetry spans per decision: one ``safecert.shield.decision`` span per audit-log line,
with the same facts, collected by the SDK's in-memory exporter; no span work at all while the
tracer provider is the API's default, and a provider set later is honoured."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import pytest

from safecert.shield import audit as audit_mod
from safecert.shield.adapters import ShieldBlocked, guarded
from tests.shield.payments_support import CERT, DEADLINE_S, ROOT, payments_phi

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
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
    # the provider as the API hands it out once set (set_tracer_provider: once per process);
    # the module's resolved tracer is put back afterwards
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    monkeypatch.setattr(audit_mod, "_tracer", None)
    monkeypatch.setattr(audit_mod, "_look_again_at", -math.inf)
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


def test_no_span_is_started_while_the_provider_is_the_default(monkeypatch):
    """With the API's default provider (a proxy whose spans are dropped) a decision starts no span
    and the provider is looked up once per session, not once per decision."""
    monkeypatch.delenv("OTEL_PYTHON_TRACER_PROVIDER", raising=False)
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    monkeypatch.setattr(audit_mod, "_tracer", None)
    monkeypatch.setattr(audit_mod, "_look_again_at", -math.inf)
    monkeypatch.setattr(audit_mod, "TRACER_RECHECK_S", 3600.0)
    calls = {"start_span": 0, "get_tracer_provider": 0}

    def counted(owner, name):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            calls[name] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)

    counted(trace.ProxyTracer, "start_span")
    counted(trace.NoOpTracer, "start_span")
    counted(trace, "get_tracer_provider")
    phi = payments_phi()
    tools = guarded([lookup_invoice, pay], CERT, phi.phi, action_map=phi.action)
    for _ in range(3):
        tools.lookup_invoice(invoice="INV-001")
    with pytest.raises(ShieldBlocked):
        tools.pay(invoice="INV-001", amount=5000)
    assert calls == {"start_span": 0, "get_tracer_provider": 1}


def test_a_provider_set_later_is_honoured():
    """A real process: decisions before ``trace.set_tracer_provider`` make no span; after it, a
    running session's decisions are traced once the look-up interval has passed, and a new
    session's from its first decision."""
    script = textwrap.dedent(
        """
        import json, time
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from safecert.shield import audit
        from safecert.shield.adapters import guarded
        from tests.shield.payments_support import CERT, payments_phi
        from tests.shield.test_guard_tracing import lookup_invoice, pay

        audit.TRACER_RECHECK_S = 0.2
        phi = payments_phi()
        first = guarded([lookup_invoice, pay], CERT, phi.phi, action_map=phi.action)
        first.lookup_invoice(invoice="before")
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        time.sleep(0.3)  # past the running session's next look-up
        first.pay(invoice="running", amount=50)
        second = guarded([lookup_invoice, pay], CERT, phi.phi, action_map=phi.action)
        second.lookup_invoice(invoice="new")
        print(json.dumps([s.attributes["safecert.tool"] for s in exporter.get_finished_spans()]))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
        timeout=DEADLINE_S, check=True,
    )  # fmt: skip
    assert json.loads(out.stdout) == ["pay", "lookup_invoice"]
