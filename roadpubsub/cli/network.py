"""``roadpubsub network``: inspect and convert road network files.

``roadpubsub network info PATH`` loads any supported network file (DIMACS, Li et al., OSM
XML/PBF, GraphML or a saved ``.npz``) and prints its size, connectivity, total length,
extent, Euclidean lower-bound factor kappa and projected CRS; ``--save`` writes the loaded
network to an ``.npz`` file that loads in a fraction of the time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.files import check_output_path

__all__ = ["network_summary", "register"]

_INFO_EPILOG = """\
examples:
  roadpubsub network info ../shared/data/dimacs/rome.gr.gz
  roadpubsub network info ../shared/data/osm/andorra-latest.osm.pbf --directed --json
  roadpubsub network info ../shared/data/dimacs/rome.gr.gz --save rome.npz

formats (by suffix): .gr/.gr.gz (DIMACS, .co beside it), .cnode (Li et al., .cedge beside
it), .osm/.osm.bz2/.xml (OSM XML via osmnx), .osm.pbf/.pbf (drivable OSM roads),
.graphml (osmnx), .npz (saved by --save)
"""


def register(subparsers: Any) -> None:
    """Add the ``network`` command (with its ``info`` subcommand) to the CLI."""
    parser = subparsers.add_parser(
        "network",
        help="inspect or convert a road network file",
        description="Inspect or convert a road network file.",
        epilog="Run 'roadpubsub network info --help' for an example.",
    )
    sub = parser.add_subparsers(dest="network_command", metavar="SUBCOMMAND", required=True)
    info = sub.add_parser(
        "info",
        help="load a network and print its statistics",
        description=("Load a road network and print nodes, edges, one-way edges, connected "
                     "components, total length (km), lon/lat extent, kappa, projected CRS "
                     "and the load time (s)."),
        epilog=_INFO_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    info.add_argument("path", metavar="PATH", help="network file (format chosen by suffix)")
    info.add_argument("--directed", action="store_true",
                      help="honour one-way roads (also reports strongly connected components)")
    info.add_argument("--save", metavar="OUT.npz",
                      help="also write the loaded network to this .npz file")
    info.add_argument("--json", action="store_true", help="print one JSON object instead")
    info.set_defaults(func=_run_info)


def network_summary(network: Any, *, load_seconds: float | None = None) -> dict[str, Any]:
    """Statistics of a :class:`~roadpubsub.roadnet.network.RoadNetwork` as a JSON-ready dict.

    Lengths are in kilometres, the extent in WGS84 degrees, times in seconds.
    """
    count, labels = network.components()
    largest = int(np.bincount(labels).max()) if labels.size else 0
    west, south, east, north = network.extent_lonlat()
    summary: dict[str, Any] = {
        "name": network.name,
        "directed": bool(network.directed),
        "nodes": network.n_nodes,
        "edges": network.n_edges,
        "oneway_edges": int(np.count_nonzero(network.edge_oneway)),
        "components": count,
        "nodes_outside_largest_component": network.n_nodes - largest,
        "total_length_km": network.total_length_m / 1000.0,
        "extent_lonlat": {"west": west, "south": south, "east": east, "north": north},
        "kappa": network.kappa,
        "crs": network.crs,
    }
    if network.directed:
        summary["strong_components"] = _strong_components(network)
    if load_seconds is not None:
        summary["load_seconds"] = load_seconds
    return summary


def _strong_components(network: Any) -> int:
    """Strongly connected components of the directed arcs (one-way roads honoured)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    adj = network.adjacency()
    n = network.n_nodes
    graph = csr_matrix((np.ones(adj.indices.size), adj.indices, adj.indptr), shape=(n, n))
    # Parallel arcs are duplicate entries; scipy 1.17's strong-component search never
    # returns on such a non-canonical matrix, so merge them first.
    graph.sum_duplicates()
    count, _ = connected_components(graph, directed=True, connection="strong")
    return int(count)


def _run_info(args: argparse.Namespace) -> int:
    from roadpubsub.roadnet.io import load_network

    if args.save:
        from roadpubsub.roadnet.network import RoadNetwork

        suffix = Path(args.save).suffix.lower()
        if suffix not in ("", ".npz"):
            msg = (f"--save {args.save}: networks are saved as .npz (a {suffix} name would "
                   f"become {RoadNetwork.save_path(args.save).name})")
            raise InputError(msg)
        check_output_path(RoadNetwork.save_path(args.save), what="--save",
                          inputs=(args.path,))
    start = time.perf_counter()
    network = load_network(args.path, directed=args.directed)
    load_seconds = time.perf_counter() - start
    summary = network_summary(network, load_seconds=load_seconds)
    if args.save:
        summary["saved_to"] = str(network.save(args.save))
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    ext = summary["extent_lonlat"]
    lines = [
        f"network          {args.path}",
        f"nodes            {summary['nodes']:,}",
        f"edges            {summary['edges']:,} (two-way roads count once)",
        f"one-way edges    {summary['oneway_edges']:,}",
        f"components       {summary['components']:,} "
        f"({summary['nodes_outside_largest_component']:,} nodes outside the largest)",
    ]
    if "strong_components" in summary:
        lines.append(f"strong comps     {summary['strong_components']:,} (one-way roads honoured)")
    lines += [
        f"total length     {summary['total_length_km']:,.1f} km",
        f"extent (lon/lat) W {ext['west']:.5f}  S {ext['south']:.5f}  "
        f"E {ext['east']:.5f}  N {ext['north']:.5f}",
        f"kappa            {summary['kappa']:.6f}",
        f"projected CRS    {summary['crs']}",
        f"directed         {'yes' if summary['directed'] else 'no'}",
        f"load time        {load_seconds:.2f} s",
    ]
    if args.save:
        lines.append(f"saved to         {summary['saved_to']}")
    print("\n".join(lines))
    return 0
