"""What a lane remembers for its continuations: its most recent response (`PriorContext`, so a
continuation needs no chain read and `store: false` chains continue on the socket; a lane may
continue another lane's response: a fork) and its last model call's context in the upstream's
dialect (protocol/prefix.py), which only its own continuation of its head reuses. A continuation
that fails forgets its parent in its own lane only."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...engine.run import ResponseRun
from ...orchestration.assembly import PriorContext
from ...protocol.prefix import ConvertedPrefix
from .lanes import Lane


def prior_for(lanes: Iterable[Lane], lane: Lane, previous: str | None) -> PriorContext | None:
    """The response `previous` names, if a lane of this connection holds it in memory. A parent
    `lane` forgot (a continuation from it failed here) is not taken from memory: a stored one is
    read from the database as any id the connection does not hold, a `store: false` one is not
    found."""
    if previous is None or previous in lane.evicted:
        return None
    for each in lanes:
        if each.prior is not None and each.prior.response_id == previous:
            return each.prior
    return None


def converted_for(lane: Lane, previous: str | None) -> ConvertedPrefix | None:
    """The lane's converted prefix for a run of it: as it is when the run continues the lane's
    own most recent response, emptied otherwise (a new chain, a fork of another lane's
    response, a chain read from the store). The run's own calls then fill it."""
    converted = lane.converted
    if converted is not None and (lane.prior is None or lane.prior.response_id != previous):
        converted.clear()
    return converted


def remember(lane: Lane, final: dict[str, Any], run: ResponseRun | None) -> None:
    """A response of the lane ended completed or incomplete: continuations start from it."""
    if run is not None:
        lane.prior = PriorContext(
            final["id"],
            run.job.context + run.response["output"],
            stored=bool(final.get("store", True)),
            input_spans=run.job.input_spans,  # the output is no input: nothing before its items is kept
        )
    else:  # run by a worker (always stored): continuations read the chain from the database
        lane.prior = None


def evict(lane: Lane, response_id: str | None) -> None:
    """A continuation from `response_id` failed on `lane`: the lane forgets it (another lane
    that holds it keeps it: a failed fork does not break its source)."""
    if response_id is None:
        return
    lane.evicted.add(response_id)
    if lane.prior is not None and lane.prior.response_id == response_id:
        lane.prior = None
    if lane.converted is not None:
        lane.converted.clear()
