"""What every flow shares with the stage CLIs: the same one-line errors and exit codes, and the
run's summary and report posted as Prefect markdown artifacts.

A stage CLI answers a refused input (a missing file, a stale or unwritable run directory, a bad
config) with one ``error: ...`` line on stderr and exit code 2, and a run left incomplete by an
outage with exit code 3. In a flow the same refusal is a :class:`StageError`: the task that met it
*returns* a ``Failed`` state whose message is that line (:func:`stage_task` does this), so Prefect
logs one ``Finished in state Failed('error: ...')`` line instead of a traceback, and does not
retry (nothing would change; :func:`retry_unless_refused`). The flow hands the failed state on
(:func:`unwrap`), and a flow's own command (``python -m flows.build_graphs``) prints the line and
exits with the CLI's code (:func:`exit_code`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

from cli.config import Configurable

# The exception every stage CLI prints as one ``error:`` line (a missing input; RunDirError and
# StaleInputError are FileNotFoundErrors too); a task whose CLI refuses more names them (``refused``).
REFUSED: tuple[type[BaseException], ...] = (FileNotFoundError,)
PENDING = 3          # the CLIs' exit code for work left pending by an outage (a rerun resumes it)


class StageError(Exception):
    """A stage refused its input (``code`` 2) or left work pending (3): the CLI's message and code."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.message, self.code = message, code

    def __reduce__(self):
        return type(self), (self.message, self.code)


class StageFailed(Exception):
    """Raised by :func:`unwrap` when a task or subflow ended in a ``Failed`` state (carried in ``state``)."""

    def __init__(self, state):
        super().__init__(state.message)
        self.state = state


class _RefusalLogged(logging.Filter):
    """Drop the engine's "Engine execution exited with unexpected exception" record, and its
    traceback through Prefect's own frames, when the exception is a :class:`StageError`: a served
    flow run (``prefect deployment run``) re-raises its final state after logging
    ``Finished in state Failed('error: ...')``, which already holds the line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, StageError) and record.getMessage().startswith("Engine execution exited"))


class _NoEmptyTraceback(logging.Filter):
    """Keep a record but drop an ``exc_info`` with no exception in it: Prefect logs a task's
    "Retries are exhausted" with ``exc_info=True`` also when the task *returned* its ``Failed``
    state (work left pending, :func:`stage_task`), where no exception is active, and the formatter
    writes that as a stray ``NoneType: None`` line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is None:
            record.exc_info, record.exc_text = None, None
        return True


logging.getLogger("prefect.flow_runs").addFilter(_RefusalLogged())
for _name in ("prefect.task_runs", "prefect.flow_runs"):
    logging.getLogger(_name).addFilter(_NoEmptyTraceback())


def failed(error: StageError):
    """The ``Failed`` state of a refusal: ``error: <message>`` (what the CLI prints), no traceback."""
    from prefect.states import Failed

    return Failed(message=f"error: {error.message}", data=error)


def stage_task(fn=None, *, refused: tuple[type[BaseException], ...] = REFUSED):
    """Wrap a task body: a ``StageError``, or one of ``refused`` (the CLI's one-line errors),
    becomes a returned ``Failed`` state instead of a raised exception and its traceback."""
    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except StageError as e:
                return failed(e)
            except refused as e:
                return failed(StageError(str(e)))
        return inner
    return wrap(fn) if fn is not None else wrap


def error_of(state) -> StageError | None:
    """The StageError a failed state carries (None: another failure)."""
    data = getattr(state, "data", None)
    if isinstance(data, StageError):
        return data
    try:
        value = state.result(raise_on_failure=False)
    except Exception:  # noqa: BLE001 - a result that cannot be read is not a refusal
        return None
    return value if isinstance(value, StageError) else None


def retry_unless_refused(task, task_run, state) -> bool:
    """Retry condition of the stage tasks: a refused input fails at once (a retry would meet the
    same input); anything else (an outage, work left pending) is retried."""
    error = error_of(state)
    return error is None or error.code == PENDING


def unwrap(state):
    """The result of a task or subflow called with ``return_state=True``; a failed one raises
    :class:`StageFailed`, which :func:`cli_flow` turns back into the returned ``Failed`` state."""
    if state.is_failed() or state.is_crashed() or state.is_cancelled():
        raise StageFailed(state)
    return state.result()


def dask_gave_up(future, what: str) -> None:
    """Raise a :class:`StageError` (code 1) when Dask gave up on the task behind ``future`` (its
    workers died running it, e.g. over their memory limit): its Prefect state never leaves
    ``Pending`` then, and a flow that waited for it would wait for ever."""
    wrapped = getattr(future, "wrapped_future", None)      # a Dask future has a status; a thread's has none
    if getattr(wrapped, "status", None) == "error":
        raise StageError(f"{what} failed on the Dask cluster: {wrapped.exception()!r} (a worker died running it: "
                         f"over --dask-memory-limit?)", code=1)


def final_state(future):
    """A submitted task's final state, waited for (a Dask future's state then holds its result;
    read before ``wait``, it is fetched from the API without it)."""
    future.wait()
    return future.state


def cli_flow(fn):
    """Wrap a flow body so that a failed task or subflow (:func:`unwrap`) or a refusal in the
    body itself ends the flow in that ``Failed`` state (its one line), not with a traceback."""
    @functools.wraps(fn)
    def inner(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except StageFailed as e:          # the flow's own state, with the task's line (not "1/1 states failed")
            from prefect.states import Failed

            error = error_of(e.state)
            return failed(error) if error else Failed(message=e.state.message)
        except StageError as e:
            return failed(e)
        except REFUSED as e:
            return failed(StageError(str(e)))
    # Prefect validates a flow's parameters by its signature, resolving string annotations in the
    # wrapper's globals (this module's): give it the classes, resolved where the flow is defined.
    inner.__signature__ = inspect.signature(fn, eval_str=True)
    return inner


def exit_code(state) -> int:
    """A flow's command ends like the stage's CLI: the ``error:`` line on stderr and its code (2 for
    a refused input, 3 for pending work, 1 for any other failure); 0 when the run completed."""
    if state.is_completed():
        return 0
    error = error_of(state)
    print(error and f"error: {error.message}" or (state.message or f"flow run ended {state.name}"), file=sys.stderr)
    return error.code if error else 1


def post_markdown(key: str, markdown: str, description: str | None = None) -> None:
    """Post ``markdown`` as a Prefect artifact of the current flow run (shown in the UI under
    Artifacts; ``key`` groups one per run). Outside a flow run, or with no API, nothing is posted."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.context import FlowRunContext

    if FlowRunContext.get() is None:
        return
    create_markdown_artifact(markdown=markdown, key=key, description=description)


# -- Dask (the flows' --dask-* flags) ----------------------------------------------------------------
def _memory_limit(text: str) -> str:
    """--dask-memory-limit, checked where it is parsed (a size Dask reads, above zero)."""
    import argparse

    from dask.utils import parse_bytes

    try:
        size = parse_bytes(text)
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (2GB, 512MiB)") from None
    if size <= 0:
        raise argparse.ArgumentTypeError(f"must be above zero, not {text!r}")
    return text


@dataclass
class DaskConfig(Configurable):
    """Where a flow's tasks run when they leave the calling process: an existing Dask cluster
    (``--dask-address``) or a local one (``--dask-local``, ``--dask-workers`` processes), through
    ``prefect-dask``'s ``DaskTaskRunner``. The run directory and the LLM cache folder must be paths
    every worker sees (a shared filesystem on a real cluster)."""

    ARG_GROUP = "Dask"

    dask_address: str | None = field(default=None, metadata={
        "metavar": "ADDRESS", "help": "scheduler address of an existing Dask cluster (tcp://host:8786)"})
    dask_local: bool = field(default=False, metadata={"help": "start a local Dask cluster for the command"})
    dask_workers: int = field(default=2, metadata={
        "min": 1, "metavar": "N", "help": "--dask-local: worker processes of the local cluster (one thread each)"})
    dask_memory_limit: str | None = field(default=None, metadata={
        "type": _memory_limit, "metavar": "BYTES",
        "help": "--dask-local: memory limit of each worker (2GB, 512MiB; Dask spills, pauses and restarts a "
                "worker by it); default: Dask's (the machine's memory over the workers)"})


@contextlib.contextmanager
def dask_scheduler(dask: DaskConfig | None) -> Iterator[str | None]:
    """The scheduler address a command's flows send their tasks to: ``--dask-address``, or a local
    cluster started here for the whole command (its workers report to this process's Prefect API,
    ``search.workers.prefect_api_url``; without it each would start a temporary API of its own) and
    closed at the end; None without Dask."""
    if dask is None or not (dask.dask_address or dask.dask_local):
        yield None
    elif dask.dask_address:
        yield dask.dask_address
    else:
        from distributed import LocalCluster

        from search.workers import prefect_api_url

        limit = {"memory_limit": dask.dask_memory_limit} if dask.dask_memory_limit else {}
        with LocalCluster(n_workers=dask.dask_workers, threads_per_worker=1, processes=True,
                          env={"PREFECT_API_URL": prefect_api_url()}, **limit) as cluster:
            yield cluster.scheduler_address


def on_dask(fl, address: str | None):
    """The flow ``fl`` with its tasks on the Dask scheduler at ``address`` (None: ``fl`` as it is)."""
    if address is None:
        return fl
    from prefect_dask import DaskTaskRunner

    return fl.with_options(task_runner=DaskTaskRunner(address=address))


def dask_threads(address: str) -> int:
    """Worker threads of the Dask cluster at ``address`` (how many tasks it runs at once)."""
    from distributed import Client

    with Client(address, timeout=60) as client:
        return max(sum(client.nthreads().values()), 1)
