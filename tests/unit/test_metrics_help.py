"""The HELP text of every exported metric is written for an operator."""

from __future__ import annotations

import re

from haclient.metrics import METRICS


def test_item17_help_texts_say_what_is_measured_without_rule_codes() -> None:
    for spec in METRICS:
        assert not re.search(r"\b[A-Z]\d{1,2}\b", spec.help), (spec.name, spec.help)
        assert len(spec.help) >= 12 and not spec.help[0].islower(), spec.name
        if spec.name.endswith("_timestamp_seconds"):
            assert "Unix time" in spec.help, spec.name
        elif spec.name.endswith("_seconds"):
            assert "Seconds" in spec.help, spec.name  # the unit, as the name promises
