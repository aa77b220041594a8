"""Work still pending after a task's last retry (an outage: ``StageError`` code 3) is logged as
one line: Prefect logs "Retries are exhausted" with ``exc_info=True`` for a *returned* Failed
state, where no exception is active, which formatted as a stray ``NoneType: None`` line."""

from __future__ import annotations

import io
import logging

import pytest


@pytest.mark.slow      # a Prefect API (prefect_harness)
def test_pending_after_retries_logs_no_empty_traceback(prefect_harness):
    from prefect import flow, task

    from flows.common import PENDING, StageError, cli_flow, exit_code, retry_unless_refused, stage_task, unwrap

    @task(name="still-pending", retries=1, retry_delay_seconds=0, retry_condition_fn=retry_unless_refused)
    @stage_task
    def still_pending() -> None:
        raise StageError("2 pairs pending (outage); a rerun resumes them", code=PENDING)

    @flow(name="pending-flow")
    @cli_flow
    def pending_flow() -> None:
        return unwrap(still_pending(return_state=True))

    text = io.StringIO()
    handler = logging.StreamHandler(text)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    loggers = [logging.getLogger(n) for n in ("prefect.task_runs", "prefect.flow_runs")]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        state = pending_flow(return_state=True)
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
    log = text.getvalue()
    assert "Retries are exhausted" in log and "Retry 1/1" in log, log      # both attempts ran, as before
    assert "NoneType: None" not in log, log
    assert exit_code(state) == PENDING
