"""changejoin's join state machines: Flink SQL streaming join semantics in pure Python.

Nothing here imports Spark, Kafka or anything that talks to a network: the service wraps these
operators, tests replay changelogs through them on in-memory state.
"""
from .condition import ConditionError, compile_condition
from .interval import IntervalJoin, NegativeSizeIntervalJoin, make_interval_join
from .minibatch import process_bundle
from .regular import RegularJoin, SemiAntiJoin, make_join
from .rowkind import RowKind
from .spec import (
    ConfigurationError,
    InputSpec,
    IntervalJoinSpec,
    JoinSpec,
    JoinType,
    StateLayout,
    TemporalJoinSpec,
    TemporalKind,
    WindowJoinSpec,
    WindowKind,
    WindowSpec,
    choose_layout,
)
from .state import EVENT, PROC, Context, InMemoryState, KeyState, Output
from .temporal import EventTimeTemporalJoin, ProcessingTimeTemporalJoin, make_temporal_join
from .window import WindowJoin, make_window_join

__all__ = [
    "EVENT", "PROC", "ConditionError", "ConfigurationError", "Context", "EventTimeTemporalJoin",
    "InMemoryState", "InputSpec", "IntervalJoin", "IntervalJoinSpec", "JoinSpec", "JoinType", "KeyState",
    "NegativeSizeIntervalJoin", "Output", "ProcessingTimeTemporalJoin", "RegularJoin", "RowKind",
    "SemiAntiJoin", "StateLayout", "TemporalJoinSpec", "TemporalKind", "WindowJoin", "WindowJoinSpec",
    "WindowKind", "WindowSpec", "choose_layout", "compile_condition", "make_interval_join", "make_join",
    "make_temporal_join", "make_window_join", "process_bundle",
]
