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

#: Each spec's operator: one dispatch for the service's plan (``JoinPlan.operator``) and the
#: conformance runner, so that a new join kind is wired in one place.
_MAKERS = ((JoinSpec, make_join), (TemporalJoinSpec, make_temporal_join), (IntervalJoinSpec, make_interval_join),
           (WindowJoinSpec, make_window_join), (LookupJoinSpec, make_lookup_join))


def operator_for(spec):
    """The operator a spec describes (``make_join`` for a :class:`JoinSpec`, ...); raises
    ConfigurationError for a spec the operators refuse."""
    for kind, make in _MAKERS:
        if type(spec) is kind:
            return make(spec)
    raise TypeError(f"no operator for {type(spec).__name__}")

__all__ = [
    "ACCUMULATE", "EVENT", "PROC", "STATE_FORMAT_VERSION", "Change", "ChangelogNormalize", "ConditionError",
    "ConfigurationError", "Context", "EventTimeTemporalJoin", "Identity", "InputSpec", "IntervalJoin",
    "IntervalJoinSpec", "JoinSpec", "JoinType", "KeyState", "KeyedOperator", "LookupJoin", "LookupJoinSpec",
    "MiniBatchJoin",
    "NegativeSizeIntervalJoin", "Output", "OutputCalc", "ProcessingTimeTemporalJoin", "Record", "RegularJoin", "RowKind",
    "SemiAntiJoin", "StateLayout", "TemporalJoinSpec", "TemporalKind", "UpsertMaterializer", "WindowJoin",
    "WindowJoinSpec", "WindowKind", "WindowSpec", "choose_layout", "compile_condition", "make_interval_join",
    "make_join", "make_lookup_join", "make_temporal_join", "make_window_join", "operator_for", "upsert_changes",
]
