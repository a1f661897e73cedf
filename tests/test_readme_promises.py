"""What the README's opening promises is what the service does (issue #28): pages come
within a second or two, except the fleet-prone ones held for ``fleet.hold_s``, which the
opening says, with the default's number."""

from __future__ import annotations

from pathlib import Path

from service.config import FleetSettings

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_the_opening_says_the_fleet_hold_and_its_default() -> None:
    opening = README.split("\n## ", 1)[0]
    hold = FleetSettings().hold_s
    assert "fleet.hold_s" in opening and f"{hold:g} s" in opening


def test_a_held_first_page_is_said_on_the_incident() -> None:
    """The incident page says until when its first page is held (all deliveries pending,
    never tried, due later); nothing once one went out or the time passed."""
    from service.store.views import DeliveryView
    from service.ui.present import held_until

    def d(status: str, attempts: int, due: float) -> DeliveryView:
        return {
            "receiver": "r",
            "version": 1,
            "kind": "opened",
            "status": status,
            "attempts": attempts,
            "sent_at": None,
            "next_attempt_at": due,
            "last_error": None,
        }

    assert held_until([d("pending", 0, 120.0), d("pending", 0, 125.0)], 100.0) == 120.0
    assert held_until([d("pending", 0, 120.0)], 130.0) is None
    assert held_until([d("sent", 1, 90.0), d("pending", 0, 120.0)], 100.0) is None
    assert held_until([], 100.0) is None
