"""The demo's map: one message, its network neighbourhood within Dmax and its deliveries."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from roadpubsub.index.model import Messages, Subscriptions
    from roadpubsub.index.spatial import SpatialIndex
    from roadpubsub.index.terms import TermWeights
    from roadpubsub.pruning.deliveries import Deliveries
    from roadpubsub.roadnet.network import RoadNetwork

__all__ = ["pick_message", "plot_message_map"]

#: Deliveries the map's message should have, if some message has about this many.
_MAP_TARGET_DELIVERIES = 25


def pick_message(deliveries: Deliveries, messages: Messages, *,
                 subscriptions: Subscriptions | None = None,
                 target: int = _MAP_TARGET_DELIVERIES) -> int:
    """Row of a message worth drawing: several deliveries, spread over the map.

    Among messages with 3 to ``4 * target`` deliveries (or at least 3, if none has so
    few), the one whose delivered subscriptions stand at the most distinct places (when
    ``subscriptions`` is given), then whose count is closest to ``target``, then the lowest
    id. Without any message of 3 deliveries, the message with the most.
    """
    ids, counts = np.unique(deliveries.message_id, return_counts=True)
    if ids.size == 0:
        return 0
    several = counts >= 3
    if not several.any():
        best = ids[np.argmax(counts)]
        return int(np.flatnonzero(messages.ids == best)[0])
    readable = several & (counts <= 4 * target)
    keep = readable if readable.any() else several
    cand_ids, cand_counts = ids[keep], counts[keep]
    places = np.zeros(cand_ids.size, dtype=np.int64)
    if subscriptions is not None:
        order = np.argsort(subscriptions.ids, kind="stable")
        mine = np.isin(deliveries.message_id, cand_ids)
        rows = order[np.searchsorted(subscriptions.ids[order],
                                     deliveries.subscription_id[mine])]
        triples = np.column_stack([deliveries.message_id[mine],
                                   subscriptions.points.edge[rows].astype(np.int64),
                                   np.round(subscriptions.points.offset[rows]).astype(np.int64)])
        distinct = np.unique(triples, axis=0)[:, 0]
        places = np.searchsorted(cand_ids, distinct)
        places = np.bincount(places, minlength=cand_ids.size)
    pick = np.lexsort((cand_ids, np.abs(cand_counts - target), -places))[0]
    return int(np.flatnonzero(messages.ids == cand_ids[pick])[0])


def plot_message_map(
    network: RoadNetwork,
    spatial: SpatialIndex,
    subscriptions: Subscriptions,
    messages: Messages,
    weights: TermWeights,
    deliveries: Deliveries,
    *,
    row: int,
    dmax_m: float,
    ax: Any = None,
) -> Figure:
    """Map of one message: roads within Dmax, cells, subscriptions and its deliveries.

    Coordinates are kilometres east and north of the message. Roads whose nodes lie within
    Dmax network distance of the message are highlighted; the dashed circle is the
    Euclidean Dmax ball (network distance is never shorter, so every delivery lies inside).

    Parameters
    ----------
    row
        Row of ``messages`` to draw.
    dmax_m
        Dmax in metres.
    ax
        Axes to draw on; a new figure when omitted.
    """
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Circle, Rectangle

    from roadpubsub.roadnet.distance import NodeSearch, entry_costs
    from roadpubsub.roadnet.locations import point_xy

    mid = int(messages.ids[row])
    mpoint = messages.points[row]
    mxy = point_xy(network, mpoint)[0]
    half = max(1.35 * dmax_m, 1.0)
    window = (mxy[0] - half, mxy[1] - half, mxy[0] + half, mxy[1] + half)
    eb = spatial.edge_bbox
    in_win = np.flatnonzero((eb[:, 2] >= window[0]) & (eb[:, 0] <= window[2])
                            & (eb[:, 3] >= window[1]) & (eb[:, 1] <= window[3]))
    # Distance from every node to the message (the direction deliveries are measured in).
    search = NodeSearch(network, reverse=True)
    a, ca, b, cb = entry_costs(network, mpoint)
    ok = np.isfinite(np.r_[ca, cb])
    dist = search.run(np.r_[a, b][ok], np.r_[ca, cb][ok], limit=dmax_m).dist.copy()
    near = np.minimum(dist[network.edge_u[in_win]], dist[network.edge_v[in_win]]) <= dmax_m
    near |= in_win == int(mpoint.edge[0])

    def segments(edges: npt.NDArray[np.int64]) -> list[npt.NDArray[np.float64]]:
        ptr, xy = network.geom_ptr, network.geom_xy
        return [(xy[ptr[e]:ptr[e + 1]] - mxy) / 1000.0 for e in edges.tolist()]

    if ax is None:
        fig, ax = plt.subplots(figsize=(8.5, 8.0))
    else:
        fig = ax.figure
    ax.add_collection(LineCollection(segments(in_win[~near]), colors="#b9b9b9",
                                     linewidths=0.7, zorder=1))
    ax.add_collection(LineCollection(segments(in_win[near]), colors="#5b9bd5",
                                     linewidths=1.6, zorder=2,
                                     label=f"roads within Dmax = {dmax_m:g} m"))
    for x0, y0, x1, y1 in spatial.cells.quad:
        if x1 < window[0] or x0 > window[2] or y1 < window[1] or y0 > window[3]:
            continue
        ax.add_patch(Rectangle(((x0 - mxy[0]) / 1000, (y0 - mxy[1]) / 1000),
                               (x1 - x0) / 1000, (y1 - y0) / 1000, fill=False,
                               edgecolor="#999999", linewidth=0.6, linestyle=":", zorder=0))
    sxy = point_xy(network, subscriptions.points)
    inside = ((sxy[:, 0] >= window[0]) & (sxy[:, 0] <= window[2])
              & (sxy[:, 1] >= window[1]) & (sxy[:, 1] <= window[3]))
    pts = (sxy[inside] - mxy) / 1000.0
    ax.scatter(pts[:, 0], pts[:, 1], s=5, c="#7f7f7f", alpha=0.35, linewidths=0, zorder=3,
               label=f"subscriptions ({int(inside.sum()):,} in view)")
    mine = deliveries.message_id == mid
    order = np.argsort(subscriptions.ids, kind="stable")
    rows = order[np.searchsorted(subscriptions.ids[order], deliveries.subscription_id[mine])]
    dxy = (point_xy(network, subscriptions.points[rows]) - mxy) / 1000.0
    sc = ax.scatter(dxy[:, 0], dxy[:, 1], s=42, c=deliveries.score[mine], cmap="viridis",
                    edgecolors="black", linewidths=0.5, zorder=5,
                    label=f"delivered to {int(mine.sum()):,} subscriptions "
                          f"(at {len({tuple(p) for p in np.round(dxy, 4).tolist()}):,} places)")
    if mine.any():
        fig.colorbar(sc, ax=ax, shrink=0.75, label="SIM(s, m) of the delivered subscriptions")
    ax.add_patch(Circle((0.0, 0.0), dmax_m / 1000, fill=False, edgecolor="#d62728",
                        linestyle="--", linewidth=1.0, zorder=4,
                        label="Euclidean Dmax ball"))
    ax.scatter([0.0], [0.0], marker="*", s=380, c="#d62728", edgecolors="black",
               linewidths=0.8, zorder=6, label=f"message {mid}")
    terms = weights.terms
    kws = [terms[t] for t in messages.keywords(row).tolist()]
    shown = ", ".join(kws[:10]) + (f", ... (+{len(kws) - 10})" if len(kws) > 10 else "")
    ax.set_title(f"Message {mid} on {network.name or 'the network'}: "
                 f"{int(mine.sum())} deliveries within Dmax = {dmax_m:g} m\n"
                 f"keywords: {shown}", fontsize=10)
    ax.set_xlim(-half / 1000, half / 1000)
    ax.set_ylim(-half / 1000, half / 1000)
    ax.set_aspect("equal")
    ax.set_xlabel("km east of the message")
    ax.set_ylabel("km north of the message")
    ax.legend(loc="lower left", fontsize=8, framealpha=0.9)
    credit = "; roads (c) OpenStreetMap contributors" if ".osm" in network.name.lower() else ""
    # Below the x-axis label wherever it ends up (x: the axes' right edge, y: the label).
    ax.annotate(f"dotted: PMR cells; {network.crs}{credit}", xy=(1.0, 0.0),
                xycoords=(ax.transAxes, ax.xaxis.label), xytext=(0, -4),
                textcoords="offset points", ha="right", va="top", fontsize=7,
                color="#555555")
    return fig

