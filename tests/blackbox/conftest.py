"""Fixtures of the black-box tests."""

from __future__ import annotations

from tests.blackbox.pipeline_helpers import cli_here

__all__ = ["cli_here"]
