"""Which subscriptions' deliveries the MQTT connector pushes: each subscription's ``mqtt``
choice and the service's ``mqtt_push`` mode.

A subscription may say ``"mqtt": true`` (push its deliveries on
``{prefix}/deliveries/{id}``) or ``"mqtt": false`` (do not); most say nothing. The service's
mode decides for those: ``all`` (the default) pushes every subscription except those that
said false, ``chosen`` only those that said true. A fleet whose vehicles read their own
topics among a million subscriptions served by webhooks, WebSockets or polling runs
``chosen``: the broker and the connector then carry only what someone reads. A delivery not
pushed is recorded all the same (``GET /messages/{id}``, streams, WebSockets, webhooks).

:class:`MqttChoices` is immutable: the state makes a new one when a choice changes, and each
applied publish carries the one in force when it was applied, so the connector's thread
decides with what the subscriptions had said at that moment, without a lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = ["MQTT_PUSH_MODES", "NO_CHOICES", "MqttChoices"]

#: The values of ``mqtt_push`` (``roadpubsub serve --mqtt-push``).
MQTT_PUSH_MODES = ("all", "chosen")

IntArray = npt.NDArray[np.int64]


def _holds(sorted_ids: IntArray, ids: IntArray) -> npt.NDArray[np.bool_]:
    """Whether each of ``ids`` is in ``sorted_ids`` (one vectorised search)."""
    if not sorted_ids.size or not ids.size:
        return np.zeros(ids.size, bool)
    at = np.minimum(np.searchsorted(sorted_ids, ids), sorted_ids.size - 1)
    return sorted_ids[at] == ids


class MqttChoices(NamedTuple):
    """The subscriptions that said ``"mqtt": true`` (``on``) and false (``off``), each
    sorted ascending."""

    on: IntArray
    off: IntArray

    @classmethod
    def of(cls, said: Mapping[int, bool]) -> MqttChoices:
        """The choices of a map of subscription id to its choice."""
        ids = np.fromiter(said.keys(), np.int64, len(said))
        flags = np.fromiter(said.values(), bool, len(said))
        return cls(np.sort(ids[flags]), np.sort(ids[~flags]))

    def pushed(self, subscription_id: IntArray, *, mode: str) -> npt.NDArray[np.bool_]:
        """Whether each delivery to ``subscription_id`` is pushed under ``mode`` (one of
        :data:`MQTT_PUSH_MODES`)."""
        if mode == "chosen":
            return _holds(self.on, subscription_id)
        return ~_holds(self.off, subscription_id)


#: No subscription said anything.
NO_CHOICES = MqttChoices(np.empty(0, np.int64), np.empty(0, np.int64))
