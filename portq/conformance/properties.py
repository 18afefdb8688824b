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
    Property("claim disjointness under concurrency", (
        "test_concurrent_claimers_never_share_a_generation",
        "test_claim_is_bounded_and_single_queue",
        "test_claims_only_free_slots_and_serves_queues_round_robin",
        "test_claimers_share_the_capacity_and_claim_each_job_once",
        "test_ten_thousand_jobs_two_processes_shutdown_midway_lose_nothing")),
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
        "test_deferred_ack_of_a_job_taken_away_is_not_written")),
    Property("lease expiry and reaping", (
        "test_claim_sets_generation_and_lease",
        "test_reap_returns_expired_leases_with_delay_then_dead",
        "test_killed_worker_process_is_recovered_and_fenced",
        "test_prefetched_jobs_keep_their_lease_while_they_wait")),
    Property("retries and backoff", (
        "test_retry_waits_for_its_delay",
        "test_full_jitter_flattens_a_retry_storm",
        "test_outcomes_are_logged_and_errors_kept_per_attempt")),
    Property("dead jobs and replay", (
        "test_dead_after_max_attempts_with_error_history",
        "test_permanent_failure_is_dead_at_once",
        "test_operator_replays_dead_job",
        "test_retry_many_is_bounded_and_touches_only_its_queue",
        "test_concurrent_bulk_retries_retry_each_job_once")),
    Property("cancel, single and bulk", (
        "test_cancel",
        "test_cancel_many_ready_and_running_fences_the_owner")),
    Property("job listing and error history", (
        "test_job_returns_whole_row_and_error_history",
        "test_jobs_lists_any_state_or_all_and_pages_by_key")),
    Property("transactional enqueue commit/rollback", (
        "test_rolled_back_enqueue_is_never_seen",
        "test_committed_enqueue_is_seen_once",
        "test_enqueue_shares_the_callers_transaction")),
    Property("idempotent keys", (
        "test_key_returns_the_existing_job",
        "test_key_conflict_keeps_the_callers_transaction_usable",
        "test_enqueue_result_tells_new_from_existing",
        "test_duplicate_key_is_rejected_by_the_schema",
        "test_enqueue_many_ids_keys_and_options")),
    Property("payloads and bad input", (
        "test_payload_round_trips_exactly",
        "test_bad_input_writes_nothing",
        "test_injection_strings_are_data",
        "test_bounds_are_validated")),
    Property("schema constraints and migrations", (
        "test_malformed_state_is_rejected",
        "test_migrate_is_idempotent")),
    Property("prune bounds and stats", (
        "test_prune_deletes_only_finished_jobs_in_bounds",
        "test_stats_counts_and_age",
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
        "test_deferred_acks_are_batched_and_written_once")),
)

UNMAPPED = "unmapped tests"
_BY_TEST = {test: p.name for p in PROPERTIES for test in p.tests}


def property_of(test_name: str) -> str:
    """The property a test function (its name, without parameters) checks."""
    return _BY_TEST.get(test_name.split("[")[0], UNMAPPED)
