"""The job graph: validation, Flink's subtask wiring, FLIP-147 trigger and FLIP-383 restart sets."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finishable.lifecycle.graph import (
    EdgeKind,
    InvalidJobGraph,
    JobEdge,
    JobGraph,
    JobVertex,
    TaskId,
    UnknownTaskError,
    tasks_to_restart,
    tasks_to_restart_naive,
    tasks_to_trigger,
    tasks_to_trigger_naive,
)

pytestmark = pytest.mark.quick

A2A = EdgeKind.ALL_TO_ALL
PW = EdgeKind.POINTWISE


def graph(vertices: dict[str, int], *edges: tuple[str, str, EdgeKind]) -> JobGraph:
    return JobGraph(
        [JobVertex(name, p) for name, p in vertices.items()],
        [JobEdge(source, target, kind) for source, target, kind in edges],
    )


def t(vertex: str, *subtasks: int) -> frozenset[TaskId]:
    return frozenset(TaskId(vertex, s) for s in subtasks)


# -- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vertices", "edges", "message"),
    [
        (
            [JobVertex("a", 1)],
            [JobEdge("a", "b", PW)],
            "invalid job graph: edge a -> b (POINTWISE) names unknown vertex 'b'",
        ),
        (
            [JobVertex("a", 1)],
            [JobEdge("x", "y", A2A)],
            "invalid job graph: edge x -> y (ALL_TO_ALL) names unknown vertex 'x' and 'y'",
        ),
        (
            [JobVertex("a", 1), JobVertex("a", 2)],
            [],
            "invalid job graph: duplicate vertex name 'a'",
        ),
        (
            [JobVertex("a", 0)],
            [],
            "invalid job graph: vertex 'a' has parallelism 0; it must be at least 1",
        ),
        (
            [JobVertex("", 1)],
            [],
            "invalid job graph: a vertex has an empty name",
        ),
        (
            [JobVertex("a", 1), JobVertex("b", 1)],
            [JobEdge("a", "b", PW), JobEdge("a", "b", A2A)],
            "invalid job graph: duplicate edge a -> b (ALL_TO_ALL): "
            "a -> b (POINTWISE) already connects these vertices",
        ),
        (
            [JobVertex("a", 1)],
            [JobEdge("a", "a", PW)],
            "invalid job graph: the job graph has a cycle: a -> a",
        ),
        (
            # src feeds the cycle, out hangs off it: neither is on the cycle, so neither is named.
            [JobVertex(n, 2) for n in ("src", "c", "a", "b", "out")],
            [
                JobEdge("src", "a", PW),
                JobEdge("a", "b", A2A),
                JobEdge("b", "c", PW),
                JobEdge("c", "a", A2A),
                JobEdge("c", "out", PW),
            ],
            "invalid job graph: the job graph has a cycle: c -> a -> b -> c",
        ),
    ],
)
def test_invalid_graphs_are_refused_naming_the_problem(
    vertices: list[JobVertex], edges: list[JobEdge], message: str
) -> None:
    with pytest.raises(InvalidJobGraph) as caught:
        JobGraph(vertices, edges)
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(InvalidJobGraph) as caught:
        JobGraph(
            [JobVertex("a", -1), JobVertex("a", 1), JobVertex("b", 1)],
            [JobEdge("a", "zzz", PW), JobEdge("a", "b", PW), JobEdge("a", "b", PW)],
        )
    assert caught.value.problems == (
        "vertex 'a' has parallelism -1; it must be at least 1",
        "duplicate vertex name 'a'",
        "edge a -> zzz (POINTWISE) names unknown vertex 'zzz'",
        "duplicate edge a -> b (POINTWISE): a -> b (POINTWISE) already connects these vertices",
    )


def test_questions_about_unknown_tasks_are_refused() -> None:
    g = graph({"a": 2})
    with pytest.raises(UnknownTaskError, match=r"not tasks of this job graph: a\[2\], b\[0\]"):
        tasks_to_trigger(g, {TaskId("b", 0), TaskId("a", 2), TaskId("a", 1)})
    with pytest.raises(UnknownTaskError):
        tasks_to_restart(g, {TaskId("a", -1)})
    with pytest.raises(UnknownTaskError):
        g.upstream_tasks(TaskId("a", 5))
    with pytest.raises(KeyError, match="no vertex 'nope'"):
        g.inputs("nope")


# -- helpers ------------------------------------------------------------------------------------


def test_task_ids_print_order_and_hash_like_values() -> None:
    assert str(TaskId("parse", 3)) == "parse[3]"
    assert sorted([TaskId("b", 0), TaskId("a", 10), TaskId("a", 2)]) == [
        TaskId("a", 2),
        TaskId("a", 10),
        TaskId("b", 0),
    ]
    assert len({TaskId("a", 1), TaskId("a", 1)}) == 1
    assert EdgeKind("POINTWISE") is PW
    assert f"{A2A}" == "ALL_TO_ALL"


def test_graph_helpers() -> None:
    # Declared out of order on purpose: the topological order does not depend on declaration.
    g = graph(
        {"sink": 1, "join": 2, "left": 2, "right": 3, "audit": 1},
        ("left", "join", PW),
        ("right", "join", A2A),
        ("join", "sink", A2A),
        ("right", "audit", A2A),
    )
    order = g.topological_order()
    assert set(order) == {"sink", "join", "left", "right", "audit"}
    for edge in g.edges:
        assert order.index(edge.source) < order.index(edge.target)
    assert set(g.sources()) == {"left", "right"}
    assert set(g.sinks()) == {"sink", "audit"}
    assert g.inputs("join") == (JobEdge("left", "join", PW), JobEdge("right", "join", A2A))
    assert g.outputs("right") == (JobEdge("right", "join", A2A), JobEdge("right", "audit", A2A))
    assert g.inputs("left") == ()
    assert g.task_count() == 9
    assert len(g.tasks()) == 9
    assert set(g.tasks()) == t("sink", 0) | t("join", 0, 1) | t("left", 0, 1) | t(
        "right", 0, 1, 2
    ) | t("audit", 0)
    assert g.tasks_of("right") == (TaskId("right", 0), TaskId("right", 1), TaskId("right", 2))
    assert TaskId("right", 2) in g
    assert TaskId("right", 3) not in g
    assert set(g.upstream_tasks(TaskId("join", 1))) == t("left", 1) | t("right", 0, 1, 2)
    assert set(g.downstream_tasks(TaskId("right", 0))) == t("join", 0, 1) | t("audit", 0)
    assert g.upstream_tasks(TaskId("left", 0)) == ()
    assert g.downstream_tasks(TaskId("sink", 0)) == ()
    assert g == JobGraph(reversed(g.vertices), reversed(g.edges))
    assert hash(g) == hash(JobGraph(reversed(g.vertices), reversed(g.edges)))


# -- POINTWISE wiring ---------------------------------------------------------------------------


def upstream_map(p_up: int, p_down: int) -> dict[int, set[int]]:
    g = graph({"u": p_up, "d": p_down}, ("u", "d", PW))
    return {i: {x.subtask for x in g.upstream_tasks(TaskId("d", i))} for i in range(p_down)}


def downstream_map(p_up: int, p_down: int) -> dict[int, set[int]]:
    g = graph({"u": p_up, "d": p_down}, ("u", "d", PW))
    return {j: {x.subtask for x in g.downstream_tasks(TaskId("u", j))} for j in range(p_up)}


@pytest.mark.parametrize(
    ("p_up", "p_down", "consumed_by_downstream"),
    [
        (3, 3, {0: {0}, 1: {1}, 2: {2}}),
        (4, 2, {0: {0, 1}, 1: {2, 3}}),
        (3, 2, {0: {0}, 1: {1, 2}}),
        (5, 3, {0: {0}, 1: {1, 2}, 2: {3, 4}}),
        (2, 4, {0: {0}, 1: {0}, 2: {1}, 3: {1}}),
        # Flink's own test (VertexInputInfoComputationUtilsTest,
        # testComputeVertexInputInfoForPointwiseWithNonDynamicGraph): 2 -> 3 gives downstream 0
        # and 1 partition 0, downstream 2 partition 1. Upstream 0 feeds [0, ceil(3/2)) = {0, 1}.
        (2, 3, {0: {0}, 1: {0}, 2: {1}}),
        (3, 5, {0: {0}, 1: {0}, 2: {1}, 3: {1}, 4: {2}}),
        (1, 3, {0: {0}, 1: {0}, 2: {0}}),
        (3, 1, {0: {0, 1, 2}}),
    ],
)
def test_pointwise_wiring_hand_computed(
    p_up: int, p_down: int, consumed_by_downstream: dict[int, set[int]]
) -> None:
    assert upstream_map(p_up, p_down) == consumed_by_downstream
    fed: dict[int, set[int]] = {j: set() for j in range(p_up)}
    for i, ups in consumed_by_downstream.items():
        for j in ups:
            fed[j].add(i)
    assert downstream_map(p_up, p_down) == fed


def flink_connect_pointwise(source_count: int, target_count: int) -> set[tuple[int, int]]:
    """A line-by-line transcription of Flink's EdgeManagerBuildUtil.connectPointwise loops.

    Returns the (upstream, downstream) subtask pairs it connects.
    """
    pairs: set[tuple[int, int]] = set()
    if source_count == target_count:
        pairs.update((i, i) for i in range(source_count))
    elif source_count > target_count:
        for index in range(target_count):
            start = index * source_count // target_count
            end = (index + 1) * source_count // target_count
            pairs.update((i, index) for i in range(start, end))
    else:
        for partition_num in range(source_count):
            start = (partition_num * target_count + source_count - 1) // source_count
            end = ((partition_num + 1) * target_count + source_count - 1) // source_count
            pairs.update((partition_num, i) for i in range(start, end))
    return pairs


@pytest.mark.parametrize("p_up", range(1, 13))
def test_pointwise_wiring_matches_flink_in_both_directions(p_up: int) -> None:
    for p_down in range(1, 13):
        expected = flink_connect_pointwise(p_up, p_down)
        from_downstream = {(j, i) for i, ups in upstream_map(p_up, p_down).items() for j in ups}
        from_upstream = {(j, i) for j, downs in downstream_map(p_up, p_down).items() for i in downs}
        assert from_downstream == expected, (p_up, p_down)
        assert from_upstream == expected, (p_up, p_down)


# -- FLIP-147: tasks to trigger -----------------------------------------------------------------


def test_flip147_figure2_a_finished_b_running_triggers_c() -> None:
    # A -> C and B -> D. Triggering only the running source B would leave C, whose only input A
    # has finished, without a barrier: C becomes a root and is triggered directly.
    g = graph({"A": 1, "B": 1, "C": 1, "D": 1}, ("A", "C", PW), ("B", "D", A2A))
    running = t("B", 0) | t("C", 0) | t("D", 0)
    assert tasks_to_trigger(g, running) == t("B", 0) | t("C", 0)
    assert tasks_to_trigger_naive(g, running) == t("B", 0) | t("C", 0)


def test_trigger_all_to_all_waits_for_the_whole_upstream_vertex() -> None:
    g = graph({"src": 3, "agg": 2}, ("src", "agg", A2A))
    everything = frozenset(g.tasks())
    assert tasks_to_trigger(g, everything) == t("src", 0, 1, 2)
    # One source subtask still running: it feeds every agg subtask, so agg still gets barriers.
    assert tasks_to_trigger(g, t("src", 1) | t("agg", 0, 1)) == t("src", 1)
    assert tasks_to_trigger(g, t("agg", 0, 1)) == t("agg", 0, 1)
    assert tasks_to_trigger(g, t("agg", 1)) == t("agg", 1)
    assert tasks_to_trigger(g, frozenset()) == frozenset()


def test_trigger_pointwise_looks_at_each_subtask() -> None:
    # 4 -> 2 POINTWISE: map[0] consumes src[0..1], map[1] consumes src[2..3].
    g = graph({"src": 4, "map": 2, "sink": 2}, ("src", "map", PW), ("map", "sink", PW))
    running = t("src", 2) | t("map", 0, 1) | t("sink", 0, 1)
    assert tasks_to_trigger(g, running) == t("src", 2) | t("map", 0)
    # Every source runs: the fast per-vertex check skips map without looking at its subtasks.
    assert tasks_to_trigger(g, frozenset(g.tasks())) == t("src", 0, 1, 2, 3)


def test_trigger_mixes_pointwise_and_finished_all_to_all_inputs() -> None:
    g = graph(
        {"dim": 2, "facts": 2, "join": 2},
        ("dim", "join", A2A),
        ("facts", "join", PW),
    )
    # dim finished entirely, so only the POINTWISE precedent decides, subtask by subtask.
    running = t("facts", 1) | t("join", 0, 1)
    assert tasks_to_trigger(g, running) == t("facts", 1) | t("join", 0)
    # dim[0] still runs: it feeds both join subtasks.
    assert tasks_to_trigger(g, running | t("dim", 0)) == t("facts", 1) | t("dim", 0)


# -- FLIP-383: tasks to restart -----------------------------------------------------------------


def test_restart_walks_up_from_unfinished_sinks_only() -> None:
    #  read(2) -PW-> parse(2) -A2A-> agg(2) -PW-> write(2)
    #                parse(2) -PW-> audit(2)
    g = graph(
        {"read": 2, "parse": 2, "agg": 2, "write": 2, "audit": 2},
        ("read", "parse", PW),
        ("parse", "agg", A2A),
        ("agg", "write", PW),
        ("parse", "audit", PW),
    )
    # The driver died while agg ran: read and parse survived, so did agg[0] and audit.
    finished = t("read", 0, 1) | t("parse", 0, 1) | t("agg", 0) | t("audit", 0, 1)
    assert tasks_to_restart(g, finished) == t("write", 0, 1) | t("agg", 1)
    # parse[1]'s partitions were lost: agg[1] needs all of parse (ALL_TO_ALL), so parse[1] runs
    # again and, through POINTWISE, read[1] too. audit[1] is finished: not re-run for parse[1].
    lost = finished - t("parse", 1) - t("read", 1)
    assert tasks_to_restart(g, lost) == t("write", 0, 1) | t("agg", 1) | t("parse", 1) | t(
        "read", 1
    )
    assert tasks_to_restart(g, frozenset(g.tasks())) == frozenset()
    assert tasks_to_restart(g, frozenset()) == frozenset(g.tasks())


def test_restart_skips_work_no_unfinished_sink_needs() -> None:
    # src -> left_sink and src -> right_sink. left_sink finished; right_sink did not.
    g = graph(
        {"src": 4, "prep": 4, "left_sink": 2, "right_sink": 4},
        ("src", "prep", PW),
        ("prep", "left_sink", PW),
        ("src", "right_sink", PW),
    )
    finished = t("left_sink", 0, 1)
    # prep's output only served left_sink, which is done: prep is not scheduled although unfinished.
    assert tasks_to_restart(g, finished) == t("right_sink", 0, 1, 2, 3) | t("src", 0, 1, 2, 3)
    assert tasks_to_restart(g, finished | t("right_sink", 2)) == t("right_sink", 0, 1, 3) | t(
        "src", 0, 1, 3
    )


# -- no ALL_TO_ALL pair is ever enumerated by the O(n) algorithms -------------------------------


@contextmanager
def counting_connections(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[EdgeKind]]:
    """Counts the subtask connections handed out by the graph, per edge kind."""
    counts: Counter[EdgeKind] = Counter()

    def counted(original: Callable[[JobGraph, JobEdge, int], range]) -> Callable[..., range]:
        def wrapper(self: JobGraph, edge: JobEdge, subtask: int) -> range:
            result = original(self, edge, subtask)
            counts[edge.kind] += len(result)
            return result

        return wrapper

    with monkeypatch.context() as patch:
        patch.setattr(JobGraph, "upstream_subtasks", counted(JobGraph.upstream_subtasks))
        patch.setattr(JobGraph, "downstream_subtasks", counted(JobGraph.downstream_subtasks))
        yield counts


def test_the_counter_sees_the_naive_algorithm_enumerate_all_to_all_pairs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    g = graph({"a": 20, "b": 30}, ("a", "b", A2A))
    with counting_connections(monkeypatch) as counts:
        tasks_to_trigger_naive(g, t("b", *range(30)))
    assert counts[A2A] == 20 * 30


def test_large_all_to_all_is_handled_per_vertex(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 2000
    g = graph(
        {"a": n, "b": n, "c": n},
        ("a", "b", A2A),
        ("b", "c", A2A),
    )
    a, b, c = (frozenset(g.tasks_of(v)) for v in "abc")
    with counting_connections(monkeypatch) as counts:
        assert tasks_to_trigger(g, a | b | c) == a
        assert tasks_to_trigger(g, b | c) == b
        assert tasks_to_trigger(g, c | {TaskId("b", 7)}) == {TaskId("b", 7)}
        assert tasks_to_trigger(g, c) == c
        assert tasks_to_restart(g, frozenset()) == a | b | c
        assert tasks_to_restart(g, a | {TaskId("b", 0)}) == (b - {TaskId("b", 0)}) | c
    # n² = 4 million pairs per edge were never looked at.
    assert counts[A2A] == 0


def test_pointwise_cost_is_linear(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 3000
    g = graph({"a": n, "b": n // 3}, ("a", "b", PW))
    with counting_connections(monkeypatch) as counts:
        tasks_to_trigger(g, frozenset(g.tasks()) - {TaskId("a", 0)})
        tasks_to_restart(g, frozenset())
    # Each of the n POINTWISE connections is looked at most once per algorithm.
    assert counts[PW] <= 2 * n
    assert counts[A2A] == 0


# -- properties on random DAGs ------------------------------------------------------------------


@st.composite
def job_graphs(draw: st.DrawFn) -> JobGraph:
    """Random DAGs: edges only go from an earlier to a later vertex of a hidden order."""
    count = draw(st.integers(min_value=1, max_value=7))
    vertices = [
        JobVertex(f"v{i}", draw(st.integers(min_value=1, max_value=5))) for i in range(count)
    ]
    edges = [
        JobEdge(f"v{i}", f"v{j}", kind)
        for j in range(count)
        for i in range(j)
        if (kind := draw(st.sampled_from([None, None, A2A, PW]))) is not None
    ]
    # Declaration order must not matter: shuffle both.
    return JobGraph(draw(st.permutations(vertices)), draw(st.permutations(edges)))


@st.composite
def graphs_with_subset(draw: st.DrawFn) -> tuple[JobGraph, frozenset[TaskId]]:
    g = draw(job_graphs())
    tasks = g.tasks()
    chosen = draw(st.lists(st.booleans(), min_size=len(tasks), max_size=len(tasks)))
    return g, frozenset(task for task, keep in zip(tasks, chosen, strict=True) if keep)


def finished_closed_upward(g: JobGraph, seeds: frozenset[TaskId]) -> frozenset[TaskId]:
    """The seeds and all their ancestors: a state a real job can be in (inputs finish first)."""
    done = set(seeds)
    stack = list(seeds)
    while stack:
        for up in g.upstream_tasks(stack.pop()):
            if up not in done:
                done.add(up)
                stack.append(up)
    return frozenset(done)


SETTINGS = settings(max_examples=300, deadline=None)


@SETTINGS
@given(graphs_with_subset())
def test_wiring_directions_agree(case: tuple[JobGraph, frozenset[TaskId]]) -> None:
    g, _ = case
    ups = {(u, d) for d in g.tasks() for u in g.upstream_tasks(d)}
    downs = {(u, d) for u in g.tasks() for d in g.downstream_tasks(u)}
    assert ups == downs
    for edge in g.edges:
        for s in range(g.vertex(edge.target).parallelism):
            assert len(g.upstream_subtasks(edge, s)) >= 1
        for s in range(g.vertex(edge.source).parallelism):
            assert len(g.downstream_subtasks(edge, s)) >= 1


@SETTINGS
@given(graphs_with_subset())
def test_trigger_matches_the_definition(case: tuple[JobGraph, frozenset[TaskId]]) -> None:
    g, running = case
    triggered = tasks_to_trigger(g, running)
    assert triggered == tasks_to_trigger_naive(g, running)
    assert triggered <= running
    # Every running task hears of the checkpoint: it is triggered, or a barrier reaches it along
    # running tasks from a triggered one.
    reached = set(triggered)
    for name in g.topological_order():
        for task in g.tasks_of(name):
            if task in running and any(up in reached for up in g.upstream_tasks(task)):
                reached.add(task)
    assert reached == running


@SETTINGS
@given(graphs_with_subset())
def test_trigger_on_reachable_states(case: tuple[JobGraph, frozenset[TaskId]]) -> None:
    g, seeds = case
    running = frozenset(g.tasks()) - finished_closed_upward(g, seeds)
    assert tasks_to_trigger(g, running) == tasks_to_trigger_naive(g, running)


@SETTINGS
@given(graphs_with_subset())
def test_restart_matches_the_definition(case: tuple[JobGraph, frozenset[TaskId]]) -> None:
    g, finished = case
    scheduled = tasks_to_restart(g, finished)
    assert scheduled == tasks_to_restart_naive(g, finished)

    unfinished_sinks = {
        task for sink in g.sinks() for task in g.tasks_of(sink) if task not in finished
    }
    assert unfinished_sinks <= scheduled
    assert not scheduled & finished
    # Closed upward: whatever a scheduled task reads is either reused or recomputed.
    for task in scheduled:
        for up in g.upstream_tasks(task):
            assert up in finished or up in scheduled, (task, up)
    # Minimal: every scheduled task feeds an unfinished sink task through scheduled tasks
    # (checked downstream, the other direction of the wiring from the one the algorithm walks).
    feeds_sink: dict[TaskId, bool] = {}
    for name in reversed(g.topological_order()):
        for task in g.tasks_of(name):
            feeds_sink[task] = task in unfinished_sinks or any(
                down in scheduled and feeds_sink[down] for down in g.downstream_tasks(task)
            )
    assert all(feeds_sink[task] for task in scheduled)


@SETTINGS
@given(job_graphs())
def test_restart_without_survivors_reruns_everything(g: JobGraph) -> None:
    assert tasks_to_restart(g, frozenset()) == frozenset(g.tasks())
    assert tasks_to_restart(g, frozenset(g.tasks())) == frozenset()
