"""Hypothesis strategies of topic names and subscription filters over few distinct level names, so that filters
and topics collide often (the trie's and the retained store's tests)."""

from __future__ import annotations

from hypothesis import strategies as st

TOPIC_LEVELS = st.sampled_from(["a", "b", "", "$SYS", "$x", "c"])
FILTER_LEVELS = st.sampled_from(["a", "b", "", "$SYS", "+", "+"])


@st.composite
def topics(draw: st.DrawFn) -> str:
    return "/".join(draw(st.lists(TOPIC_LEVELS, min_size=1, max_size=5)))


@st.composite
def filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(FILTER_LEVELS, min_size=0, max_size=4))
    if draw(st.booleans()) or not levels:
        levels.append("#")
    return "/".join(levels)
