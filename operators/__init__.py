"""changejoin's join state machines: Flink SQL streaming join semantics in pure Python.

Nothing here imports Spark, Kafka or anything that talks to a network: the service wraps these
operators; tests, the conformance runner and benchmarks replay changelogs through them on
in-memory state (``operators.testing.LocalRunner``, not imported here). Every operator is a
:class:`KeyedOperator` (``state.py`` states the contract); what each stores per key is the
checkpoint format (``stateformat.py``).
"""
from .calc import OutputCalc
from .condition import ConditionError, compile_condition
from .interval import IntervalJoin, NegativeSizeIntervalJoin, make_interval_join
from .lookup import Identity, LookupJoin, LookupJoinSpec, make_lookup_join
from .minibatch import MiniBatchJoin
from .normalize import ChangelogNormalize, upsert_changes
from .regular import RegularJoin, SemiAntiJoin, make_join
from .rowkind import ACCUMULATE, RowKind
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
from .state import EVENT, PROC, Change, Context, KeyedOperator, KeyState, Output, Record
from .stateformat import STATE_FORMAT_VERSION
from .temporal import EventTimeTemporalJoin, ProcessingTimeTemporalJoin, make_temporal_join
from .upsert import UpsertMaterializer
from .window import WindowJoin, make_window_join

__all__ = [
    "ACCUMULATE", "EVENT", "PROC", "STATE_FORMAT_VERSION", "Change", "ChangelogNormalize", "ConditionError",
    "ConfigurationError", "Context", "EventTimeTemporalJoin", "Identity", "InputSpec", "IntervalJoin",
    "IntervalJoinSpec", "JoinSpec", "JoinType", "KeyState", "KeyedOperator", "LookupJoin", "LookupJoinSpec",
    "MiniBatchJoin",
    "NegativeSizeIntervalJoin", "Output", "OutputCalc", "ProcessingTimeTemporalJoin", "Record", "RegularJoin", "RowKind",
    "SemiAntiJoin", "StateLayout", "TemporalJoinSpec", "TemporalKind", "UpsertMaterializer", "WindowJoin",
    "WindowJoinSpec", "WindowKind", "WindowSpec", "choose_layout", "compile_condition", "make_interval_join",
    "make_join", "make_lookup_join", "make_temporal_join", "make_window_join", "upsert_changes",
]
