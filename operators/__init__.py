"""changejoin's join state machines: Flink SQL streaming join semantics in pure Python.

Nothing here imports Spark, Kafka or anything that talks to a network: the service wraps these
operators, tests replay changelogs through them on in-memory state. Every operator is a
:class:`KeyedOperator` (``state.py`` states the contract); what each stores per key is the
checkpoint format (``stateformat.py``).
"""
from .condition import ConditionError, compile_condition
from .minibatch import MiniBatchJoin
from .normalize import ChangelogNormalize, upsert_changes
from .regular import RegularJoin, SemiAntiJoin, make_join
from .rowkind import ACCUMULATE, RowKind
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
from .state import EVENT, PROC, Change, Context, InMemoryState, KeyedOperator, KeyState, Output, Record
from .stateformat import STATE_FORMAT_VERSION
from .temporal import EventTimeTemporalJoin, ProcessingTimeTemporalJoin, make_temporal_join
from .upsert import UpsertMaterializer

__all__ = [
    "ACCUMULATE", "EVENT", "PROC", "STATE_FORMAT_VERSION", "Change", "ChangelogNormalize", "ConditionError",
    "ConfigurationError", "Context", "EventTimeTemporalJoin", "InMemoryState", "InputSpec", "JoinSpec",
    "JoinType", "KeyState", "KeyedOperator", "MiniBatchJoin", "Output", "ProcessingTimeTemporalJoin", "Record",
    "RegularJoin", "RowKind", "SemiAntiJoin", "StateLayout", "TemporalJoinSpec", "TemporalKind",
    "UpsertMaterializer", "choose_layout", "compile_condition", "make_join", "make_temporal_join",
    "upsert_changes",
]
