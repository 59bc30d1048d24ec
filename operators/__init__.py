"""changejoin's join state machines: Flink SQL streaming join semantics in pure Python.

Nothing here imports Spark, Kafka or anything that talks to a network: the service wraps these
operators, tests replay changelogs through them on in-memory state.
"""
from .condition import ConditionError, compile_condition
from .minibatch import process_bundle
from .regular import RegularJoin, SemiAntiJoin, make_join
from .rowkind import RowKind
from .spec import (
    ConfigurationError,
    InputSpec,
    JoinSpec,
    JoinType,
    StateLayout,
    TemporalJoinSpec,
    TemporalKind,
    choose_layout,
)
from .state import EVENT, PROC, Context, InMemoryState, KeyState, Output
from .temporal import EventTimeTemporalJoin, ProcessingTimeTemporalJoin, make_temporal_join

__all__ = [
    "EVENT", "PROC", "ConditionError", "ConfigurationError", "Context", "EventTimeTemporalJoin",
    "InMemoryState", "InputSpec", "JoinSpec", "JoinType", "KeyState", "Output",
    "ProcessingTimeTemporalJoin", "RegularJoin", "RowKind", "SemiAntiJoin", "StateLayout",
    "TemporalJoinSpec", "TemporalKind", "choose_layout", "compile_condition", "make_join",
    "make_temporal_join", "process_bundle",
]
