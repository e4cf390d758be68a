"""What each acknowledge mode answers about itself (``haclient.modes``)."""

from __future__ import annotations

from haclient.modes import AckMode


def test_A2_only_client_and_individual_are_acknowledged_by_the_application() -> None:
    by_application = {mode for mode in AckMode if mode.acknowledged_by_application}
    assert by_application == {AckMode.CLIENT, AckMode.INDIVIDUAL}


import pytest  # noqa: E402

from haclient.errors import ConfigurationError  # noqa: E402
from haclient.modes import ack_mode_of  # noqa: E402


@pytest.mark.parametrize(
    ("given", "suggested"),
    [
        ("client", "AckMode.CLIENT"),
        ("CLIENT_ACKNOWLEDGE", "AckMode.CLIENT"),
        ("Session.AUTO_ACKNOWLEDGE", "AckMode.AUTO"),
        ("dups_ok", "AckMode.DUPS_OK"),
        ("SESSION_TRANSACTED", "AckMode.TRANSACTED"),
        ("individual", "AckMode.INDIVIDUAL"),
        ("clinet", "AckMode.CLIENT"),
    ],
)
def test_item8_a_mode_given_by_name_is_refused_with_the_mode_it_names(
    given: str, suggested: str
) -> None:
    with pytest.raises(ConfigurationError, match=rf"did you mean {suggested}\?") as caught:
        ack_mode_of(given)
    assert caught.value.option == "ack_mode"


def test_item8_modes_and_their_jms_values_are_taken_and_others_refused() -> None:
    assert ack_mode_of(AckMode.CLIENT) is AckMode.CLIENT
    assert ack_mode_of(2) is AckMode.CLIENT
    for bad in (7, "nonsense", None, 2.0):
        with pytest.raises(ConfigurationError, match="unknown acknowledge mode"):
            ack_mode_of(bad)
