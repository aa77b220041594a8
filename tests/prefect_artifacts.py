"""Read back what one flow run posted to the session's shared Prefect API: its own artifacts only.

The test server is shared by every test on a worker (``prefect_harness``), so a read by key alone
can return another test's flow run's artifact (a fresh clone's CI once got test_dask_flows'
``verify-pairs-summary`` in test_synthesize_flow). Filter by the flow run's id."""

from __future__ import annotations


def flow_run_artifacts(state, keys: list[str]) -> dict:
    """``{key: artifact}`` for the artifacts with these keys that the flow run behind ``state`` (a
    flow called with ``return_state=True``) created."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=keys), flow_run_id=ArtifactFilterFlowRunId(any_=[run_id])))
    return {a.key: a for a in arts}
