"""What each acknowledge mode answers about itself (``haclient.modes``)."""

from __future__ import annotations

from haclient.modes import AckMode


def test_A2_only_client_and_individual_are_acknowledged_by_the_application() -> None:
    by_application = {mode for mode in AckMode if mode.acknowledged_by_application}
    assert by_application == {AckMode.CLIENT, AckMode.INDIVIDUAL}
