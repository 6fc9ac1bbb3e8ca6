"""Which deliveries the MQTT connector pushes (roadpubsub.service.mqtt_choice)."""

from __future__ import annotations

import numpy as np

from roadpubsub.service.mqtt_choice import NO_CHOICES, MqttChoices


def test_all_pushes_every_subscription_but_those_that_said_false() -> None:
    choices = MqttChoices.of({7: True, 3: False, -2**63: False, 2**63 - 1: True})
    sid = np.array([3, 7, 8, 3, -2**63, 2**63 - 1, 0], np.int64)
    assert choices.pushed(sid, mode="all").tolist() == [False, True, True, False, False,
                                                        True, True]
    assert choices.pushed(sid, mode="chosen").tolist() == [False, True, False, False, False,
                                                           True, False]


def test_no_choice_made() -> None:
    sid = np.array([1, 2], np.int64)
    assert NO_CHOICES.pushed(sid, mode="all").all()
    assert not NO_CHOICES.pushed(sid, mode="chosen").any()
    assert NO_CHOICES.pushed(np.empty(0, np.int64), mode="all").size == 0
    assert MqttChoices.of({}).on.size == 0


def test_random_choices_match_a_set_lookup() -> None:
    rng = np.random.default_rng(5)
    said = {int(i): bool(b) for i, b in zip(rng.integers(-50, 50, 60),
                                           rng.integers(0, 2, 60), strict=True)}
    sid = rng.integers(-60, 60, 500)
    choices = MqttChoices.of(said)
    assert choices.pushed(sid, mode="all").tolist() == [said.get(int(i), True) for i in sid]
    assert choices.pushed(sid, mode="chosen").tolist() == [said.get(int(i), False)
                                                           for i in sid]
