"""The properties the conformance suite checks, and which tests check each: the one table
``portq conformance`` reports from (every test of the suite appears here exactly once;
tests/test_cli.py checks that)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Property:
    name: str
    tests: tuple[str, ...]


PROPERTIES = (
    Property("fair sharing across concurrency keys", (
        "test_a_burst_delays_other_keys_by_one_round_at_most",
        "test_each_round_takes_one_job_per_key_then_one_unkeyed",
        "test_fair_claims_honour_key_limits_pause_and_schedule",
        "test_fairness_off_claims_in_plain_order",
        "test_concurrent_fair_claimers_share_the_rounds",
        "test_a_worker_starts_the_small_keys_jobs_in_the_first_rounds",
        "test_the_cli_sets_and_clears_fairness",
        "test_bad_fairness_is_refused")),
    Property("claim disjointness under concurrency", (
        "test_concurrent_claimers_never_share_a_generation",
        "test_claim_is_bounded_and_single_queue",
        "test_claims_only_free_slots_and_serves_queues_round_robin",
        "test_claimers_share_the_capacity_and_claim_each_job_once",
        "test_ten_thousand_jobs_two_processes_shutdown_midway_lose_nothing",
        "test_many_short_pipelined_jobs_with_a_short_lease_lose_none")),
    Property("ordering by priority, run_at, id", (
        "test_priority_then_run_at_then_id",
        "test_future_and_dead_jobs_are_not_claimed",
        "test_run_at_is_honoured")),
    Property("fencing of stale owners", (
        "test_stale_generation_cannot_finish_a_reclaimed_job",
        "test_expired_lease_cannot_complete_even_before_reclaim",
        "test_wrong_worker_or_generation_is_rejected",
        "test_complete_many_fences_each_claim",
        "test_stale_owner_cannot_overwrite_the_new_owner",
        "test_refused_renewal_stops_reporting_and_is_logged",
        "test_deferred_ack_of_a_job_taken_away_is_not_written",
        "test_complete_many_mixed_owned_and_lost",
        "test_renew_many_fences_each_claim",
        "test_release_many_gives_back_each_owned_claim_in_one_transaction",
        "test_a_worker_id_differing_in_trailing_space_or_case_is_another_worker",
        "test_a_worker_id_with_trailing_space_is_kept_exactly",
        "test_renewal_refused_after_the_jobs_own_outcome_is_not_a_loss",
        "test_job_taken_away_during_its_outcome_write_is_lost_once")),
    Property("lease expiry and reaping", (
        "test_claim_sets_generation_and_lease",
        "test_claims_record_when_each_attempt_started",
        "test_reap_returns_expired_leases_with_delay_then_dead",
        "test_killed_worker_process_is_recovered_and_fenced",
        "test_prefetched_jobs_keep_their_lease_while_they_wait",
        "test_burst_after_a_crash_finishes_every_job_before_it_exits",
        "test_reaped_jobs_are_waited_for_by_the_database_clock",
        "test_a_workers_writes_to_its_own_jobs_never_overlap")),
    Property("retries and backoff", (
        "test_retry_waits_for_its_delay",
        "test_full_jitter_flattens_a_retry_storm",
        "test_outcomes_are_logged_and_errors_kept_per_attempt")),
    Property("dead jobs and replay", (
        "test_dead_after_max_attempts_with_error_history",
        "test_permanent_failure_is_dead_at_once",
        "test_operator_replays_dead_job",
        "test_retry_many_is_bounded_and_touches_only_its_queue",
        "test_concurrent_bulk_retries_retry_each_job_once",
        "test_replay_keeps_the_attempts_a_job_had_left")),
    Property("cancel, single and bulk", (
        "test_cancel",
        "test_cancel_many_ready_and_running_fences_the_owner")),
    Property("cooperative cancellation of running jobs", (
        "test_handler_checking_cancelled_ends_within_a_heartbeat",
        "test_handler_ignoring_cancel_still_ends_cancelled",
        "test_async_handler_task_is_cancelled",
        "test_async_worker_cancels_the_handler_task",
        "test_heartbeat_tells_a_worker_that_hears_no_announcements",
        "test_announced_cancel_reaches_the_worker_faster_than_a_heartbeat",
        "test_job_cancelled_during_its_outcome_write_counts_cancelled_once")),
    Property("job listing and error history", (
        "test_job_returns_whole_row_and_error_history",
        "test_jobs_lists_any_state_or_all_and_pages_by_key",
        "test_filters_by_key_and_payload_text",
        "test_orders_page_by_key_without_gaps_or_repeats",
        "test_state_filter_and_newest_first",
        "test_listing_arguments_are_validated",
        "test_delete_finished_deletes_only_a_finished_job",
        "test_finished_per_minute_counts_by_the_database_clock",
        "test_operator_reads_do_not_wait_for_an_uncommitted_enqueue")),
    Property("transactional enqueue commit/rollback", (
        "test_rolled_back_enqueue_is_never_seen",
        "test_committed_enqueue_is_seen_once",
        "test_enqueue_shares_the_callers_transaction")),
    Property("idempotent keys", (
        "test_key_returns_the_existing_job",
        "test_key_conflict_keeps_the_callers_transaction_usable",
        "test_enqueue_result_tells_new_from_existing",
        "test_concurrent_enqueues_of_a_key_report_created_once",
        "test_duplicate_key_is_rejected_by_the_schema",
        "test_enqueue_many_ids_keys_and_options",
        "test_concurrent_bulk_enqueues_return_each_rows_own_id",
        "test_keys_differing_in_case_or_trailing_space_are_distinct",
        "test_empty_key_is_refused_and_nothing_is_written")),
    Property("payloads and bad input", (
        "test_payload_round_trips_exactly",
        "test_bad_input_writes_nothing",
        "test_injection_strings_are_data",
        "test_bounds_are_validated",
        "test_empty_queue_name_is_refused",
        "test_empty_strings_inside_payloads_round_trip",
        "test_nul_is_refused_everywhere_and_nothing_is_written",
        "test_nesting_limit_is_the_same_on_every_engine",
        "test_error_text_any_engine_cannot_store_is_kept_readable",
        "test_queue_names_differing_in_case_are_distinct",
        "test_a_queue_differing_in_trailing_space_is_another_queue")),
    Property("schema constraints and migrations", (
        "test_malformed_state_is_rejected",
        "test_migrate_is_idempotent",
        "test_unmigrated_database_raises_schema_missing",
        "test_refused_login_and_missing_database")),
    Property("prune bounds and stats", (
        "test_prune_deletes_only_finished_jobs_in_bounds",
        "test_stats_counts_and_age",
        "test_pending_sees_due_and_running_jobs_of_its_queue_only",
        "test_retry_rate_counts_recorded_attempts_of_the_last_hour")),
    Property("claim cost flat as the table grows", (
        "test_claim_walks_the_ready_index_in_order",)),
    Property("graceful shutdown and release", (
        "test_release_returns_the_job_without_spending_an_attempt",
        "test_sigterm_releases_in_flight_jobs_after_grace",
        "test_second_signal_exits_at_once",
        "test_shutdown_gives_prefetched_jobs_back_at_once",
        "test_stop_writes_waiting_acks_before_it_returns")),
    Property("worker pacing, prefetch and batched acks", (
        "test_idle_worker_backs_off_on_an_empty_queue",
        "test_enqueue_reaches_an_idle_worker",
        "test_prefetch_owns_at_most_concurrency_plus_prefetch",
        "test_deferred_acks_are_batched_and_written_once",
        "test_default_worker_writes_as_its_engine_wants_and_loses_none")),
    Property("handlers of either kind (def, async def)", (
        "test_sync_worker_runs_async_handlers_once_on_its_threads_loops",
        "test_async_worker_runs_plain_handlers_once_in_threads",
        "test_handlers_that_cannot_run_are_refused_before_any_claim")),
    Property("hostile handlers, late claims and stalled databases", (
        "test_a_handler_that_exits_fails_its_attempt_and_the_slot_keeps_serving",
        "test_a_claim_that_comes_back_after_half_its_lease_starts_none_of_its_jobs",
        "test_a_stalled_database_call_is_logged_while_it_waits",
        "test_a_dead_workers_jobs_come_back_about_one_lease_after_it_died",
        "test_give_backs_keep_the_attempt_only_within_the_jobs_budget")),
    Property("job timeouts and snoozes", (
        "test_a_job_past_its_timeout_fails_with_job_timeout_and_is_retried",
        "test_a_thread_that_ignores_its_timeout_is_abandoned_and_replaced",
        "test_a_jobs_own_timeout_outranks_the_workers",
        "test_snooze_reschedules_without_spending_an_attempt",
        "test_a_job_snoozed_past_the_most_counts_the_attempt_as_failed")),
    Property("look-ahead claims given back when jobs block", (
        "test_jobs_claimed_ahead_are_given_back_when_a_job_blocks",)),
    Property("a slot serves on while its completion is written; a stalled writer holds "
             "claims", (
                 "test_a_slow_completion_write_frees_its_handler_slot_and_a_stalled_writer_"
                 "holds_claims",)),
    Property("many slots of short I/O-bound jobs write their completions in batches", (
        "test_many_slots_of_short_io_bound_jobs_write_their_completions_in_batches",)),
    Property("a completion write carries everything that finished during the one before", (
        "test_a_completion_write_takes_everything_that_finished_during_the_one_before",)),
    Property("stored results", (
        "test_result_round_trips_once_the_job_succeeded",
        "test_no_result_reads_as_none",
        "test_too_large_result_is_refused_and_the_job_is_unharmed",
        "test_prune_deletes_the_result_with_the_job",
        "test_stale_generation_cannot_store_a_result",
        "test_results_of_a_batch_are_stored_in_one_transaction_each_fenced",
        "test_worker_stores_a_handlers_return_value",
        "test_worker_sends_a_job_with_an_unstorable_result_to_dead")),
    Property("job dependencies and workflows", (
        "test_a_waiting_job_is_not_claimed_and_is_released_by_the_last_dependency",
        "test_dependencies_ending_together_release_each_dependent_once",
        "test_a_dead_dependency_cancels_its_dependents_naming_it_or_runs_them",
        "test_cancel_reap_and_give_back_settle_dependents_too",
        "test_unknown_dependencies_are_refused_before_anything_is_written",
        "test_a_succeeded_dependency_counts_at_enqueue",
        "test_results_flow_to_dependents_and_are_kept_from_pruning",
        "test_a_worker_runs_a_chain_and_a_fan_in_in_order",
        "test_killed_worker_processes_lose_and_double_release_nothing",
        "test_workflow_helpers_fan_out_fan_in_and_chain_in_one_transaction",
        "test_cli_enqueue_depends_on_and_workflow_shows_the_graph",
        "test_enqueue_hooks_run_for_every_job_of_a_workflow",
        "test_released_dependents_wake_idle_workers",
        "test_retrying_a_dead_dependency_revives_what_its_failure_cancelled",
        "test_retry_many_revives_dependents_and_a_later_failure_cancels_them_again")),
    Property("tasks by name", (
        "test_sync_worker_routes_both_kinds_of_task",
        "test_async_worker_routes_tasks_deferred_async",
        "test_task_enqueue_needs_a_queue_and_json_arguments",
        "test_cli_worker_app_dispatches_each_job_to_its_task",
        "test_cli_worker_refuses_an_app_without_tasks")),
    Property("scoped uniqueness", (
        "test_a_plain_key_is_global_across_queues",
        "test_a_key_scoped_per_queue",
        "test_a_key_unique_for_a_period",
        "test_a_key_unique_while_ready_or_running",
        "test_a_scoped_enqueue_in_the_callers_transaction",
        "test_concurrent_enqueues_of_a_scoped_key_create_one_job",
        "test_pruning_the_job_frees_its_scoped_key",
        "test_bad_scopes_are_refused",
        "test_cli_enqueue_says_existing_with_the_id")),
    Property("pause and resume", (
        "test_a_paused_queue_claims_nothing_until_resumed",
        "test_a_paused_queue_without_jobs_is_listed_by_stats",
        "test_pause_reaches_every_worker_process_within_a_poll",
        "test_burst_worker_leaves_a_paused_queue_for_later",
        "test_pause_refuses_a_bad_queue_name")),
    Property("concurrency limits", (
        "test_claims_stop_at_the_concurrency_limit",
        "test_a_limit_of_one_queue_leaves_others_alone",
        "test_worker_processes_never_exceed_the_queue_limit",
        "test_bad_limits_are_refused",
        "test_portq_limit_sets_and_clears_the_running_limit")),
    Property("rate limits", (
        "test_claims_stop_at_the_rate_limit",
        "test_a_rate_limit_of_one_queue_leaves_others_alone",
        "test_rate_and_running_limits_combine",
        "test_bad_rate_limits_are_refused",
        "test_worker_processes_never_exceed_the_rate_limit",
        "test_a_rate_limited_claim_sets_when_its_jobs_must_start",
        "test_a_job_not_started_within_the_guard_is_given_back",
        "test_portq_limit_sets_and_clears_the_rate_limit")),
    Property("per-key concurrency limits", (
        "test_a_full_key_is_skipped_not_waited_on",
        "test_keys_are_separate_and_exact",
        "test_concurrent_claimers_never_exceed_a_key",
        "test_enqueue_paths_store_the_key",
        "test_bad_key_limits_are_refused",
        "test_worker_processes_never_exceed_a_key_limit")),
    Property("worker registry", (
        "test_registry_row_round_trips_and_renews",
        "test_registry_rows_expire_when_heartbeats_stop",
        "test_a_worker_registers_while_it_runs",
        "test_portq_workers_and_stats_show_registered_workers")),
    Property("workers crowding a queue share its claim loops", (
        "test_workers_crowding_a_queue_share_a_budget_of_claim_loops",)),
    Property("middleware around handlers", (
        "test_middleware_wraps_the_handler_in_order_and_sees_its_outcome",
        "test_middleware_can_short_circuit_and_fail_a_job",
        "test_queue_worker_and_task_middleware_nest_in_that_order")),
    Property("enqueue hooks and job meta", (
        "test_enqueue_hooks_store_meta_that_the_claim_returns",
        "test_async_enqueue_runs_the_same_hooks",
        "test_a_hook_that_raises_aborts_the_enqueue_and_bad_meta_is_refused")),
    Property("job progress, fenced and rate-limited", (
        "test_progress_write_is_fenced",
        "test_progress_refuses_a_fraction_outside_0_to_1",
        "test_a_long_progress_note_is_cut",
        "test_progress_is_written_at_most_once_a_second_latest_kept",
        "test_progress_of_many_jobs_is_one_write_a_second",
        "test_progress_of_an_async_handler_does_not_block_the_loop")),
    Property("job statistics over a window", (
        "test_job_stats_count_finished_jobs_per_bucket_and_state",
        "test_job_stats_wait_and_run_percentiles_follow_the_jobs_times",
        "test_job_stats_of_the_async_queue_and_bad_windows")),
)

UNMAPPED = "unmapped tests"
_BY_TEST = {test: p.name for p in PROPERTIES for test in p.tests}


def property_of(test_name: str) -> str:
    """The property a test function (its name, without parameters) checks."""
    return _BY_TEST.get(test_name.split("[")[0], UNMAPPED)
